//! SigV4's canonical request, written by the gate for the requests it signs most: those to
//! `/` with no query string, as every Query-protocol call (EC2, ELB, STS: the action in a form
//! body) and JSON-protocol call (`X-Amz-Target`) is. It is written straight into one buffer,
//! where `aws-sigv4` builds the same text from a header map, sorted lists and formatted parts:
//! that was half of what signing added to a request on loopback. A request with a path or a
//! query string is signed by `aws-sigv4` whole ([`super::SigV4::sign`]); the keys' derivation
//! and the HMAC are `aws-sigv4`'s either way, and the tests sign requests both ways and compare.

use std::fmt::Write as _;
use std::time::SystemTime;

use aws_sigv4::sign::v4;
use chrono::{DateTime, Datelike, Timelike, Utc};
use sha2::{Digest, Sha256};

use super::{Keys, Scope};

/// The headers that sign `parts` with `body` for `scope` at `time`, as `aws-sigv4` makes them
/// with the gate's settings: `x-amz-date`, `authorization` and, with temporary keys,
/// `x-amz-security-token`; `None` when the request has a path, a query string or no host,
/// which `aws-sigv4` signs. Signed: the method, `host`, `content-type`, every `x-amz-*`
/// header and the SHA-256 of `body`.
pub(super) fn signing_headers(
    parts: &http::request::Parts,
    body: &[u8],
    scope: &Scope<'_>,
    keys: &Keys,
    time: SystemTime,
) -> Option<Vec<(&'static str, String)>> {
    let uri = &parts.uri;
    if !matches!(uri.path(), "/" | "") || uri.query().is_some_and(|query| !query.is_empty()) {
        return None;
    }
    let authority = uri.authority()?;
    // The port is left out of `host` when it is the scheme's own, as hyper sends it.
    let default_port = matches!(
        (uri.scheme_str(), uri.port_u16()),
        (Some("http"), Some(80)) | (Some("https"), Some(443))
    );
    let host = if default_port {
        authority.host()
    } else {
        authority.as_str()
    };
    let credentials = keys.credentials();
    let token = credentials.session_token();
    let utc = DateTime::<Utc>::from(time);
    let mut date_time = String::with_capacity(16);
    let _ = write!(
        date_time,
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        utc.year(),
        utc.month(),
        utc.day(),
        utc.hour(),
        utc.minute(),
        utc.second()
    );

    // The request's own `x-amz-date` and token are replaced, as `aws-sigv4` replaces them.
    let mut headers: Vec<(&str, &str)> = Vec::with_capacity(parts.headers.len() + 3);
    for (name, value) in &parts.headers {
        let name = name.as_str();
        let replaced = name == "x-amz-date" || (token.is_some() && name == "x-amz-security-token");
        if (name == "content-type" || name.starts_with("x-amz-"))
            && !replaced
            && let Ok(value) = value.to_str()
        {
            headers.push((name, value));
        }
    }
    headers.push(("host", host));
    headers.push(("x-amz-date", &date_time));
    if let Some(token) = token {
        headers.push(("x-amz-security-token", token));
    }
    // Stable: the values of one header keep their order.
    headers.sort_by(|a, b| a.0.cmp(b.0));

    let mut canonical = String::with_capacity(512);
    canonical.push_str(parts.method.as_str());
    canonical.push_str("\n/\n\n");
    let mut signed = String::with_capacity(80);
    let mut previous = None;
    for (name, value) in headers {
        if previous == Some(name) {
            canonical.push(',');
        } else {
            if previous.is_some() {
                canonical.push('\n');
                signed.push(';');
            }
            canonical.push_str(name);
            canonical.push(':');
            signed.push_str(name);
        }
        push_trimmed(&mut canonical, value);
        previous = Some(name);
    }
    canonical.push_str("\n\n");
    canonical.push_str(&signed);
    canonical.push('\n');
    canonical.push_str(&hex::encode(Sha256::digest(body)));

    let credential_scope = format!(
        "{}/{}/{}/aws4_request",
        &date_time[..8],
        scope.region,
        scope.service
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{date_time}\n{credential_scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let key = v4::generate_signing_key(
        credentials.secret_access_key(),
        time,
        scope.region,
        scope.service,
    );
    let signature = v4::calculate_signature(key, string_to_sign.as_bytes());
    let authorization = format!(
        "AWS4-HMAC-SHA256 Credential={}/{credential_scope}, SignedHeaders={signed}, Signature={signature}",
        credentials.access_key_id()
    );

    let mut signing = Vec::with_capacity(3);
    signing.push(("x-amz-date", date_time));
    signing.push(("authorization", authorization));
    if let Some(token) = token {
        signing.push(("x-amz-security-token", token.to_string()));
    }
    Some(signing)
}

/// `value` without the spaces it starts or ends with, and with each run of spaces inside it
/// one space (SigV4 touches no other whitespace).
fn push_trimmed(canonical: &mut String, value: &str) {
    let value = value.trim_matches(' ');
    if !value.contains("  ") {
        canonical.push_str(value);
        return;
    }
    let mut space = false;
    for c in value.chars() {
        if c == ' ' && space {
            continue;
        }
        space = c == ' ';
        canonical.push(c);
    }
}
