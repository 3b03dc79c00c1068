//! The kubeconfig that points a client at the emulator: one cluster (the
//! plain-HTTP URL), one user with the bearer token, one context whose
//! default namespace is `default`.

use kube::config::{Kubeconfig, KubeconfigError};

const NAME: &str = "kube-emulator";

/// The kubeconfig as YAML text.
pub fn render(url: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {NAME}\n  cluster:\n    server: {url}\n\
         users:\n\
         - name: {NAME}\n  user:\n    token: {token}\n\
         contexts:\n\
         - name: {NAME}\n  context:\n    cluster: {NAME}\n    user: {NAME}\n    namespace: default\n\
         current-context: {NAME}\n",
        url = serde_json::Value::from(url),
        token = serde_json::Value::from(token),
    )
}

/// The kubeconfig as kube-rs reads it.
pub fn parse(text: &str) -> Result<Kubeconfig, KubeconfigError> {
    Kubeconfig::from_yaml(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reads_what_we_write() {
        let config = parse(&render("http://127.0.0.1:1234", "t0k")).unwrap();
        assert_eq!(config.current_context.as_deref(), Some(NAME));
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("http://127.0.0.1:1234"));
        assert_eq!(
            config.contexts[0]
                .context
                .as_ref()
                .unwrap()
                .namespace
                .as_deref(),
            Some("default")
        );
    }
}
