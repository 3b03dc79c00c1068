//! The AWS Query API as this provider speaks it: a form `POST /` with `Action` and `Version`
//! to a service's endpoint (the host signs it on the way out; no key is ever here), answers
//! in XML, paged by `NextToken`/`Marker`. Owns the reading of AWS error answers (the first
//! `<Code>`, whichever of the EC2 and ELBv2 shapes) and their mapping to the contract's
//! errors: not-found codes are `not-found`, throttling and 5xx are `retry-after` with a delay
//! that grows while the service keeps throttling (shared by every call of this provider
//! version through the host cache, so a throttled account gets fewer requests, not more),
//! credential and permission refusals are plain errors that name AWS's code.

use std::time::Duration;

use roxmltree::{Document, Node};
use wasm_ccm_sdk::http::{HttpError, Method, Request};
use wasm_ccm_sdk::{Error, cache};

use crate::config::Config;
use crate::xml::Element;

/// The services this provider calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Ec2,
    Elbv2,
}

impl Service {
    /// The API version every request names (and the host reads to sign for the service).
    fn version(self) -> &'static str {
        match self {
            Service::Ec2 => "2016-11-15",
            Service::Elbv2 => "2015-12-01",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Service::Ec2 => "EC2",
            Service::Elbv2 => "ELBv2",
        }
    }

    /// The request parameter and the answer element that carry the next page's token.
    fn paging(self) -> (&'static str, &'static str) {
        match self {
            Service::Ec2 => ("NextToken", "nextToken"),
            Service::Elbv2 => ("Marker", "NextMarker"),
        }
    }
}

/// One API request: its action and parameters, in order.
#[derive(Clone, Debug)]
pub struct Query {
    action: &'static str,
    params: Vec<(String, String)>,
    filters: usize,
}

impl Query {
    pub fn new(action: &'static str) -> Query {
        Query {
            action,
            params: Vec::new(),
            filters: 0,
        }
    }

    /// `name=value`.
    pub fn param(mut self, name: impl Into<String>, value: impl Into<String>) -> Query {
        self.params.push((name.into(), value.into()));
        self
    }

    /// `prefix.1=…`, `prefix.2=…`: a list parameter.
    pub fn list<S: Into<String>>(
        mut self,
        prefix: &str,
        values: impl IntoIterator<Item = S>,
    ) -> Query {
        for (index, value) in values.into_iter().enumerate() {
            self.params
                .push((format!("{prefix}.{}", index + 1), value.into()));
        }
        self
    }

    /// An EC2 filter: `Filter.N.Name=name`, `Filter.N.Value.M=…`.
    pub fn filter<S: Into<String>>(
        mut self,
        name: &str,
        values: impl IntoIterator<Item = S>,
    ) -> Query {
        self.filters += 1;
        let prefix = format!("Filter.{}", self.filters);
        self.params
            .push((format!("{prefix}.Name"), name.to_string()));
        self.list(&format!("{prefix}.Value"), values)
    }

    /// `Tags.member.N.Key/Value` (ELBv2) for `tags`.
    pub fn tags(mut self, tags: &[(String, String)]) -> Query {
        for (index, (key, value)) in tags.iter().enumerate() {
            let prefix = format!("Tags.member.{}", index + 1);
            self.params.push((format!("{prefix}.Key"), key.clone()));
            self.params.push((format!("{prefix}.Value"), value.clone()));
        }
        self
    }

    pub fn action(&self) -> &'static str {
        self.action
    }

    /// The form body for `service`.
    fn body(&self, service: Service) -> String {
        let mut body = format!("Action={}&Version={}", self.action, service.version());
        for (name, value) in &self.params {
            body.push('&');
            body.push_str(&encode(name));
            body.push('=');
            body.push_str(&encode(value));
        }
        body
    }
}

/// Why a request failed.
#[derive(Debug, Clone)]
pub enum AwsError {
    /// The request did not get an answer (denied by the host, transport failure).
    Http(HttpError),
    /// AWS answered with an error.
    Api {
        service: Service,
        action: &'static str,
        status: u16,
        code: String,
        message: String,
        request_id: Option<String>,
        /// Throttled or transient: how long to wait before the next try.
        retry: Option<Duration>,
    },
    /// The service is being throttled: this request was not sent.
    BackingOff { service: Service, delay: Duration },
    /// A 2xx answer that is not the XML expected.
    Malformed { action: &'static str, error: String },
}

impl AwsError {
    /// AWS's error code, for an error AWS answered.
    pub fn code(&self) -> Option<&str> {
        match self {
            AwsError::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

impl std::fmt::Display for AwsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AwsError::Http(err) => write!(f, "{err}"),
            AwsError::Api {
                service,
                action,
                status,
                code,
                message,
                request_id,
                ..
            } => {
                write!(
                    f,
                    "{} {action} failed: {status} {code}: {message}",
                    service.name()
                )?;
                if let Some(id) = request_id {
                    write!(f, " (request {id})")?;
                }
                Ok(())
            }
            AwsError::BackingOff { service, delay } => write!(
                f,
                "{} is throttling this account: waiting {} ms before the next request",
                service.name(),
                delay.as_millis()
            ),
            AwsError::Malformed { action, error } => {
                write!(f, "unexpected answer to {action}: {error}")
            }
        }
    }
}

/// What an AWS error code means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    NotFound,
    /// Throttled, or a transient failure on AWS's side: back off and try again.
    Throttled,
    /// A dependent object is still being changed or deleted: try again soon.
    Busy,
    /// The signature or the keys were refused.
    Credentials,
    /// The keys are good but the IAM policy does not allow the action.
    Permission,
    Other,
}

/// Read the meaning of an error answer (`status`, AWS `code`).
pub fn meaning(status: u16, code: &str) -> Meaning {
    match code {
        "InvalidInstanceID.NotFound"
        | "InvalidInstanceID.Malformed"
        | "LoadBalancerNotFound"
        | "TargetGroupNotFound"
        | "ListenerNotFound"
        | "InvalidGroup.NotFound"
        | "InvalidRouteTableID.NotFound"
        | "InvalidRoute.NotFound"
        | "InvalidSubnetID.NotFound" => Meaning::NotFound,
        // botocore's retries/standard.py: throttling and transient codes.
        "Throttling"
        | "ThrottlingException"
        | "ThrottledException"
        | "RequestThrottledException"
        | "TooManyRequestsException"
        | "ProvisionedThroughputExceededException"
        | "TransactionInProgressException"
        | "RequestLimitExceeded"
        | "BandwidthLimitExceeded"
        | "LimitExceededException"
        | "RequestThrottled"
        | "SlowDown"
        | "PriorRequestNotComplete"
        | "EC2ThrottledException"
        | "RequestTimeout"
        | "RequestTimeoutException"
        | "InternalError"
        | "InternalFailure"
        | "ServiceUnavailable"
        | "Unavailable" => Meaning::Throttled,
        "DependencyViolation" | "ResourceInUse" | "IncorrectState" => Meaning::Busy,
        "AuthFailure"
        | "SignatureDoesNotMatch"
        | "InvalidClientTokenId"
        | "ExpiredToken"
        | "IncompleteSignature"
        | "MissingAuthenticationToken" => Meaning::Credentials,
        "UnauthorizedOperation" | "AccessDenied" | "AccessDeniedException" => Meaning::Permission,
        _ if status == 429 || status >= 500 => Meaning::Throttled,
        _ => Meaning::Other,
    }
}

/// AWS's error answer: the first `<Code>`, `<Message>` and request ID, wherever the
/// service's shape puts them (EC2: `Response/Errors/Error`, ELBv2 and STS:
/// `ErrorResponse/Error`). `None` if the body is no XML error.
pub fn error_answer(body: &str) -> Option<(String, String, Option<String>)> {
    let document = Document::parse(body).ok()?;
    let root = document.root_element();
    let code = root.find("Code")?.text()?.trim().to_string();
    let message = root
        .find("Message")
        .and_then(|node| node.text())
        .unwrap_or_default()
        .trim()
        .to_string();
    let request_id = root
        .find("RequestID")
        .or_else(|| root.find("RequestId"))
        .and_then(|node| node.text())
        .map(str::to_string);
    Some((code, message, request_id))
}

impl From<AwsError> for Error {
    fn from(err: AwsError) -> Error {
        let text = err.to_string();
        match err {
            AwsError::Http(err) => err.into(),
            AwsError::BackingOff { delay, .. } => Error::retry_after(delay, text),
            AwsError::Api {
                status,
                code,
                retry,
                service,
                action,
                ..
            } => match (retry, meaning(status, &code)) {
                (Some(delay), _) => Error::retry_after(delay, text),
                (None, Meaning::NotFound) => Error::not_found(text),
                (None, Meaning::Busy) => Error::retry_after(BUSY_RETRY, text),
                (None, Meaning::Credentials) => Error::other(format!(
                    "AWS refused the credentials the host signed with ({code}): {text}; check the \
                     aws-sigv4 --credential rule or the CloudProvider's AWS credentials"
                )),
                (None, Meaning::Permission) => Error::other(format!(
                    "AWS denied the action ({code}): {text}; the IAM policy of the provider's \
                     credentials must allow {}:{action}",
                    match service {
                        Service::Ec2 => "ec2",
                        Service::Elbv2 => "elasticloadbalancing",
                    }
                )),
                (None, _) => Error::other(text),
            },
            AwsError::Malformed { .. } => Error::other(text),
        }
    }
}

/// How long the host waits before trying again when a dependent object is busy.
const BUSY_RETRY: Duration = Duration::from_secs(5);
/// The first back-off delay after a throttled answer; it doubles with each further one.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest back-off delay.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long throttled answers are remembered: a minute without one starts again at 1 s.
const THROTTLE_MEMORY: Duration = Duration::from_secs(60);

/// The back-off delay after the `count`th throttled answer in a row: 1 s, 2 s, 4 s, … 30 s.
pub fn backoff(count: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << count.saturating_sub(1).min(5))
        .min(MAX_BACKOFF)
}

/// A client for the endpoints of one configuration.
pub struct Aws {
    ec2: String,
    elbv2: String,
}

impl Aws {
    pub fn new(config: &Config) -> Aws {
        Aws {
            ec2: config.ec2_endpoint.clone(),
            elbv2: config.elbv2_endpoint.clone(),
        }
    }

    /// Send `query` to `service` and return the answer's body.
    pub fn call(&self, service: Service, query: &Query) -> Result<String, AwsError> {
        if let Some(delay) = cache::get_json::<u64>(&backoff_key(service)) {
            return Err(AwsError::BackingOff {
                service,
                delay: Duration::from_millis(delay),
            });
        }
        let endpoint = match service {
            Service::Ec2 => &self.ec2,
            Service::Elbv2 => &self.elbv2,
        };
        let response = Request::new(Method::Post, &format!("{endpoint}/"))
            .header(
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            )
            .header("accept", "text/xml")
            .body(query.body(service).into_bytes())
            .send()
            .map_err(AwsError::Http)?;
        let body = String::from_utf8_lossy(&response.body).into_owned();
        if (200..300).contains(&response.status) {
            return Ok(body);
        }
        let (code, message, request_id) = error_answer(&body).unwrap_or_else(|| {
            let snippet: String = body.chars().take(200).collect();
            (format!("HTTP{}", response.status), snippet, None)
        });
        let retry =
            (meaning(response.status, &code) == Meaning::Throttled).then(|| throttled(service));
        Err(AwsError::Api {
            service,
            action: query.action,
            status: response.status,
            code,
            message,
            request_id,
            retry,
        })
    }

    /// Send `query` to `service` page after page, handing each answer's root element to
    /// `page`.
    pub fn pages(
        &self,
        service: Service,
        query: Query,
        mut page: impl FnMut(Node<'_, '_>) -> Result<(), AwsError>,
    ) -> Result<(), AwsError> {
        let (param, element) = service.paging();
        let mut token: Option<String> = None;
        loop {
            let mut request = query.clone();
            if let Some(token) = token.take() {
                request = request.param(param, token);
            }
            let body = self.call(service, &request)?;
            let document = parse(query.action, &body)?;
            let root = document.root_element();
            page(root)?;
            token = root
                .find(element)
                .and_then(|node| node.text())
                .filter(|token| !token.is_empty())
                .map(str::to_string);
            if token.is_none() {
                return Ok(());
            }
        }
    }
}

/// `body` as an XML document.
pub fn parse<'a>(action: &'static str, body: &'a str) -> Result<Document<'a>, AwsError> {
    Document::parse(body).map_err(|err| AwsError::Malformed {
        action,
        error: err.to_string(),
    })
}

/// Record a throttled answer from `service`: the delay before its next request, which
/// every call of this provider version waits out.
fn throttled(service: Service) -> Duration {
    let key = format!("throttled/{}", service.name());
    let count = cache::get_json::<u32>(&key).unwrap_or(0).saturating_add(1);
    cache::set_json(&key, &count, THROTTLE_MEMORY);
    let delay = backoff(count);
    cache::set_json(
        &backoff_key(service),
        &u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        delay,
    );
    wasm_ccm_sdk::warn!(
        "{} throttled ({count} in a row): no request to it for {} ms",
        service.name(),
        delay.as_millis()
    );
    delay
}

fn backoff_key(service: Service) -> String {
    format!("backoff/{}", service.name())
}

/// Percent-encode `value` for a form body (RFC 3986 unreserved characters kept).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(byte))
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real EC2 error answer (a denied `DescribeInstances`).
    const EC2_UNAUTHORIZED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this operation. User: arn:aws:sts::123456789012:assumed-role/ccm/x is not authorized to perform: ec2:DescribeInstances because no identity-based policy allows the ec2:DescribeInstances action</Message></Error></Errors><RequestID>6a1a9e0c-3b1e-4b4f-9a4a-2c1d7e8f9a0b</RequestID></Response>"#;

    /// A real ELBv2 error answer.
    const ELBV2_NOT_FOUND: &str = r#"<ErrorResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/">
  <Error>
    <Type>Sender</Type>
    <Code>LoadBalancerNotFound</Code>
    <Message>One or more load balancers not found</Message>
  </Error>
  <RequestId>0f1b6c3e-2d4a-4e5f-8a9b-1c2d3e4f5a6b</RequestId>
</ErrorResponse>"#;

    #[test]
    fn the_first_code_of_either_shape_is_read() {
        let (code, message, id) = error_answer(EC2_UNAUTHORIZED).unwrap();
        assert_eq!(code, "UnauthorizedOperation");
        assert!(message.starts_with("You are not authorized"));
        assert_eq!(id.as_deref(), Some("6a1a9e0c-3b1e-4b4f-9a4a-2c1d7e8f9a0b"));
        let (code, message, id) = error_answer(ELBV2_NOT_FOUND).unwrap();
        assert_eq!(code, "LoadBalancerNotFound");
        assert_eq!(message, "One or more load balancers not found");
        assert_eq!(id.as_deref(), Some("0f1b6c3e-2d4a-4e5f-8a9b-1c2d3e4f5a6b"));
        assert_eq!(error_answer("<html>Bad Gateway</html>"), None);
    }

    #[test]
    fn codes_map_to_the_contracts_errors() {
        let error = |status, code: &str, retry| {
            Error::from(AwsError::Api {
                service: Service::Ec2,
                action: "DescribeInstances",
                status,
                code: code.into(),
                message: "m".into(),
                request_id: None,
                retry,
            })
        };
        assert!(matches!(
            error(400, "InvalidInstanceID.NotFound", None),
            Error::NotFound(_)
        ));
        assert!(matches!(
            error(400, "DependencyViolation", None),
            Error::RetryAfter(_)
        ));
        match error(403, "UnauthorizedOperation", None) {
            Error::Other(message) => {
                assert!(message.contains("UnauthorizedOperation"), "{message}");
                assert!(message.contains("ec2:DescribeInstances"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        match error(401, "AuthFailure", None) {
            Error::Other(message) => assert!(message.contains("(AuthFailure)"), "{message}"),
            other => panic!("{other:?}"),
        }
        match error(503, "RequestLimitExceeded", Some(Duration::from_secs(2))) {
            Error::RetryAfter(retry) => assert_eq!(retry.delay_ms, 2000),
            other => panic!("{other:?}"),
        }
        assert_eq!(meaning(503, "RequestLimitExceeded"), Meaning::Throttled);
        assert_eq!(meaning(502, "HTTP502"), Meaning::Throttled);
        assert_eq!(meaning(400, "Throttling"), Meaning::Throttled);
        assert_eq!(meaning(400, "InvalidParameterValue"), Meaning::Other);
    }

    #[test]
    fn backoff_doubles_to_thirty_seconds() {
        let delays: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn forms_carry_action_version_lists_and_filters() {
        let query = Query::new("DescribeInstances")
            .filter("tag-key", ["kubernetes.io/cluster/c1"])
            .filter("instance-state-name", ["running", "stopped"])
            .list("InstanceId", ["i-1"]);
        assert_eq!(
            query.body(Service::Ec2),
            "Action=DescribeInstances&Version=2016-11-15\
             &Filter.1.Name=tag-key&Filter.1.Value.1=kubernetes.io%2Fcluster%2Fc1\
             &Filter.2.Name=instance-state-name&Filter.2.Value.1=running&Filter.2.Value.2=stopped\
             &InstanceId.1=i-1"
        );
        assert!(
            Query::new("DescribeLoadBalancers")
                .body(Service::Elbv2)
                .ends_with("Version=2015-12-01")
        );
    }
}
