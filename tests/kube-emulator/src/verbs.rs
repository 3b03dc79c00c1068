//! What each API verb does to the store — upstream's generic registry
//! (`registry/generic/registry/store.go`) plus the controllers whose
//! effects a client can observe: get, list (exact and paginated), create,
//! update, patch, delete (preconditions, finalizers and
//! `deletionTimestamp`), namespace termination and the marking of a
//! deleted CRD (its cleanup is `crd_finalizer`'s).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::body;
use crate::kinds::{self, FieldValidation, Subresource};
use crate::managed_fields;
use crate::meta;
use crate::patch::{self, PatchType};
use crate::resources::{ResourceType, Rules, StorageKey};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, BadValue, FieldError, GroupKind, quote, success_status};
use crate::store::{ChangeKind, State};

/// The object a request addresses.
#[derive(Debug, Clone)]
pub struct Target {
    pub rt: Arc<ResourceType>,
    /// Empty for cluster-scoped resources.
    pub namespace: String,
    pub name: String,
    pub sub: Subresource,
}

/// Options every write takes.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    /// `fieldManager`; an apply's owns the fields it applies.
    pub field_manager: String,
    pub field_validation: FieldValidation,
    /// Keys the request body repeated (strict decoding reports them).
    pub repeated_keys: Vec<String>,
}

/// The result of a write.
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as served on the request's endpoint.
    pub object: Value,
    /// Whether the write created the object (201 rather than 200).
    pub created: bool,
    pub warnings: Vec<String>,
}

/// `DeleteOptions` from the body and query.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub propagation_policy: Option<String>,
    pub dry_run: bool,
}

/// List and watch filters.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    /// Whether a stored object passes, judged on its view at `rt`.
    pub fn matches(&self, rt: &ResourceType, namespace: Option<&str>, stored: &Value) -> bool {
        if namespace.is_some_and(|ns| ns != meta::namespace(stored)) {
            return false;
        }
        if !self.labels.is_empty() && !self.labels.matches(&meta::labels(stored)) {
            return false;
        }
        self.fields.is_empty()
            || self
                .fields
                .matches(&kinds::selectable_fields(rt, &kinds::to_view(rt, stored)))
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

/// List options beyond the filter.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub filter: Filter,
    pub limit: Option<u64>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub version_match: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct ContinueToken {
    /// Where the list is read; none for the latest state (the token a 410
    /// for an expired one offers).
    rv: Option<u64>,
    namespace: String,
    name: String,
}

fn not_found(t: &Target) -> ApiError {
    ApiError::not_found(&t.rt.group_resource(), &t.name)
}

fn current<'a>(state: &'a State, t: &Target) -> Result<&'a Arc<Value>, ApiError> {
    state
        .get(&t.rt.storage, &t.namespace, &t.name)
        .ok_or_else(|| not_found(t))
}

pub fn get(state: &State, t: &Target) -> Result<Value, ApiError> {
    current(state, t).map(|o| kinds::to_view(&t.rt, o))
}

/// Parses a resourceVersion as the storage's versioner does
/// (`strconv.ParseUint`), with Go's error text.
pub fn parse_rv(rv: &str) -> Result<u64, String> {
    let syntax = !rv.is_empty() && rv.bytes().all(|b| b.is_ascii_digit());
    let problem = if syntax {
        match rv.parse() {
            Ok(n) => return Ok(n),
            Err(_) => "value out of range",
        }
    } else {
        "invalid syntax"
    };
    Err(format!(
        "strconv.ParseUint: parsing {}: {problem}",
        quote(rv)
    ))
}

/// A resourceVersion query parameter the storage cannot parse, as
/// `ParseResourceVersion` words it: an `InvalidError` on `resourceVersion`.
/// Storage returns it as a plain error, so where nothing converts it (the
/// watch cache's get, list and watch) the answer is a 500 with no reason.
pub fn unparsable_rv(rv: &str) -> Option<ApiError> {
    if rv.is_empty() || rv == "0" {
        return None;
    }
    let err = parse_rv(rv).err()?;
    Some(ApiError::Unclassified(
        FieldError::invalid("resourceVersion", rv, err).to_string(),
    ))
}

/// A list at the requested resourceVersion, filtered and paginated.
pub fn list(
    state: &State,
    rt: &ResourceType,
    namespace: Option<&str>,
    q: &ListQuery,
) -> Result<Value, ApiError> {
    let now = state.resource_version();
    let rv_param = q.resource_version.as_deref().unwrap_or("");
    // Lists the watch cache cannot serve go to etcd, whose store answers an
    // unparsable resourceVersion with a 400 rather than the cache's 500.
    let from_etcd = q.continue_token.is_some()
        || (q.limit.is_some_and(|l| l > 0) && rv_param != "0")
        || q.version_match.as_deref() == Some("Exact");
    if let Some(err) = unparsable_rv(rv_param) {
        return Err(if from_etcd {
            ApiError::bad_request(format!("invalid resource version: {err}"))
        } else {
            err
        });
    }
    let (at, after) = match &q.continue_token {
        Some(token) => {
            let decoded = hex::decode(token)
                .ok()
                .and_then(|b| serde_json::from_slice::<ContinueToken>(&b).ok())
                .ok_or_else(|| {
                    ApiError::bad_request("continue key is not valid: invalid continue token")
                })?;
            if !rv_param.is_empty() && rv_param != "0" {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            (
                decoded.rv.unwrap_or(now),
                Some((decoded.namespace, decoded.name)),
            )
        }
        None => {
            let rv = match q.resource_version.as_deref() {
                None | Some("") | Some("0") => now,
                Some(rv) => {
                    let requested = parse_rv(rv).map_err(ApiError::Internal)?;
                    if requested > now {
                        return Err(ApiError::ResourceVersionTooLarge {
                            requested,
                            current: now,
                        });
                    }
                    // `Exact`, and (the legacy case) a paged list without
                    // a match, read at the resourceVersion; otherwise it is
                    // only a lower bound.
                    let exact = match q.version_match.as_deref() {
                        Some(matching) => matching == "Exact",
                        None => q.limit.is_some(),
                    };
                    if exact { requested } else { now }
                }
            };
            (rv, None)
        }
    };
    let objects = if at == now {
        state.list(&rt.storage, namespace)
    } else {
        state
            .snapshot(&rt.storage, namespace, at)
            .map_err(|_| match &after {
                Some((namespace, name)) => continue_token(None, namespace, name)
                    .map_or_else(|e| e, |token| ApiError::ContinueExpired { token }),
                None => ApiError::Expired(
                    "The resourceVersion for the provided list is too old.".into(),
                ),
            })?
    };
    let mut items: Vec<&Arc<Value>> = objects
        .iter()
        .filter(|o| {
            after.as_ref().is_none_or(|(ns, name)| {
                (meta::namespace(o), meta::name(o)) > (ns.as_str(), name.as_str())
            })
        })
        .filter(|o| q.filter.matches(rt, None, o))
        .collect();
    let mut list_meta = json!({"resourceVersion": at.to_string()});
    // The watch cache serves a whole list whatever the limit (upstream before
    // 1.33's ListFromCacheSnapshot): only a list from etcd is paged.
    if let Some(limit) = q
        .limit
        .filter(|l| *l > 0 && from_etcd)
        .and_then(|l| usize::try_from(l).ok())
        && items.len() > limit
    {
        let remaining = items.len() - limit;
        items.truncate(limit);
        if let Some(last) = items.last() {
            let token = continue_token(Some(at), meta::namespace(last), meta::name(last))?;
            list_meta["continue"] = json!(token);
        }
        if q.filter.is_empty() {
            list_meta["remainingItemCount"] = json!(remaining);
        }
    }
    let items: Vec<Value> = items
        .into_iter()
        .map(|o| {
            let mut item = kinds::to_view(rt, o);
            if !rt.is_custom()
                && let Some(map) = item.as_object_mut()
            {
                map.remove("apiVersion");
                map.remove("kind");
            }
            item
        })
        .collect();
    Ok(json!({
        "kind": rt.list_kind(),
        "apiVersion": rt.api_version(),
        "metadata": list_meta,
        "items": items,
    }))
}

/// The continue token of a list read at `rv` (none: the latest) whose
/// last item was `namespace/name`.
fn continue_token(rv: Option<u64>, namespace: &str, name: &str) -> Result<String, ApiError> {
    let token = ContinueToken {
        rv,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    let encoded = serde_json::to_vec(&token).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(hex::encode(encoded))
}

/// Type-checks, decodes and converts a request body to the stored form.
fn decode_body(
    rt: &ResourceType,
    mut body: Value,
    duplicates: &[String],
    fv: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: the object must be a JSON object",
            rt.kind, rt.version, rt.kind
        )));
    }
    kinds::check_type_meta(rt, &mut body)?;
    let (decoded, warnings) = kinds::decode(rt, body, duplicates, fv)?;
    Ok((kinds::to_storage(rt, decoded), warnings))
}

/// POST to a collection.
pub fn create(
    state: &mut State,
    rt: &Arc<ResourceType>,
    namespace: &str,
    body: Value,
    opts: &WriteOptions,
) -> Result<Written, ApiError> {
    let (mut obj, warnings) = decode_body(rt, body, &opts.repeated_keys, opts.field_validation)?;
    let given = meta::namespace(&obj).to_owned();
    if rt.namespaced {
        if !given.is_empty() && given != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        meta::set(&mut obj, "namespace", json!(namespace));
    } else {
        meta::set(&mut obj, "namespace", Value::Null);
    }
    insert(state, rt, obj, opts, warnings)
}

/// The part of a create after the body is decoded and placed.
fn insert(
    state: &mut State,
    rt: &Arc<ResourceType>,
    mut obj: Value,
    opts: &WriteOptions,
    mut warnings: Vec<String>,
) -> Result<Written, ApiError> {
    if rt.custom.as_ref().is_some_and(|c| c.terminating) {
        return Err(ApiError::MethodNotSupported {
            resource: rt.group_resource(),
            message: "create not allowed while custom resource definition is terminating".into(),
        });
    }
    let namespace = meta::namespace(&obj).to_owned();
    if rt.namespaced {
        match state.get("/namespaces", "", &namespace) {
            None => {
                return Err(ApiError::not_found(
                    &crate::status::GroupResource::new("", "namespaces"),
                    &namespace,
                ));
            }
            Some(ns) if meta::is_deleting(ns) => {
                return Err(ApiError::Forbidden {
                    resource: rt.group_resource(),
                    name: meta::name(&obj).to_owned(),
                    message: format!(
                        "unable to create new content in namespace {namespace} because it is being terminated"
                    ),
                });
            }
            Some(_) => {}
        }
    }
    if !meta::resource_version(&obj).is_empty() {
        return Err(ApiError::Internal(
            "resourceVersion should not be set on objects to be created".into(),
        ));
    }
    if meta::name(&obj).is_empty() && !meta::generate_name(&obj).is_empty() {
        let name = meta::generated_name(meta::generate_name(&obj));
        meta::set(&mut obj, "name", json!(name));
    }
    meta::fill_system_fields(&mut obj);
    let mut errs = kinds::prepare_create(rt, &mut obj, state);
    errs.extend(kinds::validate_create(rt, &obj));
    if !errs.is_empty() {
        let kind = kinds::invalid_kind(rt, &obj);
        return Err(ApiError::invalid(&kind, meta::name(&obj), errs));
    }
    warnings.extend(kinds::warnings(rt, Subresource::Main, &obj));
    if state
        .get(&rt.storage, &namespace, meta::name(&obj))
        .is_some()
    {
        return Err(ApiError::AlreadyExists {
            resource: rt.group_resource(),
            name: meta::name(&obj).to_owned(),
        });
    }
    warnings.extend(meta::warnings(&obj));
    if opts.dry_run {
        return Ok(Written {
            object: kinds::to_view(rt, &obj),
            created: true,
            warnings,
        });
    }
    let name = meta::name(&obj).to_owned();
    let mut stored = state.commit(&rt.storage, ChangeKind::Added, obj);
    if rt.rules == Rules::CustomResourceDefinition {
        stored = reconcile_crd(state, &name).unwrap_or(stored);
    }
    Ok(Written {
        object: kinds::to_view(rt, &stored),
        created: true,
        warnings,
    })
}

/// PUT to an object or its status.
pub fn replace(
    state: &mut State,
    t: &Target,
    body: Value,
    opts: &WriteOptions,
) -> Result<Written, ApiError> {
    let (mut obj, warnings) = decode_body(&t.rt, body, &opts.repeated_keys, opts.field_validation)?;
    let name = meta::name(&obj);
    if name != t.name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            t.name
        )));
    }
    let ns = meta::namespace(&obj);
    if t.rt.namespaced {
        if !ns.is_empty() && ns != t.namespace {
            return Err(ApiError::bad_request(format!(
                "the namespace of the object ({ns}) does not match the namespace on the URL ({})",
                t.namespace
            )));
        }
        meta::set(&mut obj, "namespace", json!(t.namespace));
    } else {
        meta::set(&mut obj, "namespace", Value::Null);
    }
    // A PUT's uid is a precondition (409, before the resourceVersion is
    // compared); a patched uid is only validated as immutable (422).
    let uid = meta::uid(&obj);
    if let Some(cur) = state.get(&t.rt.storage, &t.namespace, &t.name)
        && !uid.is_empty()
        && uid != meta::uid(cur)
    {
        return Err(ApiError::Conflict {
            resource: t.rt.group_resource(),
            name: t.name.clone(),
            message: format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta::uid(cur)
            ),
        });
    }
    update(state, t, obj, opts, warnings, false)
}

/// The shared end of PUT and PATCH (`Store.Update`); `apply` for an
/// apply patch, whose field manager keeps the fields it applied.
fn update(
    state: &mut State,
    t: &Target,
    mut new: Value,
    opts: &WriteOptions,
    mut warnings: Vec<String>,
    apply: bool,
) -> Result<Written, ApiError> {
    let rt = &t.rt;
    let policy = kinds::policy(rt);
    let Some(cur) = state.get(&rt.storage, &t.namespace, &t.name).cloned() else {
        if t.sub == Subresource::Main && policy.allow_create_on_update {
            meta::set(&mut new, "resourceVersion", Value::Null);
            return insert(state, rt, new, opts, warnings);
        }
        return Err(not_found(t));
    };
    let requested = meta::resource_version(&new).to_owned();
    if requested.is_empty() {
        if !policy.allow_unconditional_update {
            return Err(ApiError::invalid(
                &GroupKind::new(&rt.group, &rt.plural),
                &t.name,
                vec![FieldError::invalid(
                    "metadata.resourceVersion",
                    BadValue::Raw("0x0".into()),
                    "must be specified for an update",
                )],
            ));
        }
    } else {
        // The versioner's plain `strconv` error: a 500 with no reason.
        parse_rv(&requested).map_err(ApiError::Unclassified)?;
        if requested != meta::resource_version(&cur) {
            return Err(ApiError::stale(&rt.group_resource(), &t.name));
        }
    }
    meta::carry_system_fields(&mut new, &cur);
    // Field ownership is the field manager's, whatever the strategy keeps.
    let managed = new.pointer("/metadata/managedFields").cloned();
    let mut errs = kinds::prepare_update(rt, t.sub, &mut new, &cur, state);
    meta::set(&mut new, "managedFields", managed.unwrap_or(Value::Null));
    errs.extend(kinds::validate_update(rt, t.sub, &new, &cur));
    if !errs.is_empty() {
        return Err(ApiError::invalid(
            &kinds::invalid_kind(rt, &new),
            &t.name,
            errs,
        ));
    }
    warnings.extend(kinds::warnings(rt, t.sub, &new));
    meta::set(
        &mut new,
        "resourceVersion",
        json!(meta::resource_version(&cur)),
    );
    let applier = apply.then_some((opts.field_manager.as_str(), t.sub));
    managed_fields::transfer(&mut new, &cur, applier);
    if new == *cur {
        return Ok(Written {
            object: kinds::to_view(rt, &cur),
            created: false,
            warnings,
        });
    }
    warnings.extend(meta::warnings(&new));
    if opts.dry_run {
        return Ok(Written {
            object: kinds::to_view(rt, &new),
            created: false,
            warnings,
        });
    }
    if rt.rules != Rules::Namespace && meta::is_deleting(&new) && meta::finalizers(&new).is_empty()
    {
        // `deleteWithoutFinalizers`: the update is not written, the object
        // goes as last stored, and that is what the answer and watchers'
        // DELETED event carry (no MODIFIED first).
        let gone = state.commit(&rt.storage, ChangeKind::Deleted, (*cur).clone());
        after_removal(state, &rt.storage, &gone);
        return Ok(Written {
            object: kinds::to_view(rt, &gone),
            created: false,
            warnings,
        });
    }
    let mut stored = state.commit(&rt.storage, ChangeKind::Modified, new);
    match rt.rules {
        Rules::Namespace => {
            finalize_namespace(state, &t.name);
        }
        Rules::CustomResourceDefinition => {
            stored = reconcile_crd(state, &t.name).unwrap_or(stored);
        }
        _ => {}
    }
    Ok(Written {
        object: kinds::to_view(rt, &stored),
        created: false,
        warnings,
    })
}

/// PATCH to an object or its status; an apply patch may create. The patch
/// type and options are already checked (`PatchOptions`).
pub fn patch(
    state: &mut State,
    t: &Target,
    kind: PatchType,
    body: &[u8],
    opts: &WriteOptions,
) -> Result<Written, ApiError> {
    let rt = &t.rt;
    let existing = state.get(&rt.storage, &t.namespace, &t.name).cloned();
    let base = match (&existing, kind) {
        (Some(cur), _) => kinds::to_view(rt, cur),
        (None, PatchType::Apply) if t.sub == Subresource::Main => {
            let mut base = json!({"apiVersion": rt.api_version(), "kind": rt.kind, "metadata": {"name": t.name}});
            if rt.namespaced {
                base["metadata"]["namespace"] = json!(t.namespace);
            }
            base
        }
        (None, _) => return Err(not_found(t)),
    };
    let applied = if kind == PatchType::Apply {
        let body: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if kinds::str_at(&body, "/apiVersion").is_empty()
            || kinds::str_at(&body, "/kind").is_empty()
        {
            return Err(ApiError::bad_request(
                "invalid object type: apply patches must include apiVersion and kind",
            ));
        }
        if body
            .pointer("/metadata/managedFields")
            .is_some_and(|m| !m.is_null())
        {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        Some(body)
    } else {
        None
    };
    let schema = |path: &[String]| kinds::list_strategy(rt, path);
    let mut patched = patch::apply(kind, &base, body, &schema)?;
    if let Some(applied) = &applied {
        managed_fields::apply(rt, t.sub, &mut patched.value, &opts.field_manager, applied);
    }
    if meta::name(&patched.value) != t.name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            meta::name(&patched.value),
            t.name
        )));
    }
    let shown = match kind {
        PatchType::Strategic => {
            patch::go_map_text(&body::parse(body).map(|b| b.value).unwrap_or_default())
        }
        _ => patched.value.to_string(),
    };
    let decoded = decode_body(
        rt,
        patched.value,
        &patched.duplicates,
        opts.field_validation,
    );
    let (obj, warnings) = decoded.map_err(|err| match err {
        // The patcher reports a result it cannot decode (malformed times,
        // strict errors) as a 422 on `patch`, showing the patched object
        // (JSON and merge patches) or the patch (strategic merge).
        ApiError::Undecodable { detail, .. } if kind != PatchType::Apply => ApiError::invalid(
            &GroupKind::new("", ""),
            "",
            vec![FieldError::invalid("patch", shown, detail)],
        ),
        other => other,
    })?;
    if existing.is_none() {
        return insert(state, rt, obj, opts, warnings);
    }
    update(state, t, obj, opts, warnings, applied.is_some())
}

/// DELETE of one object. Returns the response body.
pub fn delete(state: &mut State, t: &Target, opts: &DeleteOptions) -> Result<Value, ApiError> {
    let rt = &t.rt;
    let cur = current(state, t)?.clone();
    if let Some(uid) = opts.uid.as_deref().filter(|u| *u != meta::uid(&cur)) {
        return Err(ApiError::Conflict {
            resource: rt.group_resource(),
            name: t.name.clone(),
            message: format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta::uid(&cur)
            ),
        });
    }
    if let Some(rv) = opts
        .resource_version
        .as_deref()
        .filter(|rv| *rv != meta::resource_version(&cur))
    {
        return Err(ApiError::Conflict {
            resource: rt.group_resource(),
            name: t.name.clone(),
            message: format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                meta::resource_version(&cur)
            ),
        });
    }
    if opts.dry_run {
        return Ok(kinds::to_view(rt, &cur));
    }
    let (obj, removed) = match rt.rules {
        Rules::Namespace => delete_namespace(state, &cur),
        Rules::CustomResourceDefinition => delete_crd(state, &cur),
        _ => remove_or_mark(state, &rt.storage, &cur),
    };
    if removed && !rt.returns_deleted_object() {
        return Ok(success_status(
            &rt.group_resource(),
            &t.name,
            meta::uid(&obj),
        ));
    }
    Ok(kinds::to_view(rt, &obj))
}

/// DELETE of a collection: every matching object, as a list.
pub fn delete_collection(
    state: &mut State,
    rt: &Arc<ResourceType>,
    namespace: Option<&str>,
    filter: &Filter,
    opts: &DeleteOptions,
) -> Result<Value, ApiError> {
    let targets: Vec<Arc<Value>> = state
        .list(&rt.storage, namespace)
        .into_iter()
        .filter(|o| filter.matches(rt, None, o))
        .collect();
    let mut items = Vec::new();
    for obj in targets {
        let t = Target {
            rt: rt.clone(),
            namespace: meta::namespace(&obj).to_owned(),
            name: meta::name(&obj).to_owned(),
            sub: Subresource::Main,
        };
        if state.get(&rt.storage, &t.namespace, &t.name).is_none() {
            continue;
        }
        let cur = state.get(&rt.storage, &t.namespace, &t.name).cloned();
        delete(state, &t, opts)?;
        items.extend(cur.map(|c| kinds::to_view(rt, &c)));
    }
    Ok(json!({
        "kind": rt.list_kind(),
        "apiVersion": rt.api_version(),
        "metadata": {"resourceVersion": state.resource_version().to_string()},
        "items": items,
    }))
}

/// Removes an object, or marks it for deletion while finalizers remain.
/// Returns the final state and whether it is gone.
fn remove_or_mark(state: &mut State, storage: &StorageKey, cur: &Arc<Value>) -> (Arc<Value>, bool) {
    if meta::finalizers(cur).is_empty() {
        let gone = state.commit(storage, ChangeKind::Deleted, (**cur).clone());
        after_removal(state, storage, &gone);
        return (gone, true);
    }
    if meta::is_deleting(cur) {
        return (cur.clone(), false);
    }
    (
        state.commit(storage, ChangeKind::Modified, marked(cur)),
        false,
    )
}

/// `markAsDeleting`: deletion time now, grace period zero, generation bumped.
fn marked(cur: &Value) -> Value {
    let mut obj = cur.clone();
    let generation = meta::generation(cur);
    if generation > 0 {
        meta::set(&mut obj, "generation", json!(generation + 1));
    }
    meta::set(&mut obj, "deletionTimestamp", json!(meta::now()));
    meta::set(&mut obj, "deletionGracePeriodSeconds", json!(0));
    obj
}

/// What the namespace lifecycle and CRD finalizer controllers do once an
/// object is gone.
fn after_removal(state: &mut State, storage: &StorageKey, gone: &Value) {
    let namespace = meta::namespace(gone);
    if !namespace.is_empty() {
        finalize_namespace(state, namespace);
    }
    match state.registry.by_storage(storage) {
        Some(rt) if rt.rules == Rules::CustomResourceDefinition => {
            state.registry.set_custom(meta::name(gone), Vec::new());
            reconcile_all_crds(state);
        }
        _ => {}
    }
}

fn delete_namespace(state: &mut State, ns: &Arc<Value>) -> (Arc<Value>, bool) {
    let storage: StorageKey = Arc::from("/namespaces");
    let name = meta::name(ns).to_owned();
    let mut latest = ns.clone();
    if !meta::is_deleting(ns) {
        let mut obj = marked(ns);
        obj["status"] = json!({"phase": "Terminating"});
        latest = state.commit(&storage, ChangeKind::Modified, obj);
    }
    for (storage, obj) in state.in_namespace(&name) {
        if !meta::is_deleting(&obj) {
            remove_or_mark(state, &storage, &obj);
        }
    }
    let removed = finalize_namespace(state, &name);
    (removed.unwrap_or(latest), false)
}

/// Removes a terminating namespace once it is empty and has no finalizers.
fn finalize_namespace(state: &mut State, name: &str) -> Option<Arc<Value>> {
    let ns = state.get("/namespaces", "", name)?.clone();
    if !meta::is_deleting(&ns) || state.namespace_in_use(name) || !meta::finalizers(&ns).is_empty()
    {
        return None;
    }
    Some(state.commit(
        &Arc::from("/namespaces"),
        ChangeKind::Deleted,
        (*ns).clone(),
    ))
}

fn crd_storage() -> StorageKey {
    Arc::from("apiextensions.k8s.io/customresourcedefinitions")
}

/// `REST.Delete` of CRDs: the first delete only marks the CRD (deletion
/// time, the cleanup finalizer, `Terminating`, and no grace period or new
/// generation); `crd_finalizer` then deletes its instances and lets it go.
fn delete_crd(state: &mut State, crd: &Arc<Value>) -> (Arc<Value>, bool) {
    if meta::is_deleting(crd) {
        return remove_or_mark(state, &crd_storage(), crd);
    }
    let mut obj = (**crd).clone();
    meta::set(&mut obj, "deletionTimestamp", json!(meta::now()));
    let mut finalizers = meta::finalizers(crd);
    if !finalizers.iter().any(|f| f == kinds::CRD_CLEANUP_FINALIZER) {
        finalizers.push(kinds::CRD_CLEANUP_FINALIZER.to_owned());
    }
    meta::set(&mut obj, "finalizers", json!(finalizers));
    kinds::set_crd_condition(
        &mut obj,
        "Terminating",
        true,
        "InstanceDeletionPending",
        "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
    );
    let marked = state.commit(&crd_storage(), ChangeKind::Modified, obj);
    let latest = reconcile_crd(state, meta::name(crd)).unwrap_or(marked);
    (latest, false)
}

/// Runs the naming/establishing controllers for one CRD: writes its status
/// if it changed and updates the served resource types. Returns the CRD as
/// last written.
fn reconcile_crd(state: &mut State, name: &str) -> Option<Arc<Value>> {
    let Some(crd) = state.get(&crd_storage(), "", name).cloned() else {
        state.registry.set_custom(name, Vec::new());
        return None;
    };
    let outcome = kinds::reconcile_crd(&crd, &state.registry);
    state.registry.set_custom(name, outcome.types);
    if crd.get("status") == Some(&outcome.status) {
        return Some(crd);
    }
    let mut obj = (*crd).clone();
    obj["status"] = outcome.status;
    Some(state.commit(&crd_storage(), ChangeKind::Modified, obj))
}

fn reconcile_all_crds(state: &mut State) {
    let names: Vec<String> = state
        .list(&crd_storage(), None)
        .iter()
        .map(|c| meta::name(c).to_owned())
        .collect();
    for name in names {
        reconcile_crd(state, &name);
    }
}
