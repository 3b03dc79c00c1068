//! Which AWS API action a signed request is for (read with its `Version`, in one pass over
//! its query and form: [`Parameters`]), and what the gate does with it: the actions it never
//! signs (those that issue or manage credentials), the actions a shadow version may sign
//! (reads), the answers it never hands to a provider (those carrying AWS keys), and the
//! bounded label values metrics count signed requests under.
//!
//! AWS names the action of a request in one of three places, by the service's protocol:
//! - **Query** (EC2, ELB, STS, IAM, Auto Scaling…): the `Action` parameter, in the query
//!   string (`GET /?Action=…`, which AWS accepts as readily as a POST) or in the form body;
//! - **JSON** (Cognito, ECR, EC2 Instance Connect, SSM…): the `X-Amz-Target` header,
//!   `Service_Version.Action`;
//! - **RPC v2 CBOR**: the path `/service/SERVICE/operation/ACTION`.
//!
//! A request naming two different actions, or one that is not an action name (letters and
//! digits, 1 to 128), is refused: AWS reads one of them, and the gate must know which.
//! **REST** services (S3, Route 53, Lambda, EKS…) name the action by method and route,
//! which the gate has no table for: it signs a request naming no action only for the REST
//! services in [`REST_SERVICES`], none of which issues AWS credentials, and for those judges
//! it by its method (a shadow: GET and HEAD). A request naming no action to any other
//! service is refused, since the gate could not check it (the credential services are all
//! Query or JSON, or REST services left out of the list: the SSO portal, SSO OIDC, EKS Pod
//! Identity, S3 Express, IAM Roles Anywhere).

use std::borrow::Cow;
use std::fmt;

/// Longest action name the gate reads (AWS's are far shorter).
const MAX_ACTION: usize = 128;

/// The actions the gate never signs, whatever the rule, by signing name: those whose answer
/// is a credential, and those that make, change or remove one or the permissions it carries.
/// Compared without regard to case.
///
/// Signed on purpose: STS `GetCallerIdentity`, `GetAccessKeyInfo` (the account of a key
/// id) and `DecodeAuthorizationMessage` (why a request was denied) issue nothing; IAM
/// `CreateServiceLinkedRole` makes a role only an AWS service may assume.
pub const CREDENTIAL_ACTIONS: &[(&str, &[&str])] = &[
    (
        "sts",
        &[
            "AssumeRole",
            "AssumeRoleWithSAML",
            "AssumeRoleWithWebIdentity",
            "AssumeRoot",
            "GetSessionToken",
            "GetFederationToken",
            "GetWebIdentityToken",
        ],
    ),
    (
        "iam",
        &[
            // Access keys, passwords and other credentials of users.
            "CreateAccessKey",
            "UpdateAccessKey",
            "DeleteAccessKey",
            "CreateLoginProfile",
            "UpdateLoginProfile",
            "DeleteLoginProfile",
            "ChangePassword",
            "CreateServiceSpecificCredential",
            "ResetServiceSpecificCredential",
            "UpdateServiceSpecificCredential",
            "DeleteServiceSpecificCredential",
            "UploadSSHPublicKey",
            "UpdateSSHPublicKey",
            "DeleteSSHPublicKey",
            "UploadSigningCertificate",
            "UpdateSigningCertificate",
            "DeleteSigningCertificate",
            "CreateVirtualMFADevice",
            "EnableMFADevice",
            "DeactivateMFADevice",
            "ResyncMFADevice",
            "DeleteVirtualMFADevice",
            // Policies: what any credential may do.
            "CreatePolicy",
            "CreatePolicyVersion",
            "SetDefaultPolicyVersion",
            "DeletePolicyVersion",
            "PutUserPolicy",
            "PutRolePolicy",
            "PutGroupPolicy",
            "DeleteUserPolicy",
            "DeleteRolePolicy",
            "DeleteGroupPolicy",
            "AttachUserPolicy",
            "AttachRolePolicy",
            "AttachGroupPolicy",
            "DetachUserPolicy",
            "DetachRolePolicy",
            "DetachGroupPolicy",
            "PutUserPermissionsBoundary",
            "PutRolePermissionsBoundary",
            "DeleteUserPermissionsBoundary",
            "DeleteRolePermissionsBoundary",
            // Who may assume what: identities, trust and federation.
            "CreateUser",
            "CreateRole",
            "UpdateAssumeRolePolicy",
            "AddUserToGroup",
            "AddRoleToInstanceProfile",
            "CreateOpenIDConnectProvider",
            "UpdateOpenIDConnectProviderThumbprint",
            "AddClientIDToOpenIDConnectProvider",
            "CreateSAMLProvider",
            "UpdateSAMLProvider",
        ],
    ),
    ("awsssoportal", &["GetRoleCredentials"]),
    ("sso-oauth", &["CreateToken", "CreateTokenWithIAM"]),
    (
        "cognito-identity",
        &[
            "GetCredentialsForIdentity",
            "GetOpenIdToken",
            "GetOpenIdTokenForDeveloperIdentity",
        ],
    ),
    (
        "cognito-idp",
        &[
            "AdminInitiateAuth",
            "AdminRespondToAuthChallenge",
            "AdminSetUserPassword",
            "InitiateAuth",
        ],
    ),
    ("eks-auth", &["AssumeRoleForPodIdentity"]),
    ("ecr", &["GetAuthorizationToken"]),
    ("ecr-public", &["GetAuthorizationToken"]),
    (
        "redshift",
        &["GetClusterCredentials", "GetClusterCredentialsWithIAM"],
    ),
    ("redshift-serverless", &["GetCredentials"]),
    ("s3express", &["CreateSession"]),
    ("rolesanywhere", &["CreateSession"]),
    (
        "ec2-instance-connect",
        &["SendSSHPublicKey", "SendSerialConsoleSSHPublicKey"],
    ),
    ("ec2", &["CreateKeyPair"]),
];

/// The actions the gate never signs either, whatever the rule, by signing name: those whose
/// answer is a secret (a secret's or parameter's value, a plaintext key, an instance's
/// password or console) and those that run commands on instances or open sessions to them.
/// A cloud controller needs none of them. Compared without regard to case.
pub const SECRET_ACTIONS: &[(&str, &[&str])] = &[
    (
        "ssm",
        &[
            "SendCommand",
            "GetCommandInvocation",
            "ListCommandInvocations",
            "StartSession",
            "ResumeSession",
            "StartAutomationExecution",
            "CreateAssociation",
            "GetParameter",
            "GetParameters",
            "GetParametersByPath",
            "GetParameterHistory",
        ],
    ),
    (
        "secretsmanager",
        &["GetSecretValue", "BatchGetSecretValue", "GetRandomPassword"],
    ),
    (
        "kms",
        &[
            "Decrypt",
            "ReEncrypt",
            "GenerateDataKey",
            "GenerateDataKeyPair",
            "DeriveSharedSecret",
        ],
    ),
    (
        "ec2",
        &[
            "GetPasswordData",
            "GetConsoleOutput",
            "GetConsoleScreenshot",
        ],
    ),
    ("ecs", &["ExecuteCommand"]),
    ("lightsail", &["GetInstanceAccessDetails"]),
];

/// REST-protocol services (by signing name) whose requests the gate signs although they
/// name no action: none of them issues AWS credentials, answers secrets or runs code
/// (Lambda, whose `Invoke` runs a function and answers its output, is not among them).
pub const REST_SERVICES: &[&str] = &[
    "s3",
    "route53",
    "eks",
    "apigateway",
    "execute-api",
    "cloudfront",
    "elasticfilesystem",
    "es",
    "aoss",
    "glacier",
    "backup",
    "batch",
    "appsync",
];

/// Services (by signing name) that become their own `service` label of
/// `wasm_ccm_egress_signed_requests_total`; any other not named by the rule counts as
/// [`OTHER`].
const KNOWN_SERVICES: &[&str] = &[
    "ec2",
    "elasticloadbalancing",
    "autoscaling",
    "sts",
    "iam",
    "route53",
    "s3",
    "kms",
    "ssm",
    "eks",
    "ecr",
    "logs",
    "monitoring",
    "tagging",
];

/// The label value of a service or action outside the bounded set.
pub const OTHER: &str = "other";
/// The `action` label of a REST request, which names none.
pub const NO_ACTION: &str = "none";

/// Prefixes of the actions a shadow version may sign: they read and change nothing.
const READ_PREFIXES: [&str; 3] = ["Describe", "Get", "List"];

/// Where a request's action came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The query's `Action`.
    Query,
    /// The form body's `Action`.
    Form,
    /// `X-Amz-Target`.
    Target,
    /// An RPC path (`/service/…/operation/…`).
    Rpc,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Query => "the query's Action",
            Source::Form => "the form's Action",
            Source::Target => "X-Amz-Target",
            Source::Rpc => "the RPC path",
        })
    }
}

/// Why the gate cannot tell a request's API action.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// A value where an action goes that is no action name.
    #[error("{value:?} (from {from}) is not an API action name")]
    NotAnAction {
        /// The value, cut to the longest action name.
        value: String,
        /// Where the request carries it.
        from: Source,
    },
    /// Two places of the request name different actions.
    #[error(
        "the request names two actions, {first} ({first_source}) and {other} ({other_source}); AWS would act on one of them"
    )]
    TwoActions {
        /// The first action named.
        first: String,
        /// Where.
        first_source: Source,
        /// Another, different one.
        other: String,
        /// Where.
        other_source: Source,
    },
}

/// Services (by signing name) of the Query protocol, whose front end may read a body as a
/// form whatever its type says.
const QUERY_SERVICES: [&str; 8] = [
    "ec2",
    "elasticloadbalancing",
    "sts",
    "iam",
    "autoscaling",
    "redshift",
    "cloudformation",
    "rds",
];

/// The `Version` and `Action` parameters of a request's query and form body, read in one
/// pass for both what the request is signed for (its `Version`) and its action.
#[derive(Debug)]
pub struct Parameters<'a> {
    /// The `Version` values: the query's, then the body's if it is typed as a form.
    versions: Vec<Cow<'a, str>>,
    /// The `Action` values (the name in any case), the query's then the body's, each with
    /// where it came from.
    actions: Vec<(Source, Cow<'a, str>)>,
    /// A body of another stated type, not read yet: only a Query-protocol service reads it
    /// as a form ([`Parameters::action`]).
    typed: &'a [u8],
}

impl<'a> Parameters<'a> {
    /// The parameters of the request `parts` with `body`: its query's, and its body's if the
    /// body is a form or of no stated type (which is read for `Action` only, and never for
    /// `Version`).
    pub fn read(parts: &'a http::request::Parts, body: &'a [u8]) -> Parameters<'a> {
        let mut parameters = Parameters {
            versions: Vec::new(),
            actions: Vec::new(),
            typed: &[],
        };
        parameters.add(
            Source::Query,
            parts.uri.query().unwrap_or_default().as_bytes(),
        );
        match parts.headers.get(http::header::CONTENT_TYPE) {
            None => parameters.add_actions(Source::Form, body),
            Some(value) if is_form(value) => parameters.add(Source::Form, body),
            Some(_) => parameters.typed = body,
        }
        parameters
    }

    /// Add the `Version` and `Action` pairs of `form`.
    fn add(&mut self, source: Source, form: &'a [u8]) {
        for (name, value) in form_urlencoded::parse(form) {
            if name == "Version" {
                self.versions.push(value);
            } else if name.eq_ignore_ascii_case("Action") {
                self.actions.push((source, value));
            }
        }
    }

    /// Add the `Action` pairs of `form`.
    fn add_actions(&mut self, source: Source, form: &'a [u8]) {
        let actions = form_urlencoded::parse(form)
            .filter(|(name, _)| name.eq_ignore_ascii_case("Action"))
            .map(|(_, value)| (source, value));
        self.actions.extend(actions);
    }

    /// The `Version` parameters: the query's, and a form body's.
    pub fn versions(&self) -> impl Iterator<Item = &str> {
        self.versions.iter().map(|version| version.as_ref())
    }

    /// The action the request `parts` (whose parameters these are) to `service` names,
    /// `None` if it names none (REST), or why the gate cannot tell. Its body is read for
    /// `Action` if it is a form, of no stated type, or of any type to a Query-protocol
    /// service.
    pub fn action(
        mut self,
        parts: &'a http::request::Parts,
        service: &str,
    ) -> Result<Option<String>, ActionError> {
        if QUERY_SERVICES.contains(&service) {
            self.add_actions(Source::Form, self.typed);
        }
        for target in parts.headers.get_all("x-amz-target") {
            let action = match String::from_utf8_lossy(target.as_bytes()) {
                Cow::Borrowed(target) => Cow::Borrowed(last_dotted(target)),
                Cow::Owned(target) => Cow::Owned(last_dotted(&target).to_string()),
            };
            self.actions.push((Source::Target, action));
        }
        if let Some(rest) = parts.uri.path().strip_prefix("/service/")
            && let Some((_, operation)) = rest.split_once("/operation/")
        {
            self.actions.push((Source::Rpc, Cow::Borrowed(operation)));
        }
        let Some((source, first)) = self.actions.first() else {
            return Ok(None);
        };
        for (_, value) in &self.actions {
            if !is_action_name(value) {
                return Err(ActionError::NotAnAction {
                    value: crate::text::cut(value, MAX_ACTION).to_string(),
                    from: *source,
                });
            }
        }
        if let Some((other_source, other)) = self.actions.iter().find(|(_, value)| value != first) {
            return Err(ActionError::TwoActions {
                first: first.to_string(),
                first_source: *source,
                other: other.to_string(),
                other_source: *other_source,
            });
        }
        Ok(Some(self.actions.swap_remove(0).1.into_owned()))
    }
}

/// What follows the last `.` of `text` (an `X-Amz-Target`'s action), or all of it.
fn last_dotted(text: &str) -> &str {
    text.rsplit('.').next().unwrap_or_default()
}

/// Whether a `Content-Type` says the body is a form.
fn is_form(content_type: &http::HeaderValue) -> bool {
    const FORM: &[u8] = b"application/x-www-form-urlencoded";
    content_type.to_str().is_ok_and(|text| {
        text.as_bytes()
            .get(..FORM.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(FORM))
    })
}

fn is_action_name(text: &str) -> bool {
    (1..=MAX_ACTION).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether `action` of `service` issues or manages credentials ([`CREDENTIAL_ACTIONS`]).
pub fn issues_credentials(service: &str, action: &str) -> bool {
    listed(CREDENTIAL_ACTIONS, service, action)
}

/// Whether `action` of `service` answers a secret or runs commands ([`SECRET_ACTIONS`]).
pub fn reveals_secrets(service: &str, action: &str) -> bool {
    listed(SECRET_ACTIONS, service, action)
}

fn listed(list: &[(&str, &[&str])], service: &str, action: &str) -> bool {
    list.iter()
        .filter(|(name, _)| *name == service)
        .any(|(_, actions)| actions.iter().any(|a| a.eq_ignore_ascii_case(action)))
}

/// Whether `service` is one whose requests are signed without an action.
pub fn is_rest_service(service: &str) -> bool {
    REST_SERVICES.contains(&service)
}

/// Whether `action` matches `pattern`: the same name, or for `Prefix*` any name starting
/// with `Prefix`; without regard to case.
pub fn matches(pattern: &str, action: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => action
            .get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix)),
        None => pattern.eq_ignore_ascii_case(action),
    }
}

/// Whether `text` is an action name, or an action name's start followed by `*`: what
/// `actions=` and the spec's action lists take.
pub fn is_action_pattern(text: &str) -> bool {
    let name = text.strip_suffix('*').unwrap_or(text);
    is_action_name(name)
}

/// Whether a shadow version may sign `action`: a read (`Describe*`, `Get*`, `List*`) or
/// one `extra` names.
pub fn is_read(action: &str, extra: &[String]) -> bool {
    READ_PREFIXES
        .iter()
        .any(|prefix| matches(&format!("{prefix}*"), action))
        || extra.iter().any(|pattern| matches(pattern, action))
}

/// The `service` label of a signed request: the service, if the rule names it or it is one
/// of [`KNOWN_SERVICES`], else [`OTHER`].
pub fn service_label(service: &str, granted: &[String]) -> String {
    if granted.iter().any(|s| s == service) || KNOWN_SERVICES.contains(&service) {
        service.to_string()
    } else {
        OTHER.to_string()
    }
}

/// The `action` label of a signed request: the action (as the list spells it) if the
/// rule's allow-list or [`CREDENTIAL_ACTIONS`] names it, [`NO_ACTION`] for a REST request,
/// else [`OTHER`].
pub fn action_label(service: &str, action: Option<&str>, allowed: &[String]) -> String {
    let Some(action) = action else {
        return NO_ACTION.to_string();
    };
    let listed = allowed
        .iter()
        .filter(|pattern| !pattern.ends_with('*'))
        .map(String::as_str)
        .chain(
            CREDENTIAL_ACTIONS
                .iter()
                .chain(SECRET_ACTIONS)
                .filter(|(name, _)| *name == service)
                .flat_map(|(_, actions)| actions.iter().copied()),
        )
        .find(|name| name.eq_ignore_ascii_case(action));
    listed.map_or_else(|| OTHER.to_string(), String::from)
}

/// The AWS credential an answer's body carries, if any: an XML element or a JSON member
/// named `SecretAccessKey`, `SecretKey` or `SessionToken`, in any case (EC2 spells its
/// elements camelCase, SSO its members). Only markup counts: an XML answer escapes `<` in
/// text, and a JSON string escapes `"`, so a tag or value spelling one of these names does
/// not.
pub fn carried_credential(body: &[u8]) -> Option<&'static str> {
    const NAMES: [&str; 7] = [
        "SecretAccessKey",
        "SessionToken",
        "SecretKey",
        "SecretString",
        "SecretBinary",
        "PasswordData",
        "Plaintext",
    ];
    let at = |start: usize, name: &str| {
        body.get(start..start + name.len())
            .is_some_and(|found| found.eq_ignore_ascii_case(name.as_bytes()))
    };
    for (index, byte) in body.iter().enumerate() {
        let start = index + 1;
        match byte {
            b'<' => {
                let found = NAMES.into_iter().find(|name| {
                    at(start, name)
                        && matches!(
                            body.get(start + name.len()),
                            Some(b'>' | b' ' | b'\t' | b'\r' | b'\n' | b'/')
                        )
                });
                if found.is_some() {
                    return found;
                }
            }
            b'"' if index == 0 || body[index - 1] != b'\\' => {
                let found = NAMES.into_iter().find(|name| {
                    at(start, name) && body.get(start + name.len()) == Some(&b'"') && {
                        let after = &body[(start + name.len() + 1).min(body.len())..];
                        after
                            .iter()
                            .find(|b| !b.is_ascii_whitespace())
                            .is_some_and(|b| *b == b':')
                    }
                });
                if found.is_some() {
                    return found;
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut builder = http::Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

    fn action(
        parts: &http::request::Parts,
        body: &[u8],
        service: &str,
    ) -> Result<Option<String>, String> {
        Parameters::read(parts, body)
            .action(parts, service)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_action_is_read_from_the_query_the_form_the_target_or_the_rpc_path() {
        let get = parts(
            "GET",
            "https://ec2.us-east-1.amazonaws.com/?Action=TerminateInstances&InstanceId.1=i-1",
            &[],
        );
        assert_eq!(
            action(&get, b"", "ec2").unwrap().as_deref(),
            Some("TerminateInstances")
        );
        let post = parts("POST", "https://sts.amazonaws.com/", &[FORM]);
        let body = b"Version=2011-06-15&Action=GetSessionToken&DurationSeconds=900";
        assert_eq!(
            action(&post, body, "sts").unwrap().as_deref(),
            Some("GetSessionToken")
        );
        let json = parts(
            "POST",
            "https://cognito-identity.us-east-1.amazonaws.com/",
            &[
                ("content-type", "application/x-amz-json-1.1"),
                (
                    "x-amz-target",
                    "AWSCognitoIdentityService.GetCredentialsForIdentity",
                ),
            ],
        );
        let json_body = br#"{"IdentityId":"us-east-1:1"}"#;
        assert_eq!(
            action(&json, json_body, "cognito-identity")
                .unwrap()
                .as_deref(),
            Some("GetCredentialsForIdentity")
        );
        let rpc = parts(
            "POST",
            "https://monitoring.us-east-1.amazonaws.com/service/GraniteServiceVersion20100801/operation/GetMetricData",
            &[("content-type", "application/cbor")],
        );
        assert_eq!(
            action(&rpc, b"", "monitoring").unwrap().as_deref(),
            Some("GetMetricData")
        );
        let rest = parts("GET", "https://s3.us-east-1.amazonaws.com/bucket/key", &[]);
        assert_eq!(action(&rest, b"", "s3").unwrap(), None);
    }

    #[test]
    fn a_query_service_reads_its_form_whatever_the_content_type_says() {
        let disguised = parts(
            "POST",
            "https://sts.amazonaws.com/",
            &[("content-type", "application/json")],
        );
        let body = b"Action=AssumeRole&RoleArn=x";
        assert_eq!(
            action(&disguised, body, "sts").unwrap().as_deref(),
            Some("AssumeRole")
        );
        let untyped = parts("POST", "https://x.example/", &[]);
        assert_eq!(
            action(&untyped, b"Action=GetThing", "custom")
                .unwrap()
                .as_deref(),
            Some("GetThing")
        );
        // A JSON service's JSON body is not a form.
        let json = parts(
            "POST",
            "https://logs.us-east-1.amazonaws.com/",
            &[("content-type", "application/x-amz-json-1.1")],
        );
        assert_eq!(action(&json, b"Action=PutThing", "logs").unwrap(), None);
    }

    #[test]
    fn two_actions_or_a_malformed_one_are_refused() {
        let both = parts(
            "POST",
            "https://ec2.us-east-1.amazonaws.com/?Action=DescribeInstances",
            &[FORM],
        );
        let error = action(&both, b"Action=TerminateInstances", "ec2").unwrap_err();
        assert!(
            error.contains("names two actions, DescribeInstances (the query's Action) and TerminateInstances (the form's Action)"),
            "{error}"
        );
        let cased = parts(
            "GET",
            "https://sts.amazonaws.com/?Action=GetCallerIdentity&action=GetSessionToken",
            &[],
        );
        assert!(action(&cased, b"", "sts").is_err());
        let target = parts(
            "POST",
            "https://sts.amazonaws.com/",
            &[
                FORM,
                (
                    "x-amz-target",
                    "AWSSecurityTokenServiceV20110615.AssumeRole",
                ),
            ],
        );
        assert!(
            action(&target, b"Action=GetCallerIdentity", "sts")
                .unwrap_err()
                .contains("X-Amz-Target")
        );
        for bad in ["GetSessionToken%20", "Get.Session", ""] {
            let uri = format!("https://sts.amazonaws.com/?Action={bad}");
            let error = action(&parts("GET", &uri, &[]), b"", "sts").unwrap_err();
            assert!(
                error.contains("is not an API action name"),
                "{bad}: {error}"
            );
        }
        // The same action twice is one action.
        let twice = parts(
            "GET",
            "https://ec2.us-east-1.amazonaws.com/?Action=DescribeVpcs",
            &[FORM],
        );
        assert_eq!(
            action(&twice, b"Action=DescribeVpcs", "ec2")
                .unwrap()
                .as_deref(),
            Some("DescribeVpcs")
        );
    }

    #[test]
    fn credential_actions_are_never_signed_in_any_case() {
        for (service, action) in [
            ("sts", "GetSessionToken"),
            ("sts", "assumerole"),
            ("sts", "AssumeRoleWithWebIdentity"),
            ("sts", "GetFederationToken"),
            ("iam", "CreateAccessKey"),
            ("iam", "PutRolePolicy"),
            ("iam", "AttachUserPolicy"),
            ("iam", "UpdateAssumeRolePolicy"),
            ("iam", "CreateLoginProfile"),
            ("awsssoportal", "GetRoleCredentials"),
            ("sso-oauth", "CreateToken"),
            ("cognito-identity", "GetCredentialsForIdentity"),
            ("cognito-identity", "GetOpenIdTokenForDeveloperIdentity"),
            ("eks-auth", "AssumeRoleForPodIdentity"),
            ("ecr", "GetAuthorizationToken"),
            ("ec2-instance-connect", "SendSSHPublicKey"),
        ] {
            assert!(issues_credentials(service, action), "{service} {action}");
        }
        for (service, action) in [
            ("sts", "GetCallerIdentity"),
            ("sts", "GetAccessKeyInfo"),
            ("sts", "DecodeAuthorizationMessage"),
            ("ec2", "DescribeInstances"),
            ("iam", "ListRoles"),
            ("iam", "CreateServiceLinkedRole"),
            // The list is per service: another service's action of the same name is not it.
            ("ec2", "AssumeRole"),
        ] {
            assert!(!issues_credentials(service, action), "{service} {action}");
        }
        for (service, actions) in CREDENTIAL_ACTIONS.iter().chain(SECRET_ACTIONS) {
            for action in *actions {
                assert!(is_action_name(action), "{service} {action}");
            }
            assert!(!is_rest_service(service), "{service} needs an action");
        }
        for (service, action) in [
            ("ssm", "SendCommand"),
            ("ssm", "getparameter"),
            ("secretsmanager", "GetSecretValue"),
            ("kms", "Decrypt"),
            ("ec2", "GetPasswordData"),
            ("ec2", "GetConsoleOutput"),
            ("ecs", "ExecuteCommand"),
        ] {
            assert!(reveals_secrets(service, action), "{service} {action}");
        }
        assert!(!reveals_secrets("ec2", "DescribeInstances"));
        assert!(
            !is_rest_service("lambda"),
            "Invoke answers what a function prints"
        );
    }

    #[test]
    fn a_shadow_signs_reads_and_what_the_spec_adds() {
        for read in [
            "DescribeInstances",
            "GetConsoleOutput",
            "ListTagsForResource",
            "describeVpcs",
        ] {
            assert!(is_read(read, &[]), "{read}");
        }
        for write in [
            "CreateTags",
            "TerminateInstances",
            "ModifyInstanceAttribute",
            "PutObject",
        ] {
            assert!(!is_read(write, &[]), "{write}");
        }
        let extra = vec![
            "SearchTransitGatewayRoutes".to_string(),
            "Lookup*".to_string(),
        ];
        assert!(is_read("SearchTransitGatewayRoutes", &extra));
        assert!(is_read("LookupEvents", &extra));
        assert!(!is_read("SearchSomethingElse", &extra));
    }

    #[test]
    fn labels_are_bounded_by_the_rule_and_the_known_lists() {
        let allowed = vec!["DescribeInstances".to_string(), "Create*".to_string()];
        assert_eq!(
            action_label("ec2", Some("describeinstances"), &allowed),
            "DescribeInstances"
        );
        assert_eq!(action_label("ec2", Some("CreateTags"), &allowed), OTHER);
        assert_eq!(
            action_label("sts", Some("GetSessionToken"), &[]),
            "GetSessionToken"
        );
        assert_eq!(action_label("ec2", Some("X1"), &[]), OTHER);
        assert_eq!(action_label("s3", None, &[]), NO_ACTION);
        assert_eq!(service_label("ec2", &[]), "ec2");
        assert_eq!(service_label("made-up-123", &[]), OTHER);
        assert_eq!(
            service_label("made-up-123", &["made-up-123".into()]),
            "made-up-123"
        );
    }

    #[test]
    fn answers_carrying_aws_keys_are_told_from_answers_naming_them() {
        for carrying in [
            "<GetSessionTokenResponse><GetSessionTokenResult><Credentials><SessionToken>t</SessionToken><SecretAccessKey>s</SecretAccessKey><AccessKeyId>ASIA</AccessKeyId></Credentials></GetSessionTokenResult></GetSessionTokenResponse>",
            "<CreateAccessKeyResult><AccessKey><AccessKeyId>AKIA</AccessKeyId><secretAccessKey>s</secretAccessKey></AccessKey></CreateAccessKeyResult>",
            r#"{"Credentials":{"AccessKeyId":"ASIA","SecretKey":"s","SessionToken":"t"}}"#,
            r#"{"roleCredentials":{"accessKeyId":"ASIA","secretAccessKey" : "s"}}"#,
        ] {
            assert!(
                carried_credential(carrying.as_bytes()).is_some(),
                "{carrying}"
            );
        }
        for plain in [
            "<DescribeInstancesResponse><tagSet><item><key>SecretAccessKey</key><value>&lt;SecretAccessKey&gt;</value></item></tagSet></DescribeInstancesResponse>",
            r#"{"Tags":[{"Key":"SessionToken","Value":"{\"SecretKey\":1}"}]}"#,
            "<SecretAccessKeyRotation>on</SecretAccessKeyRotation>",
            "",
        ] {
            assert_eq!(carried_credential(plain.as_bytes()), None, "{plain}");
        }
    }
}
