//! The secure port's delegated authentication and authorisation flags, upstream's names and
//! defaults (`DelegatingAuthenticationOptions`, `DelegatingAuthorizationOptions`): the
//! subset that applies when the manager reviews callers with its own client (no
//! `--authentication-kubeconfig`, `--authorization-kubeconfig`, `--requestheader-*` or
//! ConfigMap lookup of the client CA).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::units::parse_duration_or_zero;
use crate::serving::AuthConfig;

/// Who may read the secure port.
#[derive(Debug, Args)]
pub struct ServingAuthFlags {
    /// Paths answered without authentication or authorisation (a trailing * matches a
    /// prefix); every other request needs a token or client certificate the API server
    /// vouches for, and RBAC allowing its verb on the path (get on /metrics).
    #[arg(
        long,
        value_name = "PATH[,PATH]",
        value_delimiter = ',',
        // One string, split on the delimiter as given values are, so --help shows it as it
        // is typed (clap joins several defaults with spaces).
        default_value = "/healthz,/readyz,/livez",
        help_heading = "Serving"
    )]
    pub authorization_always_allow_paths: Vec<String>,

    /// CA bundle (PEM) that client certificates are verified against; such a certificate
    /// authenticates its subject's common name, in its organizations as groups.
    #[arg(long, value_name = "FILE", help_heading = "Serving")]
    pub client_ca_file: Option<PathBuf>,

    /// How long a token the API server reviewed (TokenReview) is trusted; 0 asks every time.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration_or_zero, help_heading = "Serving")]
    pub authentication_token_webhook_cache_ttl: Duration,

    /// How long an allowed SubjectAccessReview is remembered; 0 asks every time.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration_or_zero, help_heading = "Serving")]
    pub authorization_webhook_cache_authorized_ttl: Duration,

    /// How long a refused SubjectAccessReview is remembered; 0 asks every time.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration_or_zero, help_heading = "Serving")]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
}

impl ServingAuthFlags {
    /// The configuration these flags describe; the paths are checked where serving starts.
    pub fn config(&self) -> AuthConfig {
        AuthConfig {
            always_allow_paths: self.authorization_always_allow_paths.clone(),
            client_ca_file: self.client_ca_file.clone(),
            token_ttl: self.authentication_token_webhook_cache_ttl,
            authorized_ttl: self.authorization_webhook_cache_authorized_ttl,
            unauthorized_ttl: self.authorization_webhook_cache_unauthorized_ttl,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use crate::cli::Cli;
    use crate::serving::DEFAULT_ALWAYS_ALLOW_PATHS;

    #[test]
    fn the_always_allowed_paths_default_is_the_servings_and_shown_as_typed() {
        let cli = Cli::try_parse_from(["wasm-ccm"]).unwrap();
        assert_eq!(
            cli.run.serving_auth.authorization_always_allow_paths,
            DEFAULT_ALWAYS_ALLOW_PATHS
        );
        let help = Cli::command().render_help().to_string();
        assert!(
            help.contains("[default: /healthz,/readyz,/livez]"),
            "{help}"
        );
    }
}
