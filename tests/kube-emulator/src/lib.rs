//! `kube-emulator`: an in-process Kubernetes API server for testing
//! wasm-ccm. It speaks the real HTTP API — discovery, list, watch, writes,
//! patches, status subresources, finalizers — closely enough that kube-rs
//! clients and kube-runtime watchers, reflectors and controllers behave
//! against it as against a kube-apiserver, and it is deliberately *not*
//! more lenient than one: what a real 1.32 server rejects, it rejects with
//! the same code, reason and (as far as practical) message. Clients reach
//! it only through a kubeconfig, as in production: HTTPS with a certificate
//! from a CA the emulator generates at start (in the kubeconfig as
//! `certificate-authority-data`) and a bearer token, so kube-rs and stock
//! kubectl both connect without disabling verification.
//!
//! It is both a library ([`Emulator::start`] runs it in-process; [`Store`],
//! [`Faults`], [`Emulator::requests`] and [`Emulator::authorizations`] let
//! a test look inside and break things) and the `kube-emulator` binary.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use kube_emulator::{Emulator, EmulatorOptions, FailRule};
//! let emulator = Emulator::start("127.0.0.1:0".parse()?, EmulatorOptions::default()).await?;
//! let config = kube::Config::from_custom_kubeconfig(emulator.kubeconfig(), &Default::default()).await?;
//! let client = kube::Client::try_from(config)?;
//! emulator.faults().fail_next(FailRule::new(1, 500).method("PATCH"));
//! emulator.faults().drop_watches();
//! println!("{} requests so far", emulator.requests().total());
//! emulator.shutdown().await;
//! # drop(client);
//! # Ok(()) }
//! ```
//!
//! # Served API
//!
//! | Resource | Scope | Subresources |
//! |---|---|---|
//! | `v1` `namespaces` | cluster | `status` |
//! | `v1` `nodes` | cluster | `status` |
//! | `v1` `services` | namespaced | `status` |
//! | `v1` `configmaps`, `secrets`, `events` | namespaced | |
//! | `v1` `serviceaccounts` | namespaced | `token` (create only) |
//! | `apps/v1` `deployments`, `daemonsets` | namespaced | `status` |
//! | `coordination.k8s.io/v1` `leases` | namespaced | |
//! | `events.k8s.io/v1` `events` (the same objects as `v1` events) | namespaced | |
//! | `apiextensions.k8s.io/v1` `customresourcedefinitions` | cluster | `status` |
//! | `networking.k8s.io/v1` `networkpolicies` (stored, not enforced) | namespaced | |
//! | `rbac.authorization.k8s.io/v1` `roles`, `rolebindings` | namespaced | |
//! | `rbac.authorization.k8s.io/v1` `clusterroles`, `clusterrolebindings` | cluster | |
//! | every served version of an established CRD | per CRD | `status` if declared |
//!
//! Namespaces `default`, `kube-system`, `kube-public` and `kube-node-lease`,
//! the `default/kubernetes` Service and the bootstrap ClusterRole
//! `system:auth-delegator` (create `tokenreviews` and
//! `subjectaccessreviews`) exist from the start. Discovery
//! (`/api`, `/apis`, their aggregated `apidiscovery.k8s.io/v2` form, and
//! `/api/v1`, `/apis/{group}[/{version}]`), OpenAPI v3 (below),
//! `/version`, `/healthz`, `/livez` and `/readyz` are served;
//! `/openapi/v2` answers 404. Every API and OpenAPI request needs a bearer
//! token (401 otherwise): the kubeconfig's, which is the admin
//! [`ADMIN_USER`], or one the `serviceaccounts/{name}/token` subresource
//! issued. That subresource answers a `TokenRequest` as
//! upstream's: 404 for a missing ServiceAccount, 422 for a name or namespace
//! in the body other than the URL's or an `expirationSeconds` under 600 or
//! over 2^32 (3600 if unset), audiences defaulted to the API server's, the
//! lifetime shortened to [`EmulatorOptions::max_token_expiration`] with a
//! warning, and `status.token` and `status.expirationTimestamp` filled. Its
//! tokens authenticate as `system:serviceaccount:NAMESPACE:NAME` (in the
//! groups `system:serviceaccounts`, `system:serviceaccounts:NAMESPACE` and
//! `system:authenticated`) until they expire and while that ServiceAccount
//! (same uid) exists; then they are a 401. The admin is in
//! `system:masters` and `system:authenticated`.
//!
//! A delegating server asks about its own callers as upstream's do:
//! `POST /apis/authentication.k8s.io/v1/tokenreviews` (a `TokenReview`:
//! `status.authenticated`, the user and groups of a token the emulator
//! knows, as above, when it was issued for one of `spec.audiences`, the API
//! server's own when none are asked; 400 without `spec.token`) and `POST
//! /apis/authorization.k8s.io/v1/subjectaccessreviews` (a
//! `SubjectAccessReview` decided by the authorizer below for `spec.user`
//! and `spec.groups`, resource or non-resource attributes; upstream's 422
//! when both or neither are given, or neither user nor groups). Both answer
//! 201 with the object and its `status`, store nothing, are authorized as
//! `create` on their resource (what `system:auth-delegator` grants) and
//! are counted as `create tokenreviews.authentication.k8s.io` and `create
//! subjectaccessreviews.authorization.k8s.io`; a review's decision is not
//! one of [`Emulator::authorizations`] (it is about another user).
//!
//! Request bodies are JSON, or protobuf
//! (`application/vnd.kubernetes.protobuf`), which client-go's typed
//! clients send (kubectl's `create` subcommands; Helm 4 storing its
//! releases in Secrets), for Secrets, ConfigMaps, Services, Namespaces,
//! ServiceAccounts, Deployments, Roles, ClusterRoles, RoleBindings,
//! ClusterRoleBindings, TokenRequests and `DeleteOptions`. Responses are
//! always JSON, which those clients also accept.
//!
//! # OpenAPI v3
//!
//! `/openapi/v3` lists every served group-version, the built-in ones and
//! each served version of an established CRD (gone once it is deleted), as
//! upstream does: `{"paths": {"apis/apps/v1": {"serverRelativeURL":
//! "/openapi/v3/apis/apps/v1?hash=…"}, …}}`. Each document (`openapi:
//! 3.0.0`) has, for every resource served in its group-version, upstream's
//! paths (the collection, its objects, their `status`, a ServiceAccount's
//! `token`, a namespaced resource's list across namespaces, `…/v1/`) and
//! operations with upstream's ids (`patchAppsV1NamespacedDeployment`,
//! `listAppsV1DeploymentForAllNamespaces`), tags, descriptions, path and
//! query parameters, response codes, `x-kubernetes-action` and
//! `x-kubernetes-group-version-kind`. That is what kubectl's and Helm's
//! validation reads to learn that a kind's PATCH takes `fieldValidation`,
//! and so leave field validation to the server: `kubectl apply -f`,
//! `kubectl create -f` and `helm install` work with validation on. The
//! documents are served as kube-openapi's handler serves them: with an
//! `Etag` (`If-None-Match` answered 304), a `hash` that matches answered
//! with `Cache-Control: public, immutable`, a stale one with a 301 to the
//! current URL, and a group-version not served with an empty 200.
//!
//! # Authorization
//!
//! [`EmulatorOptions::authorization`] (the binary's `--authorization-mode
//! AlwaysAllow|RBAC`) decides who may do what. Under the default
//! [`Authorization::AlwaysAllow`] any authenticated request is allowed.
//! Under [`Authorization::Rbac`], as a kube-apiserver with RBAC decides it,
//! `system:masters` (the admin) may do anything and anyone else what the
//! Roles and ClusterRoles bound to them allow: each request's attributes
//! are read from its method and URL as upstream's `RequestInfoFactory`
//! reads them (`GET` without a name is `list`, or `watch` with
//! `watch=true`; `DELETE` without one `deletecollection`; a list's
//! `fieldSelector` requiring `metadata.name=X` names the request X, so
//! `resourceNames` rules allow kube-runtime's `watch_object`;
//! `serviceaccounts/NAME/token` is `create` on `serviceaccounts`,
//! subresource `token`; a namespace is a request in itself), and evaluated
//! as the RBAC authorizer does: ClusterRoleBindings grant everywhere,
//! RoleBindings only in their namespace, requests at the cluster scope
//! (cluster-scoped resources, lists and watches across namespaces) only
//! through ClusterRoleBindings; `*` verbs, groups and resources,
//! `resource/subresource` and `*/subresource`, `resourceNames`,
//! `nonResourceURLs`; `User`, `Group` and `ServiceAccount` subjects (a
//! RoleBinding's without a namespace in its own). A binding whose role does
//! not exist grants nothing. Discovery (`/api`, `/apis` and below) and
//! `/openapi` are allowed for every authenticated user, as upstream's
//! bootstrap `system:discovery` binding allows them, and the self-reviews
//! of `system:basic-user`. A refusal is upstream's 403, with its message:
//! `nodes "n1" is forbidden: User "system:serviceaccount:kube-system:ccm"
//! cannot get resource "nodes" in API group "" at the cluster scope`
//! (`… in the namespace "default"`, `leases.coordination.k8s.io "l" is
//! forbidden: …`, `forbidden: User "…" cannot post path "/api"`, and
//! `: RBAC: clusterrole.rbac.authorization.k8s.io "x" not found` after it
//! for a binding to a missing role). Upstream authorizes after
//! authentication and API priority and fairness, before the handler; the
//! emulator's injected latency and failures stand for the handler's, so a
//! refused request waits for no latency and takes no [`FailRule`]. It is
//! authorized from its URL alone, before routing: a refused user gets the
//! 403 for a resource the emulator does not serve too.
//!
//! [`Emulator::requests`] counts requests per user too, the 401s per user
//! agent and the 403s per user. [`Emulator::authorizations`] lists every
//! distinct decision (in both modes: under `AlwaysAllow` all are allowed)
//! with its attributes and how often it was made, for tests that derive the
//! RBAC a program needs from what it does; [`Emulator::reset_requests`]
//! forgets both.
//!
//! Responses are JSON, `PartialObjectMetadata` or, for get, list and watch,
//! the `Table` that `kubectl get` asks for, with upstream's columns for the
//! built-in kinds (a binding's role and, wide, its users, groups and
//! service accounts; a workload's counts and, wide, its containers, images
//! and selector) and a CRD's `additionalPrinterColumns` for its resources
//! (so `get nodes`, `get services -A`, `get lease`, `get events -A`, `get
//! deploy`, `get ds` print as against a real cluster, `-o wide` included).
//!
//! Semantics, as upstream: one global resourceVersion bumped per write,
//! no-op writes not written; `uid`/`creationTimestamp`; `generation` for
//! CRDs, custom resources, Deployments and DaemonSets only (core kinds have
//! none upstream); create (409 `AlreadyExists`, 404 for a missing
//! namespace, 403 in a terminating one); update with optimistic concurrency (409 `Conflict`; a missing
//! resourceVersion is an unconditional update where upstream allows it and
//! 422 "must be specified for an update" for leases, CRDs and custom
//! resources; PUT creates events and leases); JSON, merge and strategic
//! merge patches (the real merge keys of the lists a CCM patches and of pod
//! templates; a Node's `taints` has none and is replaced whole, as `kubectl
//! taint` sends it; `$patch`,
//! `$deleteFromPrimitiveList`, `$setElementOrder`, `$retainKeys`; no
//! strategic merge for custom resources), a resourceVersion in a patch being
//! a precondition; server-side apply (the applied configuration merged by
//! the same list keys, created if missing) with field ownership: each
//! manager's `Apply` entry in `metadata.managedFields` records the fields
//! it applied, a field it stops applying is removed unless another manager
//! owns it (so `helm upgrade` and `helm rollback` drop what a chart no
//! longer renders), a write that changes a field takes it from its
//! appliers, and an apply that changes nothing writes nothing; main
//! resource and `status` isolated per kind; delete with
//! preconditions, finalizers (`deletionTimestamp` + grace 0, removal when the
//! last finalizer goes, no new finalizers while deleting; an update that
//! removes the last one deletes the object as last stored: one `DELETED`,
//! no `MODIFIED`), namespace termination, and CRD deletion as upstream's
//! finalizer controller does it, asynchronously (the CRD marked
//! `Terminating` with the `customresourcecleanup.apiextensions.k8s.io`
//! finalizer, creates of its resources a 405, its custom resources deleted
//! and their watchers sent the `DELETED` events, then the CRD removed and
//! those watches ended); list with label and field selectors
//! (400 for unsupported field labels), `limit`/`continue` (a `limit` of
//! zero or less is no limit; a resourceVersion with `continue` is a 400),
//! and exact past resourceVersions from history (`Exact`, or a paged list
//! without a match, as etcd reads them; 410 `Expired` once the history no
//! longer reaches back, for an expired continue token with upstream's
//! `metadata.continue` that goes on from the latest state; an unparsable
//! resourceVersion is the watch cache's 500 with no reason, or etcd's 400
//! for the lists it would serve); watch from a resourceVersion (the changes
//! since then replayed at once), from "now" (none or `0`) with synthetic
//! `ADDED` events, streaming lists (`sendInitialEvents`, their initial
//! events ended by an annotated bookmark when bookmarks are allowed, and
//! `ListOptions` validated as upstream's 422), bookmarks (one also two
//! seconds before `timeoutSeconds` ends the watch), and a 410 `ERROR` event
//! (the request itself a 200) once the history (bounded,
//! [`EmulatorOptions::history`]) no longer reaches back;
//! `PartialObjectMetadata[List]` responses (the form the endpoint does not
//! return is upstream's 406 naming the Go type); write options validated together
//! (one 422 on `CreateOptions`, `UpdateOptions`, `PatchOptions` or
//! `DeleteOptions` naming every bad `dryRun`, `fieldValidation`,
//! `fieldManager`, `force` or `propagationPolicy`); `dryRun=All`;
//! `fieldValidation` (unknown fields, and repeated JSON keys merged as Go
//! decodes them, reported as warnings, or a 400 under `Strict`; for a
//! patch, the patcher's 422 on `patch`); typed decoding of built-in kinds
//! through k8s-openapi (400 on a type mismatch, or on a `MicroTime` — lease
//! and event times — without exactly six fractional digits, with Go's
//! `time.Parse` message; 422 on `patch` when a patch produced it); empty
//! metadata lists and maps (`finalizers: []`) dropped, as Go's `omitempty`
//! drops them; JSON patch operations applied as evanphx/json-patch does (an
//! unknown or malformed operation, like a failing `test`, is upstream's
//! generic 422 with no cause);
//! upstream validation of names, labels, annotations, finalizers, owner
//! references, taints, node addresses and `providerID`, services (types,
//! ports, node ports, cluster and external IPs, `loadBalancerClass`, load
//! balancer status and `ipMode`), leases, NetworkPolicies (`policyTypes`
//! and ports, with v1's defaults for both), events (both API versions),
//! config maps, secrets, Deployments and DaemonSets (a selector that
//! selects the pod template and never changes, strategies, counters, and
//! the pod template's labels, volume and container names, images, ports
//! and policies), RBAC objects (rules with verbs and resources or
//! non-resource URLs, a binding's `roleRef` of a kind it may use and never
//! changed, subjects of a known kind, with v1's defaults for their API
//! groups), CRDs (names, and structural schemas: a `type` on
//! every node, consistent `x-kubernetes-list-type`s; reported under
//! `spec.validation` when all versions share one schema, where upstream's
//! conversion moves it), and custom resources against their structural
//! schema (the kind, a 422; pruning, defaults, types as
//! `FieldValueTypeInvalid`, `required`, `enum`, bounds, `pattern`, no
//! duplicates in `set` lists or keys in `map` lists).
//!
//! IP and CIDR fields are parsed as v1.32 parses them (`ParseIPSloppy`:
//! `010.0.0.1` is valid), and writes are answered with the strategies'
//! warnings, such as v1.32's for an IP or CIDR that is not canonical
//! (`loadBalancerIP` is not validated at all, only warned about).
//!
//! Deployments and DaemonSets get v1's defaults: one replica, a rolling
//! update of 25%/25% (a DaemonSet's: one unavailable, no surge), ten
//! revisions kept, a progress deadline of 600 s; in the pod template the
//! DNS, restart and scheduler defaults, an empty security context, a 30 s
//! grace period; for its containers the pull policy by image tag, the
//! termination message path and policy, empty resources, TCP ports, probe
//! timings and an HTTP probe's path and scheme, `v1` field references; a
//! volume without a source is an `emptyDir`, projected files are mode 0644.
//! Their generation follows their spec (and a Deployment's annotations; a
//! DaemonSet's template generation is in its
//! `deprecated.daemonset.template.generation` annotation), and their status
//! is cleared on create (a DaemonSet's four counters at 0) and written only
//! through `status`.
//!
//! Nodes get what conversion, defaulting and admission do upstream:
//! `podCIDR` and `podCIDRs` kept in step (`podCIDR` wins when they differ),
//! `status.allocatable` defaulted from `capacity`, and the
//! `node.kubernetes.io/not-ready:NoSchedule` taint on every new Node
//! (`TaintNodesByCondition`). A patched `metadata.uid` is a 422 like any
//! immutable field; a PUT's is a precondition (409).
//!
//! # Layout
//!
//! In request order: `tls` (the generated CA, the serving certificate and
//! TLS termination) → `api` (HTTP routing, negotiation, faults around each
//! call), which asks `tokens` who a request is and `authorization` whether
//! they may (`authorization::attributes` reads what it asks,
//! `authorization::rbac` the bindings and roles) → `discovery` (discovery
//! documents), `openapi` (OpenAPI v3 documents) or `verbs` (what each verb
//! does) → `kinds` (per-kind defaulting, validation and strategies, with
//! `meta` for ObjectMeta, `validation` for name syntax, `schema` for CRD
//! schemas and what makes one valid, `micro_time` for `MicroTime` strings
//! as Go parses them) and `patch` (patch types; `managed_fields` for the
//! field ownership of apply), with `body` reading request bodies and the
//! keys they repeat and `protobuf` those sent in protobuf → `store`
//! (objects, resourceVersions, history) → `watch` (event streams).
//! `resources` is the registry of served types, `selectors` parses label
//! and field selectors, `status` renders errors as `Status` objects,
//! `faults` holds the test controls and `kubeconfig` writes the client's
//! kubeconfig. Beside the API, as on a real cluster, `crd_finalizer`
//! finishes deleting CRDs.
//!
//! Admin endpoints (no token needed): `GET`/`POST /_emulator/faults` (body:
//! a [`FaultCommand`]), `GET`/`DELETE /_emulator/requests` (the delete
//! forgets the authorization decisions too) and `GET
//! /_emulator/authorizations` (a list of [`Decision`]s).
//!
//! # Known differences from a real kube-apiserver
//!
//! - Only the resources above exist: endpoints and everything else are
//!   404, and pods 403 (so `kubectl describe node` prints `Pods: not
//!   authorized` where it would fail on a 404). Responses are JSON only
//!   (an `Accept` of only protobuf or YAML is a 406; client-go's typed
//!   clients also accept JSON); YAML bodies are a 415, and protobuf bodies
//!   of other kinds than those listed above too. A protobuf body is read
//!   for the fields kubectl's `create` subcommands set and the common rest
//!   of a pod template: one with a field the emulator does not read (a
//!   pod's affinity, most volume sources, …) is a 400 naming the message
//!   and field number, never silently dropped.
//!   Printer columns (`additionalPrinterColumns`) take the JSONPath
//!   subset CRDs use (`.field`, `['field']`, `[N]`,
//!   `[*]`, `[?(@.path=="value")]`, `!=`): a CRD with another path is
//!   refused as not a simple json path, and a `string` column shows an
//!   object or list as JSON where upstream prints Go's form.
//! - OpenAPI: no `/openapi/v2` (404), so a client falling back to it for a
//!   kind v3 does not list fails there: `helm install --dry-run=server` of
//!   a chart whose `crds/` are not installed yet fails validating its
//!   custom resource (`the server could not find the requested resource`)
//!   where a real server fails it later, finding no mapping for the kind.
//!   The v3 documents have no schemas (no `components.schemas`, no request
//!   or response bodies): `kubectl explain` fails with `GVK … not found in
//!   OpenAPI schema`, and kubectl's client-side apply computes its patches
//!   from its compiled-in types. Query parameters have no descriptions;
//!   the root lists only group-versions (upstream also `api`, `apis`,
//!   `apis/{group}`, `version`, `.well-known/openid-configuration`…), and
//!   no `watch/…` paths, which the emulator does not serve; documents are
//!   JSON only (an `Accept` of only protobuf is a 406); the hash is the
//!   emulator's own, 64 bits (upstream: a SHA-512).
//! - kube-rs retries 429, 503 and 504 by default, so injected failures with
//!   those codes may be invisible to a kube-rs client; use 500 to see them.
//! - The CA and serving certificate are new at every start, so a
//!   kubeconfig is good for one run; client certificates are not accepted.
//! - Service-account tokens are opaque random strings, not signed JWTs (no
//!   claims to decode), are never bound to objects
//!   (`boundObjectRef` is a 400) and live in memory only.
//!   [`EmulatorOptions::max_token_expiration`] may be any length, down to a
//!   second, so tests can see tokens expire: a real server's
//!   `--service-account-max-token-expiration` is at least an hour.
//! - `TokenReview` and `SubjectAccessReview` are not in discovery or
//!   OpenAPI (so `kubectl create -f` of one fails; clients that post them,
//!   as delegating servers do, work), and `SelfSubjectAccessReview`,
//!   `LocalSubjectAccessReview` and `SelfSubjectReview` are not served. A
//!   `TokenReview` answers no `uid` or `extra` for a user; a
//!   `SubjectAccessReview` ignores `spec.uid` and `spec.extra` (RBAC does
//!   not read them), never sets `denied` or `evaluationError`, and an
//!   allowed one has no `reason` (upstream's RBAC names the binding).
//!   Only bootstrap ClusterRole `system:auth-delegator` is an object;
//!   `system:discovery` and `system:basic-user` are only applied (see
//!   Authorization).
//! - Authorization is one mode, `AlwaysAllow` or `RBAC` (no `Node`
//!   authorizer, no webhook, no chain of modes). RBAC has no escalation or
//!   `bind` checks (creating a Role or binding is allowed to anyone allowed
//!   to create it), no aggregated ClusterRoles (an `aggregationRule` is
//!   stored, its `rules` never filled), no `SubjectAccessReview` or
//!   self-reviews (allowed, then 404), and no impersonation. The bootstrap
//!   roles and bindings (`cluster-admin`, `system:discovery`, the
//!   `system:controller:*` roles of kube-system's controller accounts…) are
//!   not objects in the store: only what `system:discovery` and
//!   `system:basic-user` allow every authenticated user is built in, so a
//!   service account named like a controller's has no rights of its own.
//!   With several bindings to missing roles, the 403 lists them in store
//!   order (upstream: its cache's). Paths outside `/api`, `/apis` and
//!   `/openapi` answer without authentication or authorization.
//! - No admission (but for the not-ready taint on new Nodes), API
//!   priority and fairness, audit, or garbage collector
//!   (`propagationPolicy` is validated but owner references are never
//!   followed, and no `orphan`/`foregroundDeletion` finalizer is added).
//! - No kube-controller-manager: the `not-ready` taint admission puts on a
//!   new Node stays until a client removes it (a real cluster's node
//!   lifecycle controller removes it once the node reports Ready), and no
//!   `unreachable`/`not-ready` taints follow the Ready condition later.
//!   Deployments and DaemonSets make no ReplicaSets, ControllerRevisions
//!   or pods, and their status stays as written: `kubectl rollout status`
//!   and `helm install --wait` wait until they time out, and `kubectl
//!   rollout history` fails (ReplicaSets are not served).
//! - Deployments have no `scale` subresource (`kubectl scale` is a 404).
//!   Their pod template is validated only as above (not its resources,
//!   probes, volume sources, mounts, security contexts, affinity or
//!   tolerations), and not defaulted in ephemeral containers, lifecycle
//!   handlers or a downward API volume's field references. An unknown
//!   strategy type's message shows a set `rollingUpdate` as `(…)` where Go
//!   prints its address.
//! - Resource quantities are stored as sent, not canonicalised (`1000m`
//!   stays `1000m` where upstream answers `1`), and integer-only resources
//!   (`pods`, extended resources) are not checked for fractions.
//! - Server-side apply merges by the strategic merge keys (upstream's
//!   apply keys some lists by more fields, container ports by port and
//!   protocol), and `metadata.managedFields` holds only `Apply` entries:
//!   other writes record no `Update` entry of their own (though they take
//!   the fields they change from the appliers), an apply never conflicts
//!   (as with `force=true`), and `FieldsV1` marks list items with `.` but
//!   not maps.
//! - Paginated and exact lists are served from the change history rather
//!   than etcd. A list the watch cache serves (`resourceVersion=0`) ignores
//!   `limit`, as upstream's does up to 1.32 (1.33 pages it). A list
//!   or watch at a future resourceVersion fails at once with 504 (upstream
//!   waits up to 3 s first).
//! - Watches never time out unless `timeoutSeconds` is set (upstream ends
//!   one without it after a random 30 to 60 minutes); bookmarks come every
//!   [`EmulatorOptions::bookmark_interval`] (upstream: about a minute).
//! - `PartialObjectMetadata` and `Table` are served for get, list and watch
//!   only (a write's response is always the whole object), and
//!   `PartialObjectMetadata` only in `meta.k8s.io/v1` (upstream also
//!   `v1beta1`).
//! - Events never expire. Service IPs and ports are allocated sequentially
//!   (10.96.0.0/12, and node ports from 30000-32767 or
//!   [`EmulatorOptions::service_node_port_range`]), IPv4 single-stack only.
//! - Custom resources: conversion is always `None` (webhook conversion is
//!   not called), no `scale` subresource, no CEL (`x-kubernetes-validations`),
//!   `allOf`/`anyOf`/`oneOf`/`not` and `format` are not checked (in a CRD's
//!   schema nor in its objects), nor are a schema's `default`s against it;
//!   the namespace controller acts synchronously within the request. The
//!   CRD finalizer acts on every write instead of polling each second for a
//!   minute: a CRD held by its objects' finalizers waits as long as they
//!   do, and never shows `InstanceDeletionCheck`.
//! - Strict decoding lists repeated keys before unknown fields (upstream:
//!   in document order); the operations of a JSON patch are not checked
//!   for unknown or repeated keys (upstream warns `json patch unknown
//!   field`), nor an apply patch for repeated keys. A patch's 422 on
//!   `patch` shows the patched object as JSON with sorted keys (upstream:
//!   in Go's field order).
//! - Only `metadata` drops empty lists and maps. Elsewhere an empty
//!   optional list or map a client sends (a Node's `taints: []`) is kept
//!   where Go's `omitempty` would drop it: k8s-openapi's types do not say
//!   which fields are `omitempty`, and Go keeps empty structs (`{}`).
//! - Continue tokens are the emulator's own, so a malformed one is refused
//!   with a message of its own.
//! - Validation covers the fields a CCM and its tests touch; some deep
//!   messages render Go structs (`%#v`) only approximately, and a missing
//!   field that k8s-openapi requires is a 422 `Required value` even where
//!   Go would have decoded a zero value, and the only cause reported (as
//!   for an events.k8s.io `series` without `lastObservedTime`).
//! - A custom-resource patch whose `metadata` has the wrong type is a 400
//!   (upstream: a 422 from the patcher), a custom resource sent with another
//!   served version of its group is a 400, and a create on a terminating CRD
//!   decodes the body before the 405: the emulator decodes custom resources
//!   before it routes them, and no CCM path depends on these answers.
//! - A Node, DaemonSet or events.k8s.io Event update reports each cause
//!   once (upstream validates some of them twice and repeats those); two `podCIDRs`
//!   of which one is invalid lack upstream's extra internal-error cause;
//!   invalid IPv6 warnings read "unable to parse IP" rather than Go's
//!   exact wording.

mod api;
mod authorization;
mod body;
mod crd_finalizer;
mod discovery;
mod faults;
mod kinds;
mod kubeconfig;
mod kubectl;
mod managed_fields;
mod meta;
mod micro_time;
mod openapi;
mod patch;
mod printer_columns;
mod protobuf;
mod resources;
mod reviews;
mod schema;
mod selectors;
mod status;
mod store;
mod table;
mod tls;
mod tokens;
mod validation;
mod verbs;
mod watch;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

pub use authorization::{Attributes, Authorization, Decision};
pub use faults::{DelayRule, FailRule, FaultCommand, FaultState, Faults, RequestCounts};
pub use kubectl::kubectl;
pub use store::Store;
pub use tls::TlsError;
pub use tokens::{ADMIN_USER, service_account_user};

/// How long [`Emulator::shutdown`] waits for open requests to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Configuration of an emulator.
#[derive(Debug, Clone)]
pub struct EmulatorOptions {
    /// The bearer token API requests must present (and the kubeconfig
    /// carries). Must not be empty.
    pub token: String,
    /// How many writes the change history keeps for watches and exact
    /// lists; older resourceVersions are "too old" (410). Default 1000.
    pub history: usize,
    /// How often watches that allow bookmarks get one. Default 1 s.
    pub bookmark_interval: Duration,
    /// The kube-apiserver's `--service-account-max-token-expiration`: a
    /// `TokenRequest` for longer gets a token of this lifetime (and a
    /// warning). Default none. Unlike the real flag it may be shorter than
    /// an hour, for tests that watch tokens expire.
    pub max_token_expiration: Option<Duration>,
    /// The kube-apiserver's `--authorization-mode`: who may do what.
    /// Default [`Authorization::AlwaysAllow`].
    pub authorization: Authorization,
    /// The kube-apiserver's `--service-node-port-range`: the node ports
    /// Services are given. Default 30000-32767 (2,768 ports, so as many
    /// one-port LoadBalancer Services at most, as on a real cluster).
    pub service_node_port_range: std::ops::RangeInclusive<u16>,
}

impl Default for EmulatorOptions {
    fn default() -> EmulatorOptions {
        EmulatorOptions {
            token: "kube-emulator".to_owned(),
            history: 1000,
            bookmark_interval: Duration::from_secs(1),
            max_token_expiration: None,
            authorization: Authorization::AlwaysAllow,
            service_node_port_range: 30000..=32767,
        }
    }
}

/// Why the emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("kube-emulator: the bearer token must not be empty")]
    EmptyToken,
    #[error("kube-emulator: cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("kube-emulator: cannot set up HTTPS: {0}")]
    Tls(#[from] TlsError),
    #[error("kube-emulator: seeding {what} failed: {message}")]
    Seed { what: &'static str, message: String },
}

/// A running emulator. Dropping it stops the server too, but
/// [`Emulator::shutdown`] also waits for it to finish.
#[derive(Debug)]
pub struct Emulator {
    addr: SocketAddr,
    token: String,
    ca_pem: String,
    store: Store,
    faults: Faults,
    requests: faults::Requests,
    authorizer: authorization::Authorizer,
    stop: signal::Sender<bool>,
    server: Option<JoinHandle<()>>,
}

impl Emulator {
    /// Binds `listen` (port 0 picks a free one), generates a CA and a
    /// serving certificate, seeds the built-in namespaces and serves HTTPS
    /// in a background task.
    pub async fn start(
        listen: SocketAddr,
        options: EmulatorOptions,
    ) -> Result<Emulator, StartError> {
        if options.token.is_empty() {
            return Err(StartError::EmptyToken);
        }
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: listen,
            source,
        })?;
        let certificates = tls::generate(addr.ip())?;
        let listener = tls::TlsListener::new(listener, certificates.server).map_err(|source| {
            StartError::Bind {
                addr: listen,
                source,
            }
        })?;
        let store = Store::new(options.history);
        store.set_node_ports(options.service_node_port_range.clone());
        seed(&store)?;
        let faults = Faults::default();
        let requests = faults::Requests::default();
        let authorizer = authorization::Authorizer::new(options.authorization);
        let (stop, stopped) = signal::channel(false);
        let app = api::App {
            store: store.clone(),
            faults: faults.clone(),
            requests: requests.clone(),
            tokens: tokens::Tokens::new(&options.token, options.max_token_expiration),
            authorizer: authorizer.clone(),
            addr,
            bookmark_interval: options.bookmark_interval.max(Duration::from_millis(10)),
            shutdown: stopped.clone(),
        };
        tokio::spawn(crd_finalizer::run(store.clone(), stopped.clone()));
        let mut stopped_signal = stopped;
        let server = tokio::spawn(async move {
            let serve =
                axum::serve(listener, api::router(app)).with_graceful_shutdown(async move {
                    let _ = stopped_signal.wait_for(|stop| *stop).await;
                });
            if let Err(err) = serve.await {
                tracing::error!(%err, "kube-emulator server failed");
            }
        });
        tracing::info!(%addr, "kube-emulator started");
        Ok(Emulator {
            addr,
            token: options.token,
            ca_pem: certificates.ca_pem,
            store,
            faults,
            requests,
            authorizer,
            stop,
            server: Some(server),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server URL, e.g. `https://127.0.0.1:41234`. When listening on
    /// every address, the loopback one: the certificate names loopback, not
    /// `0.0.0.0`.
    pub fn url(&self) -> String {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
            });
        }
        format!("https://{addr}")
    }

    /// The admin's bearer token (the kubeconfig's), for clients that do not
    /// read the kubeconfig: what a `TokenReview` of it answers is [`ADMIN_USER`].
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The PEM certificate of the CA that signed the serving certificate,
    /// for clients that do not read the kubeconfig (reqwest's
    /// `Certificate::from_pem`, curl's `--cacert`).
    pub fn ca_certificate_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The kubeconfig (YAML) that reaches this emulator.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig::render(&self.url(), &self.ca_pem, &self.token)
    }

    /// The kubeconfig that reaches this emulator, as kube-rs reads it.
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        match kubeconfig::parse(&self.kubeconfig_yaml()) {
            Ok(config) => config,
            Err(err) => unreachable!("the generated kubeconfig is valid YAML: {err}"),
        }
    }

    /// Writes the kubeconfig to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// The object store, for inspection.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The fault controls.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// API requests served so far, per verb and resource, per user agent and per user.
    pub fn requests(&self) -> RequestCounts {
        self.requests.snapshot()
    }

    /// The distinct authorization decisions so far, in either mode: who
    /// asked to do what (the request's [`Attributes`], as upstream computes
    /// them), whether it was allowed, and how often.
    pub fn authorizations(&self) -> Vec<Decision> {
        self.authorizer.snapshot()
    }

    /// Forgets the request counts and the authorization decisions.
    pub fn reset_requests(&self) {
        self.requests.reset();
        self.authorizer.reset();
    }

    /// Stops accepting connections, ends watches, lets open requests
    /// finish (for at most five seconds) and waits for the server to stop.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(mut server) = self.server.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
                .await
                .is_err()
        {
            server.abort();
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// What every cluster has from the start.
fn seed(store: &Store) -> Result<(), StartError> {
    store.write(|state| {
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let rt = state
                .registry
                .builtin(resources::Rules::Namespace)
                .ok_or(StartError::Seed { what: "namespaces", message: "not registered".into() })?;
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            verbs::create(state, &rt, "", body, &verbs::WriteOptions::default())
                .map_err(|e| StartError::Seed { what: "namespaces", message: e.to_string() })?;
        }
        let rt = state
            .registry
            .builtin(resources::Rules::Service)
            .ok_or(StartError::Seed { what: "the kubernetes service", message: "not registered".into() })?;
        let body = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}
        });
        verbs::create(state, &rt, "default", body, &verbs::WriteOptions::default())
            .map_err(|e| StartError::Seed { what: "the kubernetes service", message: e.to_string() })?;
        // The bootstrap role a delegating server's account is bound to.
        let rt = state
            .registry
            .builtin(resources::Rules::ClusterRole)
            .ok_or(StartError::Seed { what: "system:auth-delegator", message: "not registered".into() })?;
        let body = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {
                "name": "system:auth-delegator",
                "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}
            },
            "rules": [
                {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}
            ]
        });
        verbs::create(state, &rt, "", body, &verbs::WriteOptions::default())
            .map_err(|e| StartError::Seed { what: "system:auth-delegator", message: e.to_string() })?;
        Ok(())
    })
}
