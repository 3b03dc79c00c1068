//! The resource types the emulator serves: the built-in kinds a cloud
//! controller manager uses and its chart installs, plus one entry per
//! served version of every established CustomResourceDefinition.
//! Discovery, routing and the store all read this registry.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::printer_columns::PrinterColumn;
use crate::status::{GroupKind, GroupResource};

/// Where objects of a resource live in the store. Two resource types can
/// share one (core/v1 and events.k8s.io/v1 events).
pub type StorageKey = Arc<str>;

/// Which rules (defaulting, validation, update strategy) apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    Namespace,
    Node,
    Service,
    ConfigMap,
    Secret,
    ServiceAccount,
    Event,
    Lease,
    Deployment,
    DaemonSet,
    CustomResourceDefinition,
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
    NetworkPolicy,
    Custom,
}

/// How stored objects are presented on this resource's endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// As stored.
    Native,
    /// A core/v1 Event converted to events.k8s.io/v1.
    EventsV1,
}

/// What a custom resource type takes from its CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomType {
    /// `plural.group`, the CRD's name.
    pub crd_name: String,
    /// The version objects are stored in.
    pub storage_version: String,
    /// This version's `openAPIV3Schema`.
    pub schema: Option<Value>,
    /// This version's `selectableFields[].jsonPath`, without the leading dot.
    pub selectable_fields: Vec<String>,
    /// This version's `additionalPrinterColumns` (none: Tables show Age).
    pub printer_columns: Vec<PrinterColumn>,
    /// The CRD is being deleted: creates are refused.
    pub terminating: bool,
}

/// One servable group/version/resource.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Has a `/status` subresource.
    pub status_subresource: bool,
    pub storage: StorageKey,
    pub rules: Rules,
    pub view: View,
    pub custom: Option<CustomType>,
}

impl ResourceType {
    /// `v1` for the core group, else `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.plural)
    }

    pub fn group_kind(&self) -> GroupKind {
        GroupKind::new(&self.group, &self.kind)
    }

    /// The verbs discovery advertises for the main resource.
    pub fn verbs(&self) -> Vec<&'static str> {
        let mut verbs = vec!["create", "delete"];
        if self.rules != Rules::Namespace {
            verbs.push("deletecollection");
        }
        verbs.extend(["get", "list", "patch", "update", "watch"]);
        verbs
    }

    /// Built-in types have typed Go structs upstream; custom resources are
    /// unstructured (no strategic merge patch, TypeMeta kept in lists).
    pub fn is_custom(&self) -> bool {
        self.rules == Rules::Custom
    }

    /// Whether DELETE answers with the deleted object rather than a Status
    /// (`ReturnDeletedObject` in the upstream registry).
    pub fn returns_deleted_object(&self) -> bool {
        self.rules == Rules::Service
    }
}

struct Builtin {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    storage: &'static str,
    rules: Rules,
    view: View,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        kind: "Namespace",
        plural: "namespaces",
        namespaced: false,
        short: &["ns"],
        categories: &[],
        status: true,
        storage: "/namespaces",
        rules: Rules::Namespace,
        view: View::Native,
    },
    Builtin {
        group: "",
        kind: "Node",
        plural: "nodes",
        namespaced: false,
        short: &["no"],
        categories: &[],
        status: true,
        storage: "/nodes",
        rules: Rules::Node,
        view: View::Native,
    },
    Builtin {
        group: "",
        kind: "Service",
        plural: "services",
        namespaced: true,
        short: &["svc"],
        categories: &["all"],
        status: true,
        storage: "/services",
        rules: Rules::Service,
        view: View::Native,
    },
    Builtin {
        group: "",
        kind: "ConfigMap",
        plural: "configmaps",
        namespaced: true,
        short: &["cm"],
        categories: &[],
        status: false,
        storage: "/configmaps",
        rules: Rules::ConfigMap,
        view: View::Native,
    },
    Builtin {
        group: "",
        kind: "Secret",
        plural: "secrets",
        namespaced: true,
        short: &[],
        categories: &[],
        status: false,
        storage: "/secrets",
        rules: Rules::Secret,
        view: View::Native,
    },
    Builtin {
        group: "",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        namespaced: true,
        short: &["sa"],
        categories: &[],
        status: false,
        storage: "/serviceaccounts",
        rules: Rules::ServiceAccount,
        view: View::Native,
    },
    Builtin {
        group: "",
        kind: "Event",
        plural: "events",
        namespaced: true,
        short: &["ev"],
        categories: &[],
        status: false,
        storage: "/events",
        rules: Rules::Event,
        view: View::Native,
    },
    Builtin {
        group: "apps",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        short: &["deploy"],
        categories: &["all"],
        status: true,
        storage: "apps/deployments",
        rules: Rules::Deployment,
        view: View::Native,
    },
    Builtin {
        group: "apps",
        kind: "DaemonSet",
        plural: "daemonsets",
        namespaced: true,
        short: &["ds"],
        categories: &["all"],
        status: true,
        storage: "apps/daemonsets",
        rules: Rules::DaemonSet,
        view: View::Native,
    },
    Builtin {
        group: "coordination.k8s.io",
        kind: "Lease",
        plural: "leases",
        namespaced: true,
        short: &[],
        categories: &[],
        status: false,
        storage: "coordination.k8s.io/leases",
        rules: Rules::Lease,
        view: View::Native,
    },
    Builtin {
        group: "events.k8s.io",
        kind: "Event",
        plural: "events",
        namespaced: true,
        short: &["ev"],
        categories: &[],
        status: false,
        storage: "/events",
        rules: Rules::Event,
        view: View::EventsV1,
    },
    Builtin {
        group: "apiextensions.k8s.io",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        namespaced: false,
        short: &["crd", "crds"],
        categories: &[],
        status: true,
        storage: "apiextensions.k8s.io/customresourcedefinitions",
        rules: Rules::CustomResourceDefinition,
        view: View::Native,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        kind: "ClusterRoleBinding",
        plural: "clusterrolebindings",
        namespaced: false,
        short: &[],
        categories: &[],
        status: false,
        storage: "rbac.authorization.k8s.io/clusterrolebindings",
        rules: Rules::ClusterRoleBinding,
        view: View::Native,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        plural: "clusterroles",
        namespaced: false,
        short: &[],
        categories: &[],
        status: false,
        storage: "rbac.authorization.k8s.io/clusterroles",
        rules: Rules::ClusterRole,
        view: View::Native,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        kind: "RoleBinding",
        plural: "rolebindings",
        namespaced: true,
        short: &[],
        categories: &[],
        status: false,
        storage: "rbac.authorization.k8s.io/rolebindings",
        rules: Rules::RoleBinding,
        view: View::Native,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        kind: "Role",
        plural: "roles",
        namespaced: true,
        short: &[],
        categories: &[],
        status: false,
        storage: "rbac.authorization.k8s.io/roles",
        rules: Rules::Role,
        view: View::Native,
    },
    Builtin {
        group: "networking.k8s.io",
        kind: "NetworkPolicy",
        plural: "networkpolicies",
        namespaced: true,
        short: &["netpol"],
        categories: &[],
        status: false,
        storage: "networking.k8s.io/networkpolicies",
        rules: Rules::NetworkPolicy,
        view: View::Native,
    },
];

/// A group as discovery lists it: its versions, preferred first.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupVersions {
    pub name: String,
    pub versions: Vec<String>,
}

/// All servable resource types.
#[derive(Debug, Clone)]
pub struct Registry {
    builtin: Vec<Arc<ResourceType>>,
    /// By CRD name; one entry per served version, storage version first.
    custom: BTreeMap<String, Vec<Arc<ResourceType>>>,
}

impl Registry {
    pub fn new() -> Registry {
        let builtin = BUILTINS
            .iter()
            .map(|b| {
                Arc::new(ResourceType {
                    group: b.group.to_owned(),
                    version: "v1".to_owned(),
                    kind: b.kind.to_owned(),
                    plural: b.plural.to_owned(),
                    singular: b.kind.to_lowercase(),
                    namespaced: b.namespaced,
                    short_names: b.short.iter().map(|s| (*s).to_owned()).collect(),
                    categories: b.categories.iter().map(|c| (*c).to_owned()).collect(),
                    status_subresource: b.status,
                    storage: Arc::from(b.storage),
                    rules: b.rules,
                    view: b.view,
                    custom: None,
                })
            })
            .collect();
        Registry {
            builtin,
            custom: BTreeMap::new(),
        }
    }

    fn all(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.builtin.iter().chain(self.custom.values().flatten())
    }

    /// The resource type served at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.all()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// A resource type by its built-in rules (each has exactly one native view).
    pub fn builtin(&self, rules: Rules) -> Option<Arc<ResourceType>> {
        self.builtin
            .iter()
            .find(|r| r.rules == rules && r.view == View::Native)
            .cloned()
    }

    /// Any resource type stored under `storage`, preferring the native view.
    pub fn by_storage(&self, storage: &str) -> Option<Arc<ResourceType>> {
        self.all()
            .filter(|r| &*r.storage == storage)
            .min_by_key(|r| r.view != View::Native)
            .cloned()
    }

    /// Whether a group/version is served at all.
    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.all().any(|r| r.group == group && r.version == version)
    }

    /// The resource types of one group/version, in discovery order.
    pub fn resources(&self, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
        self.all()
            .filter(|r| r.group == group && r.version == version)
            .cloned()
            .collect()
    }

    /// The named API groups (not the core group), versions preferred first.
    pub fn groups(&self) -> Vec<GroupVersions> {
        let mut groups: Vec<GroupVersions> = Vec::new();
        for r in self.all().filter(|r| !r.group.is_empty()) {
            match groups.iter_mut().find(|g| g.name == r.group) {
                Some(g) => {
                    if !g.versions.contains(&r.version) {
                        g.versions.push(r.version.clone());
                    }
                }
                None => groups.push(GroupVersions {
                    name: r.group.clone(),
                    versions: vec![r.version.clone()],
                }),
            }
        }
        groups
    }

    /// Replaces the resource types served for a CRD (none removes them).
    pub fn set_custom(&mut self, crd_name: &str, types: Vec<Arc<ResourceType>>) {
        if types.is_empty() {
            self.custom.remove(crd_name);
        } else {
            self.custom.insert(crd_name.to_owned(), types);
        }
    }

    /// The resource types currently served for a CRD.
    pub fn custom(&self, crd_name: &str) -> &[Arc<ResourceType>] {
        self.custom.get(crd_name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Another CRD already serving `plural` or `kind` in `group`.
    pub fn custom_conflict(
        &self,
        crd_name: &str,
        group: &str,
        plural: &str,
        kind: &str,
    ) -> Option<String> {
        self.custom
            .iter()
            .filter(|(name, _)| name.as_str() != crd_name)
            .flat_map(|(_, types)| types)
            .chain(self.builtin.iter())
            .find(|r| r.group == group && (r.plural == plural || r.kind == kind))
            .map(|r| {
                if r.plural == plural {
                    format!("\"{plural}\" is already in use")
                } else {
                    format!("\"{kind}\" is already in use")
                }
            })
    }
}

impl Default for Registry {
    fn default() -> Registry {
        Registry::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_found_by_gvr() {
        let registry = Registry::new();
        let leases = registry
            .find("coordination.k8s.io", "v1", "leases")
            .unwrap();
        assert!(leases.namespaced);
        assert_eq!(leases.api_version(), "coordination.k8s.io/v1");
        let core = registry.find("", "v1", "events").unwrap();
        let new = registry.find("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(core.storage, new.storage);
        assert_eq!(registry.by_storage("/events").unwrap().view, View::Native);
        assert!(registry.find("", "v1", "pods").is_none());
    }
}
