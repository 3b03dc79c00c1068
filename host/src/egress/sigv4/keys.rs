//! Where a SigV4 rule's keys come from, and when they are read again: static keys (an access
//! key id, a secret and an optional session token, each from the environment, a file or a
//! watched Secret), re-read as the gate's header credentials are; or temporary keys from STS
//! `AssumeRoleWithWebIdentity` (IRSA), exchanged for the token file's current contents,
//! refreshed five minutes before they expire and again when AWS refuses them, one exchange at
//! a time however many requests wait for it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;

use super::super::credentials::SecretSource;
use super::super::policy::HostPattern;
use super::{aws_endpoint, xml_text};

/// Temporary keys are exchanged again when they have less than this left.
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);

/// The session name sent to STS when `AWS_ROLE_SESSION_NAME` is not set.
const DEFAULT_SESSION_NAME: &str = "wasm-ccm";

/// The keys a rule signs with.
#[derive(Clone)]
pub enum AwsKeys {
    /// Keys read from their sources.
    Static(Arc<StaticKeys>),
    /// Temporary keys from STS for a web identity token.
    WebIdentity(Arc<WebIdentity>),
}

impl fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AwsKeys::Static(keys) => write!(
                f,
                "access key id {:?}, secret {:?}, session token {:?}",
                keys.access_key_id,
                keys.secret_access_key,
                keys.session_token.as_ref().map(|(source, _)| source)
            ),
            AwsKeys::WebIdentity(identity) => write!(
                f,
                "web identity {} with token file {} from {}",
                identity.config.role_arn,
                identity.config.token_file.display(),
                identity.config.sts_endpoint
            ),
        }
    }
}

/// The keys one request is signed with (`Debug` shows the key id, never the secret or token).
#[derive(Debug, Clone)]
pub struct Keys {
    credentials: Credentials,
    /// Which exchange of a web identity made them; `None` for static keys.
    generation: Option<u64>,
}

impl Keys {
    pub(in super::super) fn credentials(&self) -> &Credentials {
        &self.credentials
    }
}

impl AwsKeys {
    /// Keys read from `access_key_id`, `secret_access_key` and `session_token` (temporary
    /// keys), each required.
    pub fn from_sources(
        access_key_id: SecretSource,
        secret_access_key: SecretSource,
        session_token: Option<SecretSource>,
    ) -> AwsKeys {
        AwsKeys::Static(Arc::new(StaticKeys {
            access_key_id,
            secret_access_key,
            session_token: session_token.map(|token| (token, true)),
            read: Mutex::new(None),
        }))
    }

    /// Keys with a session token only when `session_token` has a value.
    fn with_optional_token(
        access_key_id: SecretSource,
        secret_access_key: SecretSource,
        session_token: SecretSource,
    ) -> AwsKeys {
        AwsKeys::Static(Arc::new(StaticKeys {
            access_key_id,
            secret_access_key,
            session_token: Some((session_token, false)),
            read: Mutex::new(None),
        }))
    }

    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` (if set) of the
    /// manager's environment.
    pub fn from_env() -> AwsKeys {
        let env = |name: &str| SecretSource::Env(name.into());
        AwsKeys::with_optional_token(
            env("AWS_ACCESS_KEY_ID"),
            env("AWS_SECRET_ACCESS_KEY"),
            env("AWS_SESSION_TOKEN"),
        )
    }

    /// The files `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` (if
    /// present) of `dir`: a Secret with those keys mounted as a volume.
    pub fn from_dir(dir: &Path) -> AwsKeys {
        let file = |name: &str| SecretSource::File(dir.join(name));
        AwsKeys::with_optional_token(
            file("AWS_ACCESS_KEY_ID"),
            file("AWS_SECRET_ACCESS_KEY"),
            file("AWS_SESSION_TOKEN"),
        )
    }

    /// Temporary keys for the web identity `config`.
    pub fn web_identity(config: WebIdentityConfig) -> AwsKeys {
        AwsKeys::WebIdentity(Arc::new(WebIdentity {
            config,
            http: OnceLock::new(),
            current: RwLock::new(None),
            exchange: tokio::sync::Mutex::new(None),
            exchanges: AtomicU64::new(0),
        }))
    }

    /// Whether the keys are temporary and can be refreshed when AWS refuses them.
    pub fn refreshable(&self) -> bool {
        matches!(self, AwsKeys::WebIdentity(_))
    }

    /// Check now that the keys can be had (static keys read, a token file readable), so a
    /// bad rule fails at start-up. Web identity keys are not exchanged here.
    pub fn check(&self) -> Result<(), String> {
        match self {
            AwsKeys::Static(keys) => keys.read().map(drop),
            AwsKeys::WebIdentity(identity) => identity.token().map(drop),
        }
    }

    /// The keys to sign with now: static keys as read (at most a second old, unless they
    /// are in memory); temporary keys with more than [`REFRESH_BEFORE_EXPIRY`] left, or else
    /// exchanged again first.
    pub(in super::super) async fn current(&self) -> Result<Keys, String> {
        match self {
            AwsKeys::Static(keys) => keys.current(),
            AwsKeys::WebIdentity(identity) => identity.current().await,
        }
    }

    /// New keys after AWS refused `used`, or `None` if these keys cannot be refreshed.
    /// Requests refused together share one exchange: keys already replaced since `used` was
    /// handed out are returned as they are.
    pub(in super::super) async fn after_refusal(
        &self,
        used: &Keys,
    ) -> Option<Result<Keys, String>> {
        match self {
            AwsKeys::Static(_) => None,
            AwsKeys::WebIdentity(identity) => Some(identity.after_refusal(used).await),
        }
    }
}

/// Static keys and when they were last read.
pub struct StaticKeys {
    access_key_id: SecretSource,
    secret_access_key: SecretSource,
    /// The session token's source, and whether it must have a value.
    session_token: Option<(SecretSource, bool)>,
    read: Mutex<Option<(Read, Credentials)>>,
}

/// When static keys were read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// At this instant, from the environment or files: they are read again a second later.
    At(Instant),
    /// From watched Secret keys, as set this many times: read again once one is set anew.
    Set([u64; 3]),
}

impl StaticKeys {
    fn current(&self) -> Result<Keys, String> {
        let sources = [&self.access_key_id, &self.secret_access_key]
            .into_iter()
            .chain(self.session_token.as_ref().map(|(source, _)| source));
        let mut set = [0; 3];
        let mut in_memory = true;
        for (generation, source) in set.iter_mut().zip(sources) {
            match source {
                SecretSource::Shared(secret) => *generation = secret.generation(),
                _ => in_memory = false,
            }
        }
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        let current = match &*read {
            Some((Read::Set(seen), credentials)) if in_memory && *seen == set => {
                Some(credentials.clone())
            }
            Some((Read::At(at), credentials))
                if !in_memory && at.elapsed() < super::super::CREDENTIAL_REFRESH =>
            {
                Some(credentials.clone())
            }
            _ => None,
        };
        let credentials = match current {
            Some(credentials) => credentials,
            None => {
                let credentials = self.read()?;
                let when = if in_memory {
                    Read::Set(set)
                } else {
                    Read::At(Instant::now())
                };
                *read = Some((when, credentials.clone()));
                credentials
            }
        };
        Ok(Keys {
            credentials,
            generation: None,
        })
    }

    fn read(&self) -> Result<Credentials, String> {
        let access_key_id = header_safe(&self.access_key_id, self.access_key_id.read()?)?;
        let secret_access_key = self.secret_access_key.read()?;
        // An optional token that is not there (no variable, no file) means long-term keys.
        let session_token = match &self.session_token {
            Some((source, required)) => match source.read() {
                Ok(token) => Some(header_safe(source, token)?),
                Err(problem) if *required => return Err(problem),
                Err(_) => None,
            },
            None => None,
        };
        Ok(Credentials::new(
            access_key_id,
            secret_access_key,
            session_token,
            None,
            "wasm-ccm",
        ))
    }
}

/// `value` of `source` if it can go in a header (the key id and token do), else why not.
fn header_safe(source: &SecretSource, value: String) -> Result<String, String> {
    if value.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(value)
    } else {
        Err(format!(
            "{source:?} holds characters not allowed in a header"
        ))
    }
}

/// What a web identity exchange needs: the role, the token file (re-read for every exchange:
/// the kubelet rotates the projected token) and the STS endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebIdentityConfig {
    /// The role to assume (`AWS_ROLE_ARN`).
    pub role_arn: String,
    /// The file holding the web identity token (`AWS_WEB_IDENTITY_TOKEN_FILE`).
    pub token_file: PathBuf,
    /// The session name (`AWS_ROLE_SESSION_NAME`, default `wasm-ccm`).
    pub session_name: String,
    /// Where `AssumeRoleWithWebIdentity` is posted, e.g. `https://sts.us-east-1.amazonaws.com`.
    pub sts_endpoint: String,
}

impl WebIdentityConfig {
    /// The role, token file and session name from the manager's environment (as the EKS
    /// pod identity webhook sets them for IRSA), and the STS endpoint: `sts` if given, else
    /// the regional one of `region`, of `target`'s AWS endpoint name, or of `AWS_REGION`
    /// (`AWS_DEFAULT_REGION`).
    pub fn from_env(
        sts: Option<&str>,
        region: Option<&str>,
        target: &HostPattern,
    ) -> Result<WebIdentityConfig, String> {
        WebIdentityConfig::from_vars(|name| std::env::var(name).ok(), sts, region, target)
    }

    /// [`WebIdentityConfig::from_env`] with the environment's variables from `var`.
    fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        sts: Option<&str>,
        region: Option<&str>,
        target: &HostPattern,
    ) -> Result<WebIdentityConfig, String> {
        let var = |name: &str| var(name).filter(|value| !value.is_empty());
        let missing = |name: &str| format!("web identity needs {name} set in the environment");
        let role_arn = var("AWS_ROLE_ARN").ok_or_else(|| missing("AWS_ROLE_ARN"))?;
        let token_file = var("AWS_WEB_IDENTITY_TOKEN_FILE")
            .ok_or_else(|| missing("AWS_WEB_IDENTITY_TOKEN_FILE"))?;
        let session_name =
            var("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| DEFAULT_SESSION_NAME.into());
        let sts_endpoint = match sts {
            Some(url) => url.to_string(),
            None => {
                let from_target = target
                    .dns_name()
                    .and_then(aws_endpoint)
                    .map(|(_, region)| region.to_string());
                let region = region
                    .map(String::from)
                    .or(from_target)
                    .or_else(|| var("AWS_REGION"))
                    .or_else(|| var("AWS_DEFAULT_REGION"))
                    .ok_or(
                        "web identity needs the STS region: state the region, the STS endpoint, or set AWS_REGION",
                    )?;
                regional_sts(&region)
            }
        };
        WebIdentityConfig::new(role_arn, token_file.into(), session_name, sts_endpoint)
    }

    /// A configuration, checked: the endpoint must be an http(s) URL, the session name
    /// what STS takes (2 to 64 of letters, digits and `+=,.@_-`).
    pub fn new(
        role_arn: String,
        token_file: PathBuf,
        session_name: String,
        sts_endpoint: String,
    ) -> Result<WebIdentityConfig, String> {
        let url = reqwest::Url::parse(&sts_endpoint)
            .map_err(|error| format!("STS endpoint {sts_endpoint:?} is not a URL: {error}"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!(
                "STS endpoint {sts_endpoint:?} is not an http(s) URL"
            ));
        }
        let session_ok = (2..=64).contains(&session_name.len())
            && session_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c));
        if !session_ok {
            return Err(format!(
                "role session name {session_name:?} must be 2 to 64 letters, digits or +=,.@_-"
            ));
        }
        if role_arn.is_empty() {
            return Err("the role ARN is empty".into());
        }
        Ok(WebIdentityConfig {
            role_arn,
            token_file,
            session_name,
            sts_endpoint,
        })
    }
}

/// The regional STS endpoint of `region`, in its partition.
fn regional_sts(region: &str) -> String {
    if region.starts_with("cn-") {
        format!("https://sts.{region}.amazonaws.com.cn")
    } else {
        format!("https://sts.{region}.amazonaws.com")
    }
}

/// A web identity's temporary keys and the one exchange that may be running.
pub struct WebIdentity {
    config: WebIdentityConfig,
    http: OnceLock<reqwest::Client>,
    current: RwLock<Option<Temporary>>,
    /// Held by the one exchange running; the last exchange's failure, if it failed.
    exchange: tokio::sync::Mutex<Option<String>>,
    /// Exchanges finished, successful or not.
    exchanges: AtomicU64,
}

/// Keys from one exchange.
#[derive(Clone)]
struct Temporary {
    keys: Keys,
    expires: SystemTime,
}

impl Temporary {
    fn fresh(&self) -> bool {
        self.expires
            .duration_since(SystemTime::now())
            .is_ok_and(|left| left > REFRESH_BEFORE_EXPIRY)
    }

    fn unexpired(&self) -> bool {
        self.expires > SystemTime::now()
    }
}

impl WebIdentity {
    async fn current(&self) -> Result<Keys, String> {
        let seen = self.exchanges.load(Ordering::SeqCst);
        if let Some(current) = self.temporary().filter(Temporary::fresh) {
            return Ok(current.keys);
        }
        let mut failure = self.exchange.lock().await;
        if self.exchanges.load(Ordering::SeqCst) != seen {
            // An exchange finished while this request waited: take its outcome.
            if let Some(current) = self.temporary().filter(Temporary::unexpired) {
                return Ok(current.keys);
            }
            return Err(failure.clone().unwrap_or_else(|| "no keys".into()));
        }
        match self.exchange_now(&mut failure).await {
            Ok(keys) => Ok(keys),
            Err(error) => match self.temporary().filter(Temporary::unexpired) {
                // Refreshing early failed; the keys in hand still work for now.
                Some(current) => {
                    tracing::warn!(role = %self.config.role_arn, "{error}; the current keys are used until they expire");
                    Ok(current.keys)
                }
                None => Err(error),
            },
        }
    }

    async fn after_refusal(&self, used: &Keys) -> Result<Keys, String> {
        let replaced = |current: &Temporary| current.keys.generation != used.generation;
        let seen = self.exchanges.load(Ordering::SeqCst);
        if let Some(current) = self.temporary().filter(replaced) {
            return Ok(current.keys);
        }
        let mut failure = self.exchange.lock().await;
        if self.exchanges.load(Ordering::SeqCst) != seen {
            if let Some(current) = self.temporary().filter(replaced) {
                return Ok(current.keys);
            }
            return Err(failure.clone().unwrap_or_else(|| "no keys".into()));
        }
        self.exchange_now(&mut failure).await
    }

    fn temporary(&self) -> Option<Temporary> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Exchange the token for new keys, holding the exchange lock (`failure`).
    async fn exchange_now(&self, failure: &mut Option<String>) -> Result<Keys, String> {
        let outcome = self.assume_role().await;
        let generation = self.exchanges.fetch_add(1, Ordering::SeqCst) + 1;
        match outcome {
            Ok((credentials, expires)) => {
                *failure = None;
                let keys = Keys {
                    credentials,
                    generation: Some(generation),
                };
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(Temporary {
                    keys: keys.clone(),
                    expires,
                });
                Ok(keys)
            }
            Err(error) => {
                *failure = Some(error.clone());
                Err(error)
            }
        }
    }

    /// The token file's contents now.
    fn token(&self) -> Result<String, String> {
        let path = &self.config.token_file;
        let token = std::fs::read_to_string(path).map_err(|error| {
            format!(
                "cannot read the web identity token file {}: {error}",
                path.display()
            )
        })?;
        let token = token.trim();
        if token.is_empty() {
            return Err(format!(
                "the web identity token file {} is empty",
                path.display()
            ));
        }
        Ok(token.to_string())
    }

    /// One unsigned `AssumeRoleWithWebIdentity`: the keys and when they expire.
    async fn assume_role(&self) -> Result<(Credentials, SystemTime), String> {
        let config = &self.config;
        let token = self.token()?;
        let failed = |problem: String| {
            format!(
                "STS AssumeRoleWithWebIdentity for {} at {} failed: {problem}",
                config.role_arn, config.sts_endpoint
            )
        };
        let http = self.http.get_or_init(crate::source::token_exchange_client);
        let form = [
            ("Action", "AssumeRoleWithWebIdentity"),
            ("Version", "2011-06-15"),
            ("RoleArn", config.role_arn.as_str()),
            ("RoleSessionName", config.session_name.as_str()),
            ("WebIdentityToken", token.as_str()),
        ];
        let response = http
            .post(&config.sts_endpoint)
            .form(&form)
            .send()
            .await
            .map_err(|error| failed(error.without_url().to_string()))?;
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|error| failed(error.without_url().to_string()))?;
        if !status.is_success() {
            let code = xml_text(&body, "Code").unwrap_or("no error code");
            let message = xml_text(&body, "Message").unwrap_or_default();
            return Err(failed(format!("{status}: {code}: {message}")));
        }
        let field = |tag: &str| {
            xml_text(&body, tag)
                .filter(|value| !value.is_empty())
                .ok_or_else(|| failed(format!("the answer has no {tag}")))
        };
        let expiration = field("Expiration")?;
        let expires = chrono::DateTime::parse_from_rfc3339(expiration)
            .map_err(|error| failed(format!("Expiration {expiration:?}: {error}")))?;
        let expires = SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(expires.timestamp()).unwrap_or(0));
        let access_key_id = field("AccessKeyId")?;
        let session_token = field("SessionToken")?;
        let header_ok = |value: &str| value.bytes().all(|b| b.is_ascii_graphic());
        if !header_ok(access_key_id) || !header_ok(session_token) {
            return Err(failed(
                "the key id or session token holds characters not allowed in a header".into(),
            ));
        }
        let credentials = Credentials::new(
            access_key_id,
            field("SecretAccessKey")?,
            Some(session_token.to_string()),
            Some(expires),
            "wasm-ccm-web-identity",
        );
        Ok((credentials, expires))
    }
}

#[cfg(test)]
impl Keys {
    /// Static keys, for tests of signing.
    pub(in super::super) fn for_test(id: &str, secret: &str, token: Option<&str>) -> Keys {
        Keys {
            credentials: Credentials::new(id, secret, token.map(String::from), None, "test"),
            generation: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A stand-in STS on loopback: answers each `AssumeRoleWithWebIdentity` with keys
    /// `ASIA<n>` expiring `expires_in` seconds from now (or `status` with an error), after a
    /// permit from `gate` when there is one; keeps the forms it was sent.
    struct FakeSts {
        url: String,
        forms: Arc<Mutex<Vec<String>>>,
        gate: Arc<tokio::sync::Semaphore>,
    }

    async fn fake_sts(status: u16, expires_in: i64, held: bool) -> FakeSts {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let forms = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(tokio::sync::Semaphore::new(if held { 0 } else { 1000 }));
        let (kept, permits) = (forms.clone(), gate.clone());
        let served = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (kept, permits, served) = (kept.clone(), permits.clone(), served.clone());
                tokio::spawn(async move {
                    let form = read_form(&mut socket).await;
                    kept.lock().unwrap().push(form);
                    permits.acquire().await.unwrap().forget();
                    let n = served.fetch_add(1, Ordering::SeqCst) + 1;
                    let expires = chrono::Utc::now() + chrono::Duration::seconds(expires_in);
                    let body = if status == 200 {
                        format!(
                            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
                             <AccessKeyId>ASIA{n}</AccessKeyId><SecretAccessKey>secret-{n}</SecretAccessKey>\
                             <SessionToken>token-{n}</SessionToken><Expiration>{}</Expiration>\
                             </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
                            expires.to_rfc3339()
                        )
                    } else {
                        "<ErrorResponse><Error><Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>".to_string()
                    };
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        FakeSts { url, forms, gate }
    }

    /// The body of one request.
    async fn read_form(socket: &mut tokio::net::TcpStream) -> String {
        let mut received = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&received).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if received.len() >= end + 4 + length {
                    return text[end + 4..end + 4 + length].to_string();
                }
            }
            let read = socket.read(&mut chunk).await.unwrap();
            if read == 0 {
                return String::new();
            }
            received.extend_from_slice(&chunk[..read]);
        }
    }

    fn identity(sts: &FakeSts, token_file: &Path) -> Arc<WebIdentity> {
        let config = WebIdentityConfig::new(
            "arn:aws:iam::123456789012:role/ccm".into(),
            token_file.into(),
            "wasm-ccm".into(),
            sts.url.clone(),
        )
        .unwrap();
        match AwsKeys::web_identity(config) {
            AwsKeys::WebIdentity(identity) => identity,
            AwsKeys::Static(_) => unreachable!(),
        }
    }

    fn key_id(keys: &Keys) -> &str {
        keys.credentials.access_key_id()
    }

    fn token_file(token: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), format!("{token}\n")).unwrap();
        file
    }

    #[tokio::test]
    async fn web_identity_keys_are_exchanged_once_and_reused_while_fresh() {
        let sts = fake_sts(200, 3600, false).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        let first = identity.current().await.unwrap();
        let second = identity.current().await.unwrap();
        assert_eq!((key_id(&first), key_id(&second)), ("ASIA1", "ASIA1"));
        assert_eq!(first.credentials.session_token(), Some("token-1"));
        let forms = sts.forms.lock().unwrap().clone();
        assert_eq!(forms.len(), 1, "{forms:?}");
        for field in [
            "Action=AssumeRoleWithWebIdentity",
            "Version=2011-06-15",
            "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fccm",
            "RoleSessionName=wasm-ccm",
            "WebIdentityToken=token-one",
        ] {
            assert!(forms[0].contains(field), "{field} in {}", forms[0]);
        }
    }

    #[tokio::test]
    async fn keys_within_five_minutes_of_expiry_are_exchanged_again_for_the_token_now_in_the_file()
    {
        let sts = fake_sts(200, 60, false).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        assert_eq!(key_id(&identity.current().await.unwrap()), "ASIA1");
        std::fs::write(token.path(), "token-two").unwrap();
        assert_eq!(key_id(&identity.current().await.unwrap()), "ASIA2");
        let forms = sts.forms.lock().unwrap().clone();
        assert!(forms[0].contains("WebIdentityToken=token-one"), "{forms:?}");
        assert!(forms[1].contains("WebIdentityToken=token-two"), "{forms:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn requests_needing_keys_together_wait_for_one_exchange() {
        let sts = fake_sts(200, 3600, true).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        let waiting: Vec<_> = (0..8)
            .map(|_| {
                let identity = identity.clone();
                tokio::spawn(async move { identity.current().await })
            })
            .collect();
        // Let the first request reach STS and the others the exchange lock, then answer.
        while sts.forms.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        sts.gate.add_permits(1000);
        for request in waiting {
            assert_eq!(key_id(&request.await.unwrap().unwrap()), "ASIA1");
        }
        assert_eq!(sts.forms.lock().unwrap().len(), 1, "one exchange");
    }

    #[tokio::test]
    async fn a_refusal_exchanges_once_for_every_request_signed_with_the_refused_keys() {
        let sts = fake_sts(200, 3600, false).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        let refused = identity.current().await.unwrap();
        let renewed = identity.after_refusal(&refused).await.unwrap();
        assert_eq!(key_id(&renewed), "ASIA2");
        // Another request refused with the same keys takes the new ones.
        let again = identity.after_refusal(&refused).await.unwrap();
        assert_eq!(key_id(&again), "ASIA2");
        assert_eq!(key_id(&identity.current().await.unwrap()), "ASIA2");
        assert_eq!(sts.forms.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_failed_exchange_names_role_endpoint_and_answer_and_never_the_token() {
        let sts = fake_sts(403, 0, false).await;
        let token = token_file("the-secret-token");
        let identity = identity(&sts, token.path());
        let error = identity.current().await.unwrap_err();
        for part in [
            "STS AssumeRoleWithWebIdentity for arn:aws:iam::123456789012:role/ccm",
            &sts.url,
            "403 Forbidden: AccessDenied: Not authorized",
        ] {
            assert!(error.contains(part), "{part} in {error}");
        }
        assert!(!error.contains("the-secret-token"), "{error}");
        std::fs::remove_file(token.path()).unwrap();
        let unreadable = identity.current().await.unwrap_err();
        assert!(
            unreadable.contains("cannot read the web identity token file"),
            "{unreadable}"
        );
        assert!(AwsKeys::WebIdentity(identity).check().is_err());
    }

    #[tokio::test]
    async fn keys_still_valid_are_used_when_refreshing_them_early_fails() {
        let sts = fake_sts(200, 60, false).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        assert_eq!(key_id(&identity.current().await.unwrap()), "ASIA1");
        std::fs::remove_file(token.path()).unwrap();
        assert_eq!(key_id(&identity.current().await.unwrap()), "ASIA1");
        assert_eq!(sts.forms.lock().unwrap().len(), 1);
    }

    #[test]
    fn the_sts_endpoint_is_stated_or_the_regional_one_of_the_rule_the_name_or_the_environment() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(var, _)| *var == name)
                    .map(|(_, value)| value.to_string())
            }
        };
        const IRSA: [(&str, &str); 2] = [
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ccm"),
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                "/var/run/secrets/eks.amazonaws.com/token",
            ),
        ];
        let any: HostPattern = "https://*.amazonaws.com".parse().unwrap();
        let ec2: HostPattern = "https://ec2.eu-west-3.amazonaws.com".parse().unwrap();
        let endpoint = |vars, sts, region, target| {
            WebIdentityConfig::from_vars(env(vars), sts, region, target)
                .map(|config| config.sts_endpoint)
        };
        let stated = endpoint(&IRSA, Some("http://127.0.0.1:5000"), None, &any);
        assert_eq!(stated.unwrap(), "http://127.0.0.1:5000");
        let region = endpoint(&IRSA, None, Some("us-west-2"), &ec2);
        assert_eq!(region.unwrap(), "https://sts.us-west-2.amazonaws.com");
        let named = endpoint(&IRSA, None, None, &ec2);
        assert_eq!(named.unwrap(), "https://sts.eu-west-3.amazonaws.com");
        const REGIONAL: [(&str, &str); 4] = [
            IRSA[0],
            IRSA[1],
            ("AWS_DEFAULT_REGION", "ap-south-1"),
            ("AWS_REGION", "cn-north-1"),
        ];
        let from_env = endpoint(&REGIONAL, None, None, &any);
        assert_eq!(from_env.unwrap(), "https://sts.cn-north-1.amazonaws.com.cn");
        const DEFAULT_REGION: [(&str, &str); 3] =
            [IRSA[0], IRSA[1], ("AWS_DEFAULT_REGION", "ap-south-1")];
        let default = endpoint(&DEFAULT_REGION, None, None, &any);
        assert_eq!(default.unwrap(), "https://sts.ap-south-1.amazonaws.com");
        let none = endpoint(&IRSA, None, None, &any).unwrap_err();
        assert!(none.contains("needs the STS region"), "{none}");

        let config = WebIdentityConfig::from_vars(env(&IRSA), None, None, &ec2).unwrap();
        assert_eq!(config.session_name, "wasm-ccm");
        assert_eq!(config.role_arn, IRSA[0].1);
        let missing = WebIdentityConfig::from_vars(env(&IRSA[1..]), None, None, &ec2);
        assert!(missing.unwrap_err().contains("needs AWS_ROLE_ARN set"));
        let bad = endpoint(&IRSA, Some("sts.example.com"), None, &any).unwrap_err();
        assert!(bad.contains("is not a URL"), "{bad}");
    }

    #[test]
    fn static_keys_come_from_a_directory_with_an_optional_token() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKIDEXAMPLE\n").unwrap();
        std::fs::write(dir.path().join("AWS_SECRET_ACCESS_KEY"), "the-secret\n").unwrap();
        let keys = AwsKeys::from_dir(dir.path());
        let AwsKeys::Static(read) = &keys else {
            unreachable!()
        };
        let long_term = read.current().unwrap();
        assert_eq!(key_id(&long_term), "AKIDEXAMPLE");
        assert_eq!(long_term.credentials.secret_access_key(), "the-secret");
        assert_eq!(long_term.credentials.session_token(), None);
        assert!(!format!("{keys:?}").contains("the-secret"), "{keys:?}");

        // A rotated file is read again (at most a second later).
        std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKIDROTATED").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while key_id(&read.current().unwrap()) != "AKIDROTATED" {
            assert!(Instant::now() < deadline, "the rotated key is never read");
            std::thread::sleep(Duration::from_millis(50));
        }

        std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKID\nEXAMPLE").unwrap();
        let keys = AwsKeys::from_dir(dir.path());
        let error = keys.check().unwrap_err();
        assert!(error.contains("not allowed in a header"), "{error}");
        std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKIDEXAMPLE").unwrap();
        std::fs::remove_file(dir.path().join("AWS_SECRET_ACCESS_KEY")).unwrap();
        let error = AwsKeys::from_dir(dir.path()).check().unwrap_err();
        assert!(error.contains("cannot read"), "{error}");
    }
}
