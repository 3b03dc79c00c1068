//! Access tokens from a registry's token service, as docker and containerd get them, for
//! every kind of credential: none (an anonymous token), a user name and password, or an
//! identity token.
//!
//! The registry's `/v2/` answers 401 with `WWW-Authenticate: Bearer realm="…",service="…"`,
//! and the realm (its token service, any URL the registry names) is asked for an access token
//! scoped to one repository and operation (`repository:REPO:pull`, or `pull,push`): with a
//! `GET` carrying the user name and password as basic auth, or none; or, for an identity
//! token (the OAuth2 refresh token `docker login` stores as `identitytoken` for registries
//! such as ACR and Harbor, never sent to the registry itself), a form-encoded `POST` of
//! `grant_type=refresh_token`. The access token is what the requests then carry as
//! `Authorization: Bearer`. A registry that asks for anything else (basic auth, or nothing
//! at `/v2/`) gets the user name and password itself, if there are any.
//!
//! The exchange is done here rather than by oci-client, which reads a token service's answer
//! whole however long it is: here the answer is read up to [`MAX_ANSWER_BYTES`], and what
//! the token service or the registry says is quoted in errors cut to a line and escaped.
//!
//! A new access token is asked for each registry operation (a manifest, a blob, a push): the
//! manager fetches its provider at start, so nothing is kept to refresh. Credentials and
//! tokens go to the token service over HTTPS only, unless the registry itself is reached
//! over plain HTTP (`--insecure-registry`) or the realm's `host:port` is named there too; a
//! token request is never followed through a redirect, and no error, log line or `Debug`
//! output shows a password or an identity token.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;

/// The `client_id` the exchange names (OAuth2 asks a client to identify itself).
const CLIENT_ID: &str = "wasm-ccm";
/// The most a token service's answer may weigh.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// The most of a registry's or token service's own words an error quotes.
const QUOTED_CHARS: usize = 200;

/// Why no access token could be had. No variant holds a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The token service refused the credentials, or a request without any (400, 401 or 403).
    #[error(
        "the registry's token service refused {what} for {registry}: {status}{detail}; {remedy}"
    )]
    Refused {
        /// What was offered: `the identity token`, `the user name and password
        /// --registry-config has` or `a request without credentials`.
        what: &'static str,
        /// `host[:port]` of the registry.
        registry: String,
        /// The token service's status.
        status: StatusCode,
        /// `: ` and the first line of its answer, or nothing.
        detail: String,
        /// What the operator can do about it.
        remedy: String,
    },
    /// The registry or its token service answered 429 or 5xx, or could not be reached: worth
    /// another attempt.
    #[error("{0}")]
    Unavailable(String),
    /// TLS with the registry failed.
    #[error("{error}")]
    Tls {
        /// `host[:port]` of the registry.
        registry: String,
        /// The TLS error.
        error: String,
    },
    /// The registry does not offer a bearer-token exchange, so an identity token cannot be
    /// used with it.
    #[error(
        "{registry} asks for \"{challenge}\", not a bearer token: an identity token cannot be used with it; give a user name and password in --registry-config"
    )]
    NoBearerChallenge {
        /// `host[:port]` of the registry.
        registry: String,
        /// Its `WWW-Authenticate` header, quoted.
        challenge: String,
    },
    /// Anything else the registry or its token service got wrong.
    #[error("{0}")]
    Protocol(String),
}

impl TokenError {
    /// Whether another attempt may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, TokenError::Unavailable(_))
    }
}

/// What is offered to a registry's token service.
#[derive(Clone, Copy)]
pub enum Grant<'a> {
    /// No credentials: an anonymous token, where the registry asks for one.
    Anonymous,
    /// A user name and password: as basic auth to the token service, or to a registry that
    /// asks for basic auth itself.
    Basic {
        /// The user name.
        username: &'a str,
        /// The password.
        password: &'a str,
    },
    /// docker's `identitytoken`, a refresh token.
    IdentityToken(&'a str),
}

impl Grant<'_> {
    /// The secret to blot out of anything quoted.
    fn secret(&self) -> Option<(&str, &'static str)> {
        match *self {
            Grant::Anonymous => None,
            Grant::Basic { password, .. } => Some((password, "<password>")),
            Grant::IdentityToken(token) => Some((token, "<identity token>")),
        }
    }
}

/// How one operation's requests are authenticated.
pub enum Access {
    /// With nothing: the registry asks for nothing, or for basic auth and there are no
    /// credentials (its 401 then says so).
    Open,
    /// With the user name and password, as basic auth: the registry asks for no bearer
    /// token (a registry letting anyone read `/v2/` may still want them for a repository).
    Basic,
    /// With this access token from the registry's token service.
    Bearer(String),
}

/// One exchange: credentials for access to one repository of one registry.
pub struct Exchange<'a> {
    /// `host[:port]` of the registry.
    pub registry: &'a str,
    /// The registry's repository.
    pub repository: &'a str,
    /// Whether to ask for `pull,push` rather than `pull`.
    pub push: bool,
    /// The registries reached over plain HTTP (`--insecure-registry`).
    pub insecure: &'a [String],
    /// What is offered.
    pub grant: Grant<'a>,
}

/// A `WWW-Authenticate: Bearer` challenge.
#[derive(Debug, PartialEq, Eq)]
struct Challenge {
    realm: String,
    service: Option<String>,
}

/// What the registry's `/v2/` asks for.
enum Asked {
    /// Nothing: it answered 2xx.
    Nothing,
    /// A bearer token.
    Bearer(Challenge),
    /// Something else: its status and `WWW-Authenticate` header, if any.
    Other {
        url: String,
        status: StatusCode,
        header: Option<String>,
    },
}

#[derive(Deserialize)]
struct Answer {
    access_token: Option<String>,
    token: Option<String>,
}

impl Exchange<'_> {
    /// How the operation's requests are authenticated: an access token for the repository
    /// when the registry asks for one. `http` must not follow redirects.
    pub async fn access(&self, http: &reqwest::Client) -> Result<Access, TokenError> {
        let challenge = match self.challenge(http).await? {
            Asked::Bearer(challenge) => challenge,
            // A password goes to a registry asking for anything but a bearer token (as the
            // registry client always did), and no credentials go without any.
            Asked::Nothing | Asked::Other { .. } if matches!(self.grant, Grant::Basic { .. }) => {
                return Ok(Access::Basic);
            }
            Asked::Nothing => return Ok(Access::Open),
            Asked::Other { .. } if matches!(self.grant, Grant::Anonymous) => {
                return Ok(Access::Open);
            }
            Asked::Other {
                header: Some(header),
                ..
            } => {
                return Err(TokenError::NoBearerChallenge {
                    registry: self.registry.to_string(),
                    challenge: quoted(&header),
                });
            }
            Asked::Other { url, status, .. } => {
                return Err(TokenError::Protocol(format!(
                    "{url} answered {status} without a bearer challenge"
                )));
            }
        };
        let realm = self.realm_url(&challenge.realm)?;
        let scope = format!(
            "repository:{}:{}",
            self.repository,
            if self.push { "pull,push" } else { "pull" }
        );
        let request = match self.grant {
            Grant::IdentityToken(token) => {
                let mut form = vec![
                    ("grant_type", "refresh_token"),
                    ("refresh_token", token),
                    ("client_id", CLIENT_ID),
                    ("scope", &scope),
                ];
                if let Some(service) = &challenge.service {
                    form.push(("service", service));
                }
                http.post(realm.clone()).form(&form)
            }
            Grant::Basic { username, password } => http
                .get(realm.clone())
                .query(&token_query(&scope, &challenge))
                .basic_auth(username, Some(password)),
            Grant::Anonymous => http
                .get(realm.clone())
                .query(&token_query(&scope, &challenge)),
        };
        let response = request.send().await.map_err(|error| {
            TokenError::Unavailable(format!(
                "the token service of {} ({}) cannot be reached: {}",
                self.registry,
                // The registry names the realm: its host is as long as it likes.
                quoted(&super::host_port(&realm)),
                super::chain(&error)
            ))
        })?;
        let status = response.status();
        let body = self.answer(response).await?;
        if status == StatusCode::OK {
            let answer: Answer = serde_json::from_slice(&body).map_err(|_| {
                TokenError::Protocol(format!(
                    "the token service of {} answered 200 with no JSON",
                    self.registry
                ))
            })?;
            return answer
                .access_token
                .or(answer.token)
                .filter(|token| !token.is_empty())
                .map(Access::Bearer)
                .ok_or_else(|| {
                    TokenError::Protocol(format!(
                        "the token service of {} answered 200 without an access_token or token",
                        self.registry
                    ))
                });
        }
        let detail = self.detail(&body);
        let registry = self.registry;
        Err(match status.as_u16() {
            400 | 401 | 403 => {
                let (what, remedy) = match self.grant {
                    Grant::IdentityToken(_) => (
                        "the identity token",
                        format!(
                            "log in again (docker login {registry}) and update --registry-config"
                        ),
                    ),
                    Grant::Basic { .. } => (
                        "the user name and password --registry-config has",
                        format!(
                            "check them (docker login {registry}) and update --registry-config"
                        ),
                    ),
                    Grant::Anonymous => (
                        "a request without credentials",
                        format!("give credentials for {registry} in --registry-config"),
                    ),
                };
                TokenError::Refused {
                    what,
                    registry: registry.to_string(),
                    status,
                    detail,
                    remedy,
                }
            }
            429 | 500.. => TokenError::Unavailable(format!(
                "the token service of {} answered {status}{detail}",
                self.registry
            )),
            _ => TokenError::Protocol(format!(
                "the token service of {} answered {status}{detail}",
                self.registry
            )),
        })
    }

    /// What the registry asks for, from an anonymous `GET /v2/` (its body unread).
    async fn challenge(&self, http: &reqwest::Client) -> Result<Asked, TokenError> {
        let scheme = if self.insecure.iter().any(|r| r == self.registry) {
            "http"
        } else {
            "https"
        };
        let url = format!("{scheme}://{}/v2/", self.registry);
        let response =
            http.get(&url)
                .send()
                .await
                .map_err(|error| match super::tls_error(&error) {
                    Some(tls) => TokenError::Tls {
                        registry: self.registry.to_string(),
                        error: tls,
                    },
                    None => TokenError::Unavailable(super::chain(&error)),
                })?;
        let status = response.status();
        if status.is_success() {
            return Ok(Asked::Nothing);
        }
        let header = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        match (status.as_u16(), header) {
            (401, Some(header)) => Ok(match bearer_challenge(&header) {
                Some(challenge) => Asked::Bearer(challenge),
                None => Asked::Other {
                    url,
                    status,
                    header: Some(header),
                },
            }),
            (429 | 500.., _) => Err(TokenError::Unavailable(format!("{url} answered {status}"))),
            (_, header) => Ok(Asked::Other {
                url,
                status,
                header,
            }),
        }
    }

    /// The realm as a URL credentials may be sent to and a token taken from.
    fn realm_url(&self, realm: &str) -> Result<reqwest::Url, TokenError> {
        let url = reqwest::Url::parse(realm).map_err(|error| {
            TokenError::Protocol(format!(
                "{} names a token service that is no URL ({}: {error})",
                self.registry,
                quoted(realm)
            ))
        })?;
        let origin = super::host_port(&url);
        let insecure = |host: &str| self.insecure.iter().any(|r| r == host);
        match url.scheme() {
            "https" => Ok(url),
            // An anonymous request carries no secret (as docker, which asks any realm).
            "http" if matches!(self.grant, Grant::Anonymous) => Ok(url),
            "http" if insecure(self.registry) || insecure(&origin) => Ok(url),
            _ => Err(TokenError::Protocol(format!(
                "{} names the token service {}; credentials and tokens go over HTTPS only, \
                 or over plain HTTP to a host named in --insecure-registry",
                self.registry,
                quoted(realm)
            ))),
        }
    }

    /// The answer's body, at most [`MAX_ANSWER_BYTES`].
    async fn answer(&self, mut response: reqwest::Response) -> Result<Vec<u8>, TokenError> {
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|error| {
            TokenError::Unavailable(format!(
                "the token service of {} broke off its answer: {}",
                self.registry,
                super::chain(&error)
            ))
        })? {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(TokenError::Protocol(format!(
                    "the token service of {} answered more than {MAX_ANSWER_BYTES} bytes",
                    self.registry
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// `: ` and the first line of an error answer, quoted, with the password or identity
    /// token blotted out should a token service echo it.
    fn detail(&self, body: &[u8]) -> String {
        let text = String::from_utf8_lossy(body);
        let text = match self.grant.secret() {
            Some((secret, blot)) if !secret.is_empty() => text.replace(secret, blot),
            _ => text.into_owned(),
        };
        let line = quoted(&text);
        if line.is_empty() {
            line
        } else {
            format!(": {line}")
        }
    }
}

/// The query of a token `GET`: the scope, and the service the registry named.
fn token_query<'a>(scope: &'a str, challenge: &'a Challenge) -> Vec<(&'static str, &'a str)> {
    let mut query = vec![("scope", scope)];
    if let Some(service) = &challenge.service {
        query.push(("service", service.as_str()));
    }
    query
}

/// A registry's or token service's own words as an error quotes them: the first line, at
/// most [`QUOTED_CHARS`] characters, its control characters escaped.
pub(super) fn quoted(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    let end = line
        .char_indices()
        .nth(QUOTED_CHARS)
        .map_or(line.len(), |(i, _)| i);
    crate::text::escaped(&line[..end]).into_owned()
}

/// A reqwest client for token exchanges: the registry client's timeouts and user agent, and
/// no redirects (a redirected request would carry the credentials elsewhere).
pub(super) fn http_client(user_agent: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .user_agent(user_agent)
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// The `Bearer` challenge among those of a `WWW-Authenticate` header (RFC 7235: a scheme,
/// then `name=value` or `name="quoted \" value"` parameters separated by commas).
fn bearer_challenge(header: &str) -> Option<Challenge> {
    let rest = header.trim_start();
    let scheme_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    if !rest[..scheme_end].eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut params = &rest[scheme_end..];
    let (mut realm, mut service) = (None, None);
    loop {
        params = params.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        let Some(eq) = params.find('=') else { break };
        let name = params[..eq].trim().to_ascii_lowercase();
        if name.contains(char::is_whitespace) {
            // The next challenge's scheme: the bearer one ends here.
            break;
        }
        params = params[eq + 1..].trim_start();
        let value;
        if let Some(quoted) = params.strip_prefix('"') {
            let mut text = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => text.extend(chars.next().map(|(_, c)| c)),
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => text.push(c),
                }
            }
            params = &quoted[end?..];
            value = text;
        } else {
            let end = params.find(',').unwrap_or(params.len());
            value = params[..end].trim().to_string();
            params = &params[end..];
        }
        match name.as_str() {
            "realm" => realm = Some(value),
            "service" => service = Some(value),
            _ => {}
        }
    }
    Some(Challenge {
        realm: realm.filter(|r| !r.is_empty())?,
        service,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_are_read_as_registries_write_them() {
        let challenge = |header: &str| bearer_challenge(header);
        assert_eq!(
            challenge(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:p/x:pull""#
            ),
            Some(Challenge {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
            })
        );
        // Unquoted values, odd spacing and case, escapes, and no service.
        assert_eq!(
            challenge(r#"bearer   service = "a \"b\"" , realm=https://r.example/t"#),
            Some(Challenge {
                realm: "https://r.example/t".into(),
                service: Some(r#"a "b""#.into()),
            })
        );
        assert_eq!(
            challenge(r#"Bearer realm="https://r.example/t", Basic realm="x""#),
            Some(Challenge {
                realm: "https://r.example/t".into(),
                service: None,
            })
        );
        assert_eq!(challenge(r#"Basic realm="wasm-ccm-tests""#), None);
        assert_eq!(challenge(r#"Bearer service="no realm""#), None);
        assert_eq!(challenge(r#"Bearer realm="unterminated"#), None);
    }

    fn exchange<'a>(insecure: &'a [String]) -> Exchange<'a> {
        with_grant(insecure, Grant::IdentityToken("refresh-secret"))
    }

    fn with_grant<'a>(insecure: &'a [String], grant: Grant<'a>) -> Exchange<'a> {
        Exchange {
            registry: "127.0.0.1:5000",
            repository: "p/simcloud",
            push: false,
            insecure,
            grant,
        }
    }

    #[test]
    fn credentials_go_over_https_or_to_a_plain_http_host_the_operator_named() {
        let none: Vec<String> = Vec::new();
        assert!(
            exchange(&none)
                .realm_url("https://auth.example/token")
                .is_ok()
        );
        let refused = exchange(&none)
            .realm_url("http://auth.example/token")
            .unwrap_err();
        assert!(refused.to_string().contains("HTTPS only"), "{refused}");
        // A plain-HTTP registry, or a realm named in --insecure-registry.
        let registry = vec!["127.0.0.1:5000".to_string()];
        assert!(
            exchange(&registry)
                .realm_url("http://127.0.0.1:9/token")
                .is_ok()
        );
        let realm = vec!["auth.local:8080".to_string()];
        assert!(
            exchange(&realm)
                .realm_url("http://auth.local:8080/token")
                .is_ok()
        );
        assert!(exchange(&none).realm_url("ftp://auth.example/").is_err());

        // A password as an identity token; an anonymous request carries no secret.
        let basic = with_grant(
            &none,
            Grant::Basic {
                username: "alice",
                password: "pa55word",
            },
        );
        assert!(basic.realm_url("http://auth.example/token").is_err());
        assert!(basic.realm_url("https://auth.example/token").is_ok());
        let anonymous = with_grant(&none, Grant::Anonymous);
        assert!(anonymous.realm_url("http://auth.example/token").is_ok());
    }

    #[test]
    fn error_details_never_show_the_identity_token_or_password() {
        let none: Vec<String> = Vec::new();
        let detail = exchange(&none).detail(b"invalid refresh token refresh-secret\nmore");
        assert_eq!(detail, ": invalid refresh token <identity token>");
        assert_eq!(exchange(&none).detail(b"  "), "");
        let basic = with_grant(
            &none,
            Grant::Basic {
                username: "alice",
                password: "pa55word",
            },
        );
        assert_eq!(
            basic.detail(b"alice:pa55word is wrong"),
            ": alice:<password> is wrong"
        );
        let refused = TokenError::Refused {
            what: "the identity token",
            registry: "127.0.0.1:5000".into(),
            status: StatusCode::UNAUTHORIZED,
            detail: String::new(),
            remedy: "log in again".into(),
        };
        assert!(refused.to_string().starts_with(
            "the registry's token service refused the identity token for 127.0.0.1:5000: 401 Unauthorized;"
        ));
        assert!(!refused.is_transient());
        assert!(TokenError::Unavailable("503".into()).is_transient());
    }

    /// What a registry or token service says reaches an error, and from there the log, the
    /// terminal and the CloudProvider's status, as one short line that cannot restyle a
    /// terminal.
    #[test]
    fn quoted_words_are_one_short_escaped_line() {
        assert_eq!(quoted("  denied\nsecond line"), "denied");
        assert_eq!(quoted("\x1b[2Jcleared\r"), "\\u{1b}[2Jcleared");
        let long = "é".repeat(10_000);
        assert_eq!(quoted(&long).chars().count(), QUOTED_CHARS);
    }
}
