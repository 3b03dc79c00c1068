//! Authorization: whether an authenticated user may do what a request
//! asks, decided where kube-apiserver decides it, after authentication and
//! before the request reaches its handler. `attributes` reads what a
//! request asks from its method and URL; under [`Authorization::Rbac`],
//! `system:masters` may do anything and everyone else what `rbac` finds in
//! the Roles and ClusterRoles bound to them; a refusal is upstream's 403.
//! Every decision is recorded, in both modes, as distinct attributes with
//! counts, for [`crate::Emulator::authorizations`].

mod attributes;
mod rbac;

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

pub use attributes::Attributes;

use crate::status::{ApiError, GroupResource, quote};
use crate::store::Store;
use crate::tokens::MASTERS;

/// How requests are authorized: the kube-apiserver's
/// `--authorization-mode`, one mode of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Authorization {
    /// Every authenticated request is allowed.
    #[default]
    AlwaysAllow,
    /// Members of `system:masters` (the admin) may do anything; everyone
    /// else what the Roles and ClusterRoles bound to them allow.
    Rbac,
}

impl FromStr for Authorization {
    type Err = String;

    /// The mode as kube-apiserver's flag names it: `AlwaysAllow` or `RBAC`.
    fn from_str(mode: &str) -> Result<Authorization, String> {
        match mode {
            "AlwaysAllow" => Ok(Authorization::AlwaysAllow),
            "RBAC" => Ok(Authorization::Rbac),
            other => Err(format!(
                "unknown authorization mode {other:?}: kube-emulator knows AlwaysAllow and RBAC"
            )),
        }
    }
}

/// One distinct authorization decision, and how many requests it was made
/// for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub attributes: Attributes,
    pub allowed: bool,
    pub count: u64,
}

/// How often one set of attributes was allowed and refused.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    allowed: u64,
    denied: u64,
}

impl Counts {
    fn add(&mut self, allowed: bool) {
        if allowed {
            self.allowed += 1;
        } else {
            self.denied += 1;
        }
    }
}

/// The authorization mode and the decisions made so far. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Authorizer {
    mode: Authorization,
    /// Keyed by attributes, so the record grows with what users do, not
    /// with how often they do it.
    decisions: Arc<Mutex<BTreeMap<Attributes, Counts>>>,
}

impl Authorizer {
    pub fn new(mode: Authorization) -> Authorizer {
        Authorizer {
            mode,
            decisions: Arc::default(),
        }
    }

    fn decisions(&self) -> MutexGuard<'_, BTreeMap<Attributes, Counts>> {
        self.decisions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Decides and records; a refusal is upstream's 403.
    pub fn authorize(&self, store: &Store, attributes: &Attributes) -> Result<(), ApiError> {
        let verdict = self
            .review(store, attributes)
            .map_err(|reason| forbidden(attributes, &reason));
        let allowed = verdict.is_ok();
        let mut decisions = self.decisions();
        // Cloned only the first time: most requests repeat earlier ones.
        match decisions.get_mut(attributes) {
            Some(counts) => counts.add(allowed),
            None => {
                let mut counts = Counts::default();
                counts.add(allowed);
                decisions.insert(attributes.clone(), counts);
            }
        }
        verdict
    }

    /// A `SubjectAccessReview`'s answer: whether the subject of
    /// `attributes` may, and the reason a refusal gives (see
    /// [`Authorizer::authorize`]). Not recorded: the decision is about
    /// another user than the one asking, and is made for them.
    pub fn review(&self, store: &Store, attributes: &Attributes) -> Result<(), String> {
        match self.mode {
            Authorization::AlwaysAllow => Ok(()),
            Authorization::Rbac if attributes.groups.iter().any(|g| g == MASTERS) => Ok(()),
            Authorization::Rbac => store.read(|state| rbac::authorize(state, attributes)),
        }
    }

    /// The decisions so far, by user, then verb, group, resource….
    pub fn snapshot(&self) -> Vec<Decision> {
        self.decisions()
            .iter()
            .flat_map(|(attributes, counts)| {
                [(true, counts.allowed), (false, counts.denied)]
                    .into_iter()
                    .filter(|(_, count)| *count > 0)
                    .map(|(allowed, count)| Decision {
                        attributes: attributes.clone(),
                        allowed,
                        count,
                    })
            })
            .collect()
    }

    pub fn reset(&self) {
        self.decisions().clear();
    }
}

/// `responsewriters.Forbidden`: the `forbiddenMessage` (HTML-escaped), the
/// authorizer's reason after it, in `apierrors.NewForbidden` of the
/// request's group, resource and name.
fn forbidden(attributes: &Attributes, reason: &str) -> ApiError {
    let message = forbidden_message(attributes)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    ApiError::Forbidden {
        resource: GroupResource::new(&attributes.api_group, &attributes.resource),
        name: attributes.name.clone(),
        message: if reason.is_empty() {
            message
        } else {
            format!("{message}: {reason}")
        },
    }
}

/// `forbiddenMessage`: who cannot do what, where.
fn forbidden_message(attributes: &Attributes) -> String {
    let user = quote(&attributes.user);
    let verb = &attributes.verb;
    if !attributes.resource_request {
        return format!("User {user} cannot {verb} path {}", quote(&attributes.path));
    }
    let mut resource = attributes.resource.clone();
    if !attributes.subresource.is_empty() {
        resource = format!("{resource}/{}", attributes.subresource);
    }
    let asked = format!(
        "User {user} cannot {verb} resource {} in API group {}",
        quote(&resource),
        quote(&attributes.api_group)
    );
    if attributes.namespace.is_empty() {
        format!("{asked} at the cluster scope")
    } else {
        format!("{asked} in the namespace {}", quote(&attributes.namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attributes(
        verb: &str,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            user: "system:serviceaccount:kube-system:ccm".to_owned(),
            groups: Vec::new(),
            verb: verb.to_owned(),
            resource_request: true,
            api_group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: String::new(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            path: String::new(),
        }
    }

    #[test]
    fn refusals_read_as_upstream_words_them() {
        let user = r#"User "system:serviceaccount:kube-system:ccm""#;
        let named = forbidden(&attributes("get", "", "nodes", "", "n1"), "");
        assert_eq!(
            named.to_string(),
            format!(
                r#"nodes "n1" is forbidden: {user} cannot get resource "nodes" in API group "" at the cluster scope"#
            )
        );
        let status = named.status();
        assert_eq!(
            (status["code"].as_u64(), status["reason"].as_str()),
            (Some(403), Some("Forbidden"))
        );
        assert_eq!(
            status["details"],
            serde_json::json!({"name": "n1", "kind": "nodes"})
        );
        let lease = forbidden(
            &attributes(
                "update",
                "coordination.k8s.io",
                "leases",
                "kube-system",
                "l",
            ),
            r#"RBAC: role.rbac.authorization.k8s.io "r" not found"#,
        );
        assert_eq!(
            lease.to_string(),
            format!(
                r#"leases.coordination.k8s.io "l" is forbidden: {user} cannot update resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system": RBAC: role.rbac.authorization.k8s.io "r" not found"#
            )
        );
        let path = Attributes {
            resource_request: false,
            path: "/apis<x>".to_owned(),
            ..attributes("post", "", "", "", "")
        };
        assert_eq!(
            forbidden(&path, "").to_string(),
            format!(r#"forbidden: {user} cannot post path "/apis&lt;x&gt;""#)
        );
    }

    #[test]
    fn decisions_are_counted_per_distinct_attributes() {
        let authorizer = Authorizer::new(Authorization::AlwaysAllow);
        let store = Store::new(10);
        let list = attributes("list", "", "nodes", "", "");
        for _ in 0..3 {
            assert!(authorizer.authorize(&store, &list).is_ok());
        }
        assert!(
            authorizer
                .authorize(&store, &attributes("get", "", "nodes", "", "n1"))
                .is_ok()
        );
        let decisions = authorizer.snapshot();
        assert_eq!(decisions.len(), 2);
        let listed = decisions.iter().find(|d| d.attributes == list).unwrap();
        assert_eq!((listed.allowed, listed.count), (true, 3));
        authorizer.reset();
        assert!(authorizer.snapshot().is_empty());
    }

    #[test]
    fn modes_parse_as_the_flag_spells_them() {
        assert_eq!("RBAC".parse(), Ok(Authorization::Rbac));
        assert_eq!("AlwaysAllow".parse(), Ok(Authorization::AlwaysAllow));
        assert!("Node,RBAC".parse::<Authorization>().is_err());
    }
}
