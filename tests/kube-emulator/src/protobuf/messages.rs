//! The messages `protobuf` reads, as field tables with the numbers of
//! upstream's `generated.proto` files (k8s.io/api v1.32: core/v1, apps/v1,
//! rbac/v1, authentication/v1; apimachinery's meta/v1). Each table lists
//! what the objects kubectl's `create` subcommands write can hold, and
//! the common rest of a pod template; the fields left out (a pod's
//! affinity, most volume sources, …) are refused when sent.

use super::{Field, Kind, Message};

/// The message of an enveloped object's type.
pub(super) fn for_type(api_version: &str, kind: &str) -> Option<&'static Message> {
    Some(match (api_version, kind) {
        ("v1", "Secret") => SECRET,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Service") => SERVICE,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("apps/v1", "Deployment") => DEPLOYMENT,
        ("rbac.authorization.k8s.io/v1", "Role") => ROLE,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => CLUSTER_ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => ROLE_BINDING,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => CLUSTER_ROLE_BINDING,
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        (_, "DeleteOptions") => DELETE_OPTIONS,
        _ => return None,
    })
}

// meta/v1

const OWNER_REFERENCE: &Message = &Message {
    name: "OwnerReference",
    fields: &[
        Field(1, "kind", Kind::String),
        Field(3, "name", Kind::String),
        Field(4, "uid", Kind::String),
        Field(5, "apiVersion", Kind::String),
        Field(6, "controller", Kind::BoolPtr),
        Field(7, "blockOwnerDeletion", Kind::BoolPtr),
    ],
};

const MANAGED_FIELDS_ENTRY: &Message = &Message {
    name: "ManagedFieldsEntry",
    fields: &[
        Field(1, "manager", Kind::String),
        Field(2, "operation", Kind::String),
        Field(3, "apiVersion", Kind::String),
        Field(4, "time", Kind::Time),
        Field(6, "fieldsType", Kind::String),
        Field(7, "fieldsV1", Kind::FieldsV1),
        Field(8, "subresource", Kind::String),
    ],
};

const OBJECT_META: &Message = &Message {
    name: "ObjectMeta",
    fields: &[
        Field(1, "name", Kind::String),
        Field(2, "generateName", Kind::String),
        Field(3, "namespace", Kind::String),
        Field(4, "selfLink", Kind::String),
        Field(5, "uid", Kind::String),
        Field(6, "resourceVersion", Kind::String),
        Field(7, "generation", Kind::Int64),
        Field(8, "creationTimestamp", Kind::Time),
        Field(9, "deletionTimestamp", Kind::Time),
        Field(10, "deletionGracePeriodSeconds", Kind::Int64Ptr),
        Field(11, "labels", Kind::StringMap),
        Field(12, "annotations", Kind::StringMap),
        Field(13, "ownerReferences", Kind::Messages(OWNER_REFERENCE)),
        Field(14, "finalizers", Kind::Strings),
        Field(17, "managedFields", Kind::Messages(MANAGED_FIELDS_ENTRY)),
    ],
};

const LABEL_SELECTOR_REQUIREMENT: &Message = &Message {
    name: "LabelSelectorRequirement",
    fields: &[
        Field(1, "key", Kind::String),
        Field(2, "operator", Kind::String),
        Field(3, "values", Kind::Strings),
    ],
};

const LABEL_SELECTOR: &Message = &Message {
    name: "LabelSelector",
    fields: &[
        Field(1, "matchLabels", Kind::StringMap),
        Field(
            2,
            "matchExpressions",
            Kind::Messages(LABEL_SELECTOR_REQUIREMENT),
        ),
    ],
};

const CONDITION: &Message = &Message {
    name: "Condition",
    fields: &[
        Field(1, "type", Kind::String),
        Field(2, "status", Kind::String),
        Field(3, "observedGeneration", Kind::Int64),
        Field(4, "lastTransitionTime", Kind::Time),
        Field(5, "reason", Kind::String),
        Field(6, "message", Kind::String),
    ],
};

const PRECONDITIONS: &Message = &Message {
    name: "Preconditions",
    fields: &[
        Field(1, "uid", Kind::StringPtr),
        Field(2, "resourceVersion", Kind::StringPtr),
    ],
};

const DELETE_OPTIONS: &Message = &Message {
    name: "DeleteOptions",
    fields: &[
        Field(1, "gracePeriodSeconds", Kind::Int64Ptr),
        Field(2, "preconditions", Kind::Message(PRECONDITIONS)),
        Field(3, "orphanDependents", Kind::BoolPtr),
        Field(4, "propagationPolicy", Kind::StringPtr),
        Field(5, "dryRun", Kind::Strings),
        Field(
            6,
            "ignoreStoreReadErrorWithClusterBreakingPotential",
            Kind::BoolPtr,
        ),
    ],
};

// core/v1: Secret, ConfigMap, Namespace, ServiceAccount

const SECRET: &Message = &Message {
    name: "Secret",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(2, "data", Kind::BytesMap),
        Field(3, "type", Kind::String),
        Field(4, "stringData", Kind::StringMap),
        Field(5, "immutable", Kind::BoolPtr),
    ],
};

const CONFIG_MAP: &Message = &Message {
    name: "ConfigMap",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(2, "data", Kind::StringMap),
        Field(3, "binaryData", Kind::BytesMap),
        Field(4, "immutable", Kind::BoolPtr),
    ],
};

const NAMESPACE_CONDITION: &Message = &Message {
    name: "NamespaceCondition",
    fields: &[
        Field(1, "type", Kind::String),
        Field(2, "status", Kind::String),
        Field(4, "lastTransitionTime", Kind::Time),
        Field(5, "reason", Kind::String),
        Field(6, "message", Kind::String),
    ],
};

const NAMESPACE: &Message = &Message {
    name: "Namespace",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(
            2,
            "spec",
            Kind::Message(&Message {
                name: "NamespaceSpec",
                fields: &[Field(1, "finalizers", Kind::Strings)],
            }),
        ),
        Field(
            3,
            "status",
            Kind::Message(&Message {
                name: "NamespaceStatus",
                fields: &[
                    Field(1, "phase", Kind::String),
                    Field(2, "conditions", Kind::Messages(NAMESPACE_CONDITION)),
                ],
            }),
        ),
    ],
};

const LOCAL_OBJECT_REFERENCE: &Message = &Message {
    name: "LocalObjectReference",
    fields: &[Field(1, "name", Kind::String)],
};

const OBJECT_REFERENCE: &Message = &Message {
    name: "ObjectReference",
    fields: &[
        Field(1, "kind", Kind::String),
        Field(2, "namespace", Kind::String),
        Field(3, "name", Kind::String),
        Field(4, "uid", Kind::String),
        Field(5, "apiVersion", Kind::String),
        Field(6, "resourceVersion", Kind::String),
        Field(7, "fieldPath", Kind::String),
    ],
};

const SERVICE_ACCOUNT: &Message = &Message {
    name: "ServiceAccount",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(2, "secrets", Kind::Messages(OBJECT_REFERENCE)),
        Field(
            3,
            "imagePullSecrets",
            Kind::Messages(LOCAL_OBJECT_REFERENCE),
        ),
        Field(4, "automountServiceAccountToken", Kind::BoolPtr),
    ],
};

// core/v1: Service

const SERVICE_PORT: &Message = &Message {
    name: "ServicePort",
    fields: &[
        Field(1, "name", Kind::String),
        Field(2, "protocol", Kind::String),
        Field(3, "port", Kind::Int32),
        Field(4, "targetPort", Kind::IntOrString),
        Field(5, "nodePort", Kind::Int32),
        Field(6, "appProtocol", Kind::StringPtr),
    ],
};

const SESSION_AFFINITY_CONFIG: &Message = &Message {
    name: "SessionAffinityConfig",
    fields: &[Field(
        1,
        "clientIP",
        Kind::Message(&Message {
            name: "ClientIPConfig",
            fields: &[Field(1, "timeoutSeconds", Kind::Int32Ptr)],
        }),
    )],
};

const SERVICE_SPEC: &Message = &Message {
    name: "ServiceSpec",
    fields: &[
        Field(1, "ports", Kind::Messages(SERVICE_PORT)),
        Field(2, "selector", Kind::StringMap),
        Field(3, "clusterIP", Kind::String),
        Field(4, "type", Kind::String),
        Field(5, "externalIPs", Kind::Strings),
        Field(7, "sessionAffinity", Kind::String),
        Field(8, "loadBalancerIP", Kind::String),
        Field(9, "loadBalancerSourceRanges", Kind::Strings),
        Field(10, "externalName", Kind::String),
        Field(11, "externalTrafficPolicy", Kind::String),
        Field(12, "healthCheckNodePort", Kind::Int32),
        Field(13, "publishNotReadyAddresses", Kind::Bool),
        Field(
            14,
            "sessionAffinityConfig",
            Kind::Message(SESSION_AFFINITY_CONFIG),
        ),
        Field(17, "ipFamilyPolicy", Kind::StringPtr),
        Field(18, "clusterIPs", Kind::Strings),
        Field(19, "ipFamilies", Kind::Strings),
        Field(20, "allocateLoadBalancerNodePorts", Kind::BoolPtr),
        Field(21, "loadBalancerClass", Kind::StringPtr),
        Field(22, "internalTrafficPolicy", Kind::StringPtr),
        Field(23, "trafficDistribution", Kind::StringPtr),
    ],
};

const LOAD_BALANCER_INGRESS: &Message = &Message {
    name: "LoadBalancerIngress",
    fields: &[
        Field(1, "ip", Kind::String),
        Field(2, "hostname", Kind::String),
        Field(3, "ipMode", Kind::StringPtr),
        Field(
            4,
            "ports",
            Kind::Messages(&Message {
                name: "PortStatus",
                fields: &[
                    Field(1, "port", Kind::Int32),
                    Field(2, "protocol", Kind::String),
                    Field(3, "error", Kind::StringPtr),
                ],
            }),
        ),
    ],
};

const SERVICE_STATUS: &Message = &Message {
    name: "ServiceStatus",
    fields: &[
        Field(
            1,
            "loadBalancer",
            Kind::Message(&Message {
                name: "LoadBalancerStatus",
                fields: &[Field(1, "ingress", Kind::Messages(LOAD_BALANCER_INGRESS))],
            }),
        ),
        Field(2, "conditions", Kind::Messages(CONDITION)),
    ],
};

const SERVICE: &Message = &Message {
    name: "Service",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(2, "spec", Kind::Message(SERVICE_SPEC)),
        Field(3, "status", Kind::Message(SERVICE_STATUS)),
    ],
};

// core/v1: the pod template

const OBJECT_FIELD_SELECTOR: &Message = &Message {
    name: "ObjectFieldSelector",
    fields: &[
        Field(1, "apiVersion", Kind::String),
        Field(2, "fieldPath", Kind::String),
    ],
};

const RESOURCE_FIELD_SELECTOR: &Message = &Message {
    name: "ResourceFieldSelector",
    fields: &[
        Field(1, "containerName", Kind::String),
        Field(2, "resource", Kind::String),
        Field(3, "divisor", Kind::Quantity),
    ],
};

/// The fields of `ConfigMapKeySelector` and `SecretKeySelector`.
const KEY_SELECTOR: &[Field] = &[
    Field(
        1,
        "localObjectReference",
        Kind::Inline(LOCAL_OBJECT_REFERENCE),
    ),
    Field(2, "key", Kind::String),
    Field(3, "optional", Kind::BoolPtr),
];

const CONFIG_MAP_KEY_SELECTOR: &Message = &Message {
    name: "ConfigMapKeySelector",
    fields: KEY_SELECTOR,
};

const SECRET_KEY_SELECTOR: &Message = &Message {
    name: "SecretKeySelector",
    fields: KEY_SELECTOR,
};

const ENV_VAR: &Message = &Message {
    name: "EnvVar",
    fields: &[
        Field(1, "name", Kind::String),
        Field(2, "value", Kind::String),
        Field(
            3,
            "valueFrom",
            Kind::Message(&Message {
                name: "EnvVarSource",
                fields: &[
                    Field(1, "fieldRef", Kind::Message(OBJECT_FIELD_SELECTOR)),
                    Field(
                        2,
                        "resourceFieldRef",
                        Kind::Message(RESOURCE_FIELD_SELECTOR),
                    ),
                    Field(3, "configMapKeyRef", Kind::Message(CONFIG_MAP_KEY_SELECTOR)),
                    Field(4, "secretKeyRef", Kind::Message(SECRET_KEY_SELECTOR)),
                ],
            }),
        ),
    ],
};

/// The fields of `ConfigMapEnvSource` and `SecretEnvSource`.
const ENV_SOURCE: &[Field] = &[
    Field(
        1,
        "localObjectReference",
        Kind::Inline(LOCAL_OBJECT_REFERENCE),
    ),
    Field(2, "optional", Kind::BoolPtr),
];

const ENV_FROM_SOURCE: &Message = &Message {
    name: "EnvFromSource",
    fields: &[
        Field(1, "prefix", Kind::String),
        Field(
            2,
            "configMapRef",
            Kind::Message(&Message {
                name: "ConfigMapEnvSource",
                fields: ENV_SOURCE,
            }),
        ),
        Field(
            3,
            "secretRef",
            Kind::Message(&Message {
                name: "SecretEnvSource",
                fields: ENV_SOURCE,
            }),
        ),
    ],
};

const CONTAINER_PORT: &Message = &Message {
    name: "ContainerPort",
    fields: &[
        Field(1, "name", Kind::String),
        Field(2, "hostPort", Kind::Int32),
        Field(3, "containerPort", Kind::Int32),
        Field(4, "protocol", Kind::String),
        Field(5, "hostIP", Kind::String),
    ],
};

const RESOURCE_REQUIREMENTS: &Message = &Message {
    name: "ResourceRequirements",
    fields: &[
        Field(1, "limits", Kind::QuantityMap),
        Field(2, "requests", Kind::QuantityMap),
        Field(
            3,
            "claims",
            Kind::Messages(&Message {
                name: "ResourceClaim",
                fields: &[
                    Field(1, "name", Kind::String),
                    Field(2, "request", Kind::String),
                ],
            }),
        ),
    ],
};

const VOLUME_MOUNT: &Message = &Message {
    name: "VolumeMount",
    fields: &[
        Field(1, "name", Kind::String),
        Field(2, "readOnly", Kind::Bool),
        Field(3, "mountPath", Kind::String),
        Field(4, "subPath", Kind::String),
        Field(5, "mountPropagation", Kind::StringPtr),
        Field(6, "subPathExpr", Kind::String),
        Field(7, "recursiveReadOnly", Kind::StringPtr),
    ],
};

const EXEC_ACTION: &Message = &Message {
    name: "ExecAction",
    fields: &[Field(1, "command", Kind::Strings)],
};

const HTTP_GET_ACTION: &Message = &Message {
    name: "HTTPGetAction",
    fields: &[
        Field(1, "path", Kind::String),
        Field(2, "port", Kind::IntOrString),
        Field(3, "host", Kind::String),
        Field(4, "scheme", Kind::String),
        Field(
            5,
            "httpHeaders",
            Kind::Messages(&Message {
                name: "HTTPHeader",
                fields: &[
                    Field(1, "name", Kind::String),
                    Field(2, "value", Kind::String),
                ],
            }),
        ),
    ],
};

const TCP_SOCKET_ACTION: &Message = &Message {
    name: "TCPSocketAction",
    fields: &[
        Field(1, "port", Kind::IntOrString),
        Field(2, "host", Kind::String),
    ],
};

const PROBE_HANDLER: &Message = &Message {
    name: "ProbeHandler",
    fields: &[
        Field(1, "exec", Kind::Message(EXEC_ACTION)),
        Field(2, "httpGet", Kind::Message(HTTP_GET_ACTION)),
        Field(3, "tcpSocket", Kind::Message(TCP_SOCKET_ACTION)),
        Field(
            4,
            "grpc",
            Kind::Message(&Message {
                name: "GRPCAction",
                fields: &[
                    Field(1, "port", Kind::Int32),
                    Field(2, "service", Kind::StringPtr),
                ],
            }),
        ),
    ],
};

const PROBE: &Message = &Message {
    name: "Probe",
    fields: &[
        Field(1, "handler", Kind::Inline(PROBE_HANDLER)),
        Field(2, "initialDelaySeconds", Kind::Int32),
        Field(3, "timeoutSeconds", Kind::Int32),
        Field(4, "periodSeconds", Kind::Int32),
        Field(5, "successThreshold", Kind::Int32),
        Field(6, "failureThreshold", Kind::Int32),
        Field(7, "terminationGracePeriodSeconds", Kind::Int64Ptr),
    ],
};

const LIFECYCLE_HANDLER: &Message = &Message {
    name: "LifecycleHandler",
    fields: &[
        Field(1, "exec", Kind::Message(EXEC_ACTION)),
        Field(2, "httpGet", Kind::Message(HTTP_GET_ACTION)),
        Field(3, "tcpSocket", Kind::Message(TCP_SOCKET_ACTION)),
        Field(
            4,
            "sleep",
            Kind::Message(&Message {
                name: "SleepAction",
                fields: &[Field(1, "seconds", Kind::Int64)],
            }),
        ),
    ],
};

const LIFECYCLE: &Message = &Message {
    name: "Lifecycle",
    fields: &[
        Field(1, "postStart", Kind::Message(LIFECYCLE_HANDLER)),
        Field(2, "preStop", Kind::Message(LIFECYCLE_HANDLER)),
        Field(3, "stopSignal", Kind::StringPtr),
    ],
};

const SECCOMP_PROFILE: &Message = &Message {
    name: "SeccompProfile",
    fields: &[
        Field(1, "type", Kind::String),
        Field(2, "localhostProfile", Kind::StringPtr),
    ],
};

/// A container's `SecurityContext`, without its SELinux, Windows,
/// AppArmor and ulimit settings.
const SECURITY_CONTEXT: &Message = &Message {
    name: "SecurityContext",
    fields: &[
        Field(
            1,
            "capabilities",
            Kind::Message(&Message {
                name: "Capabilities",
                fields: &[
                    Field(1, "add", Kind::Strings),
                    Field(2, "drop", Kind::Strings),
                ],
            }),
        ),
        Field(2, "privileged", Kind::BoolPtr),
        Field(4, "runAsUser", Kind::Int64Ptr),
        Field(5, "runAsNonRoot", Kind::BoolPtr),
        Field(6, "readOnlyRootFilesystem", Kind::BoolPtr),
        Field(7, "allowPrivilegeEscalation", Kind::BoolPtr),
        Field(8, "runAsGroup", Kind::Int64Ptr),
        Field(9, "procMount", Kind::StringPtr),
        Field(11, "seccompProfile", Kind::Message(SECCOMP_PROFILE)),
    ],
};

/// A `Container`, without its `volumeDevices`, `resizePolicy` and
/// `restartPolicyRules`.
const CONTAINER: &Message = &Message {
    name: "Container",
    fields: &[
        Field(1, "name", Kind::String),
        Field(2, "image", Kind::String),
        Field(3, "command", Kind::Strings),
        Field(4, "args", Kind::Strings),
        Field(5, "workingDir", Kind::String),
        Field(6, "ports", Kind::Messages(CONTAINER_PORT)),
        Field(7, "env", Kind::Messages(ENV_VAR)),
        Field(8, "resources", Kind::Message(RESOURCE_REQUIREMENTS)),
        Field(9, "volumeMounts", Kind::Messages(VOLUME_MOUNT)),
        Field(10, "livenessProbe", Kind::Message(PROBE)),
        Field(11, "readinessProbe", Kind::Message(PROBE)),
        Field(12, "lifecycle", Kind::Message(LIFECYCLE)),
        Field(13, "terminationMessagePath", Kind::String),
        Field(14, "imagePullPolicy", Kind::String),
        Field(15, "securityContext", Kind::Message(SECURITY_CONTEXT)),
        Field(16, "stdin", Kind::Bool),
        Field(17, "stdinOnce", Kind::Bool),
        Field(18, "tty", Kind::Bool),
        Field(19, "envFrom", Kind::Messages(ENV_FROM_SOURCE)),
        Field(20, "terminationMessagePolicy", Kind::String),
        Field(22, "startupProbe", Kind::Message(PROBE)),
        Field(24, "restartPolicy", Kind::StringPtr),
    ],
};

const KEY_TO_PATH: &Message = &Message {
    name: "KeyToPath",
    fields: &[
        Field(1, "key", Kind::String),
        Field(2, "path", Kind::String),
        Field(3, "mode", Kind::Int32Ptr),
    ],
};

/// `VolumeSource` with the sources a workload commonly mounts.
const VOLUME_SOURCE: &Message = &Message {
    name: "VolumeSource",
    fields: &[
        Field(
            1,
            "hostPath",
            Kind::Message(&Message {
                name: "HostPathVolumeSource",
                fields: &[
                    Field(1, "path", Kind::String),
                    Field(2, "type", Kind::StringPtr),
                ],
            }),
        ),
        Field(
            2,
            "emptyDir",
            Kind::Message(&Message {
                name: "EmptyDirVolumeSource",
                fields: &[
                    Field(1, "medium", Kind::String),
                    Field(2, "sizeLimit", Kind::Quantity),
                ],
            }),
        ),
        Field(
            6,
            "secret",
            Kind::Message(&Message {
                name: "SecretVolumeSource",
                fields: &[
                    Field(1, "secretName", Kind::String),
                    Field(2, "items", Kind::Messages(KEY_TO_PATH)),
                    Field(3, "defaultMode", Kind::Int32Ptr),
                    Field(4, "optional", Kind::BoolPtr),
                ],
            }),
        ),
        Field(
            10,
            "persistentVolumeClaim",
            Kind::Message(&Message {
                name: "PersistentVolumeClaimVolumeSource",
                fields: &[
                    Field(1, "claimName", Kind::String),
                    Field(2, "readOnly", Kind::Bool),
                ],
            }),
        ),
        Field(
            19,
            "configMap",
            Kind::Message(&Message {
                name: "ConfigMapVolumeSource",
                fields: &[
                    Field(
                        1,
                        "localObjectReference",
                        Kind::Inline(LOCAL_OBJECT_REFERENCE),
                    ),
                    Field(2, "items", Kind::Messages(KEY_TO_PATH)),
                    Field(3, "defaultMode", Kind::Int32Ptr),
                    Field(4, "optional", Kind::BoolPtr),
                ],
            }),
        ),
    ],
};

const VOLUME: &Message = &Message {
    name: "Volume",
    fields: &[
        Field(1, "name", Kind::String),
        Field(2, "volumeSource", Kind::Inline(VOLUME_SOURCE)),
    ],
};

const TOLERATION: &Message = &Message {
    name: "Toleration",
    fields: &[
        Field(1, "key", Kind::String),
        Field(2, "operator", Kind::String),
        Field(3, "value", Kind::String),
        Field(4, "effect", Kind::String),
        Field(5, "tolerationSeconds", Kind::Int64Ptr),
    ],
};

/// A pod's `PodSecurityContext`, without its SELinux, Windows, AppArmor,
/// sysctl and supplemental group settings.
const POD_SECURITY_CONTEXT: &Message = &Message {
    name: "PodSecurityContext",
    fields: &[
        Field(2, "runAsUser", Kind::Int64Ptr),
        Field(3, "runAsNonRoot", Kind::BoolPtr),
        Field(5, "fsGroup", Kind::Int64Ptr),
        Field(6, "runAsGroup", Kind::Int64Ptr),
        Field(9, "fsGroupChangePolicy", Kind::StringPtr),
        Field(10, "seccompProfile", Kind::Message(SECCOMP_PROFILE)),
    ],
};

/// A `PodSpec`, without its scheduling constraints (affinity, topology
/// spread, scheduling gates, readiness gates), DNS config, host aliases,
/// ephemeral containers and resource claims.
const POD_SPEC: &Message = &Message {
    name: "PodSpec",
    fields: &[
        Field(1, "volumes", Kind::Messages(VOLUME)),
        Field(2, "containers", Kind::Messages(CONTAINER)),
        Field(3, "restartPolicy", Kind::String),
        Field(4, "terminationGracePeriodSeconds", Kind::Int64Ptr),
        Field(5, "activeDeadlineSeconds", Kind::Int64Ptr),
        Field(6, "dnsPolicy", Kind::String),
        Field(7, "nodeSelector", Kind::StringMap),
        Field(8, "serviceAccountName", Kind::String),
        Field(9, "serviceAccount", Kind::String),
        Field(10, "nodeName", Kind::String),
        Field(11, "hostNetwork", Kind::Bool),
        Field(12, "hostPID", Kind::Bool),
        Field(13, "hostIPC", Kind::Bool),
        Field(14, "securityContext", Kind::Message(POD_SECURITY_CONTEXT)),
        Field(
            15,
            "imagePullSecrets",
            Kind::Messages(LOCAL_OBJECT_REFERENCE),
        ),
        Field(16, "hostname", Kind::String),
        Field(17, "subdomain", Kind::String),
        Field(19, "schedulerName", Kind::String),
        Field(20, "initContainers", Kind::Messages(CONTAINER)),
        Field(21, "automountServiceAccountToken", Kind::BoolPtr),
        Field(22, "tolerations", Kind::Messages(TOLERATION)),
        Field(24, "priorityClassName", Kind::String),
        Field(25, "priority", Kind::Int32Ptr),
        Field(27, "shareProcessNamespace", Kind::BoolPtr),
        Field(29, "runtimeClassName", Kind::StringPtr),
        Field(30, "enableServiceLinks", Kind::BoolPtr),
        Field(31, "preemptionPolicy", Kind::StringPtr),
        Field(32, "overhead", Kind::QuantityMap),
        Field(35, "setHostnameAsFQDN", Kind::BoolPtr),
        Field(
            36,
            "os",
            Kind::Message(&Message {
                name: "PodOS",
                fields: &[Field(1, "name", Kind::String)],
            }),
        ),
        Field(37, "hostUsers", Kind::BoolPtr),
    ],
};

const POD_TEMPLATE_SPEC: &Message = &Message {
    name: "PodTemplateSpec",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(2, "spec", Kind::Message(POD_SPEC)),
    ],
};

// apps/v1

const ROLLING_UPDATE_DEPLOYMENT: &Message = &Message {
    name: "RollingUpdateDeployment",
    fields: &[
        Field(1, "maxUnavailable", Kind::IntOrString),
        Field(2, "maxSurge", Kind::IntOrString),
    ],
};

const DEPLOYMENT_SPEC: &Message = &Message {
    name: "DeploymentSpec",
    fields: &[
        Field(1, "replicas", Kind::Int32Ptr),
        Field(2, "selector", Kind::Message(LABEL_SELECTOR)),
        Field(3, "template", Kind::Message(POD_TEMPLATE_SPEC)),
        Field(
            4,
            "strategy",
            Kind::Message(&Message {
                name: "DeploymentStrategy",
                fields: &[
                    Field(1, "type", Kind::String),
                    Field(2, "rollingUpdate", Kind::Message(ROLLING_UPDATE_DEPLOYMENT)),
                ],
            }),
        ),
        Field(5, "minReadySeconds", Kind::Int32),
        Field(6, "revisionHistoryLimit", Kind::Int32Ptr),
        Field(7, "paused", Kind::Bool),
        Field(9, "progressDeadlineSeconds", Kind::Int32Ptr),
    ],
};

const DEPLOYMENT_CONDITION: &Message = &Message {
    name: "DeploymentCondition",
    fields: &[
        Field(1, "type", Kind::String),
        Field(2, "status", Kind::String),
        Field(4, "reason", Kind::String),
        Field(5, "message", Kind::String),
        Field(6, "lastUpdateTime", Kind::Time),
        Field(7, "lastTransitionTime", Kind::Time),
    ],
};

const DEPLOYMENT_STATUS: &Message = &Message {
    name: "DeploymentStatus",
    fields: &[
        Field(1, "observedGeneration", Kind::Int64),
        Field(2, "replicas", Kind::Int32),
        Field(3, "updatedReplicas", Kind::Int32),
        Field(4, "availableReplicas", Kind::Int32),
        Field(5, "unavailableReplicas", Kind::Int32),
        Field(6, "conditions", Kind::Messages(DEPLOYMENT_CONDITION)),
        Field(7, "readyReplicas", Kind::Int32),
        Field(8, "collisionCount", Kind::Int32Ptr),
    ],
};

const DEPLOYMENT: &Message = &Message {
    name: "Deployment",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(2, "spec", Kind::Message(DEPLOYMENT_SPEC)),
        Field(3, "status", Kind::Message(DEPLOYMENT_STATUS)),
    ],
};

// rbac/v1

const POLICY_RULE: &Message = &Message {
    name: "PolicyRule",
    fields: &[
        Field(1, "verbs", Kind::Strings),
        Field(2, "apiGroups", Kind::Strings),
        Field(3, "resources", Kind::Strings),
        Field(4, "resourceNames", Kind::Strings),
        Field(5, "nonResourceURLs", Kind::Strings),
    ],
};

const ROLE: &Message = &Message {
    name: "Role",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(2, "rules", Kind::Messages(POLICY_RULE)),
    ],
};

const CLUSTER_ROLE: &Message = &Message {
    name: "ClusterRole",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(2, "rules", Kind::Messages(POLICY_RULE)),
        Field(
            3,
            "aggregationRule",
            Kind::Message(&Message {
                name: "AggregationRule",
                fields: &[Field(
                    1,
                    "clusterRoleSelectors",
                    Kind::Messages(LABEL_SELECTOR),
                )],
            }),
        ),
    ],
};

const SUBJECT: &Message = &Message {
    name: "Subject",
    fields: &[
        Field(1, "kind", Kind::String),
        Field(2, "apiGroup", Kind::String),
        Field(3, "name", Kind::String),
        Field(4, "namespace", Kind::String),
    ],
};

const ROLE_REF: &Message = &Message {
    name: "RoleRef",
    fields: &[
        Field(1, "apiGroup", Kind::String),
        Field(2, "kind", Kind::String),
        Field(3, "name", Kind::String),
    ],
};

const ROLE_BINDING: &Message = &Message {
    name: "RoleBinding",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(2, "subjects", Kind::Messages(SUBJECT)),
        Field(3, "roleRef", Kind::Message(ROLE_REF)),
    ],
};

const CLUSTER_ROLE_BINDING: &Message = &Message {
    name: "ClusterRoleBinding",
    fields: ROLE_BINDING.fields,
};

// authentication/v1

const TOKEN_REQUEST: &Message = &Message {
    name: "TokenRequest",
    fields: &[
        Field(1, "metadata", Kind::Message(OBJECT_META)),
        Field(
            2,
            "spec",
            Kind::Message(&Message {
                name: "TokenRequestSpec",
                fields: &[
                    Field(1, "audiences", Kind::Strings),
                    Field(
                        3,
                        "boundObjectRef",
                        Kind::Message(&Message {
                            name: "BoundObjectReference",
                            fields: &[
                                Field(1, "kind", Kind::String),
                                Field(2, "apiVersion", Kind::String),
                                Field(3, "name", Kind::String),
                                Field(4, "uid", Kind::String),
                            ],
                        }),
                    ),
                    Field(4, "expirationSeconds", Kind::Int64Ptr),
                ],
            }),
        ),
        Field(
            3,
            "status",
            Kind::Message(&Message {
                name: "TokenRequestStatus",
                fields: &[
                    Field(1, "token", Kind::String),
                    Field(2, "expirationTimestamp", Kind::Time),
                ],
            }),
        ),
    ],
};
