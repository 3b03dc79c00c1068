//! Identity tokens exchanged for registry access tokens, as docker and containerd do it.
//!
//! An identity token is the OAuth2 refresh token `docker login` stores (`identitytoken`) for
//! registries such as ACR and Harbor. It is not sent to the registry itself: the registry's
//! `/v2/` answers 401 with `WWW-Authenticate: Bearer realm="…",service="…"`, and the realm (its
//! token service) is asked, with a form-encoded POST of `grant_type=refresh_token`, for an
//! access token scoped to one repository and operation (`repository:REPO:pull`, or
//! `pull,push`). That access token is what oci-client then sends as `Authorization: Bearer`.
//!
//! A new access token is asked for each registry operation (a manifest, a blob, a push): the
//! manager fetches its provider at start, so nothing is kept to refresh. The identity token is
//! sent over HTTPS only, unless the registry itself is reached over plain HTTP
//! (`--insecure-registry`) or the realm's `host:port` is named there too; it is never
//! followed through a redirect, and no error, log line or `Debug` output shows it.

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;

/// The `client_id` the exchange names (OAuth2 asks a client to identify itself).
const CLIENT_ID: &str = "wasm-ccm";
/// The most a token service's answer may weigh.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Why no access token could be had for an identity token. No variant holds a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// The token service refused the identity token (400, 401 or 403).
    #[error(
        "the registry's token service refused the identity token for {registry}: {status}{detail}; log in again (docker login {registry}) and update --registry-config"
    )]
    Refused {
        /// `host[:port]` of the registry.
        registry: String,
        /// The token service's status.
        status: StatusCode,
        /// `: ` and the first line of its answer, or nothing.
        detail: String,
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
        "{registry} asks for {challenge:?}, not a bearer token: an identity token cannot be used with it; give a user name and password in --registry-config"
    )]
    NoBearerChallenge {
        /// `host[:port]` of the registry.
        registry: String,
        /// Its `WWW-Authenticate` header.
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

/// One exchange: an identity token for access to one repository of one registry.
pub struct Exchange<'a> {
    /// `host[:port]` of the registry.
    pub registry: &'a str,
    /// The registry's repository.
    pub repository: &'a str,
    /// Whether to ask for `pull,push` rather than `pull`.
    pub push: bool,
    /// The registries reached over plain HTTP (`--insecure-registry`).
    pub insecure: &'a [String],
    /// The refresh token.
    pub identity_token: &'a str,
}

/// A `WWW-Authenticate: Bearer` challenge.
#[derive(Debug, PartialEq, Eq)]
struct Challenge {
    realm: String,
    service: Option<String>,
}

#[derive(Deserialize)]
struct Answer {
    access_token: Option<String>,
    token: Option<String>,
}

impl Exchange<'_> {
    /// An access token for the repository, or none when the registry asks for no
    /// authentication at all. `http` must not follow redirects.
    pub async fn access_token(&self, http: &reqwest::Client) -> Result<Option<String>, TokenError> {
        let Some(challenge) = self.challenge(http).await? else {
            return Ok(None);
        };
        let realm = self.realm_url(&challenge.realm)?;
        let scope = format!(
            "repository:{}:{}",
            self.repository,
            if self.push { "pull,push" } else { "pull" }
        );
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", self.identity_token),
            ("client_id", CLIENT_ID),
            ("scope", &scope),
        ];
        if let Some(service) = &challenge.service {
            form.push(("service", service));
        }
        let response = http
            .post(realm.clone())
            .form(&form)
            .send()
            .await
            .map_err(|error| {
                TokenError::Unavailable(format!(
                    "the token service of {} ({}) cannot be reached: {}",
                    self.registry,
                    realm_origin(&realm),
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
                .map(Some)
                .ok_or_else(|| {
                    TokenError::Protocol(format!(
                        "the token service of {} answered 200 without an access_token or token",
                        self.registry
                    ))
                });
        }
        let detail = self.detail(&body);
        Err(match status.as_u16() {
            400 | 401 | 403 => TokenError::Refused {
                registry: self.registry.to_string(),
                status,
                detail,
            },
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

    /// The registry's bearer challenge from an anonymous `GET /v2/`; none when it lets
    /// anyone in.
    async fn challenge(&self, http: &reqwest::Client) -> Result<Option<Challenge>, TokenError> {
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
            return Ok(None);
        }
        let header = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        match (status.as_u16(), header) {
            (401, Some(header)) => match bearer_challenge(&header) {
                Some(challenge) => Ok(Some(challenge)),
                None => Err(TokenError::NoBearerChallenge {
                    registry: self.registry.to_string(),
                    challenge: header,
                }),
            },
            (429 | 500.., _) => Err(TokenError::Unavailable(format!("{url} answered {status}"))),
            _ => Err(TokenError::Protocol(format!(
                "{url} answered {status} without a bearer challenge"
            ))),
        }
    }

    /// The realm as a URL the identity token may be sent to.
    fn realm_url(&self, realm: &str) -> Result<reqwest::Url, TokenError> {
        let url = reqwest::Url::parse(realm).map_err(|error| {
            TokenError::Protocol(format!(
                "{} names a token service that is no URL ({realm:?}: {error})",
                self.registry
            ))
        })?;
        let origin = realm_origin(&url);
        let insecure = |host: &str| self.insecure.iter().any(|r| r == host);
        match url.scheme() {
            "https" => Ok(url),
            "http" if insecure(self.registry) || insecure(&origin) => Ok(url),
            _ => Err(TokenError::Protocol(format!(
                "{} names the token service {realm}; an identity token is sent over HTTPS only, \
                 or over plain HTTP to a host named in --insecure-registry",
                self.registry
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

    /// `: ` and the first line of an error answer, with the identity token blotted out
    /// should a token service echo it.
    fn detail(&self, body: &[u8]) -> String {
        let text = String::from_utf8_lossy(body);
        let line = text.trim().lines().next().unwrap_or_default();
        let line: String = line.chars().take(200).collect();
        let line = line.replace(self.identity_token, "<identity token>");
        if line.is_empty() {
            line
        } else {
            format!(": {line}")
        }
    }
}

/// A reqwest client for token exchanges: the registry client's timeouts and user agent, and
/// no redirects (a redirected POST would carry the identity token elsewhere).
pub(super) fn http_client(user_agent: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .user_agent(user_agent)
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// `host[:port]` of a URL, as `--insecure-registry` names hosts.
fn realm_origin(url: &reqwest::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => String::new(),
    }
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
        Exchange {
            registry: "127.0.0.1:5000",
            repository: "p/simcloud",
            push: false,
            insecure,
            identity_token: "refresh-secret",
        }
    }

    #[test]
    fn the_identity_token_goes_over_https_or_to_a_plain_http_host_the_operator_named() {
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
    }

    #[test]
    fn error_details_never_show_the_identity_token() {
        let none: Vec<String> = Vec::new();
        let detail = exchange(&none).detail(b"invalid refresh token refresh-secret\nmore");
        assert_eq!(detail, ": invalid refresh token <identity token>");
        assert_eq!(exchange(&none).detail(b"  "), "");
        let refused = TokenError::Refused {
            registry: "127.0.0.1:5000".into(),
            status: StatusCode::UNAUTHORIZED,
            detail: String::new(),
        };
        assert!(refused.to_string().starts_with(
            "the registry's token service refused the identity token for 127.0.0.1:5000: 401 Unauthorized;"
        ));
        assert!(!refused.is_transient());
        assert!(TokenError::Unavailable("503".into()).is_transient());
    }
}
