//! The kubeconfig that points a client at the emulator: one cluster (the
//! HTTPS URL and the emulator's CA), one user with the bearer token, one
//! context whose default namespace is `default`.

use kube::config::{Kubeconfig, KubeconfigError};

const NAME: &str = "kube-emulator";

/// The kubeconfig as YAML text.
pub fn render(url: &str, ca_pem: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {NAME}\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\n\
         users:\n\
         - name: {NAME}\n  user:\n    token: {token}\n\
         contexts:\n\
         - name: {NAME}\n  context:\n    cluster: {NAME}\n    user: {NAME}\n    namespace: default\n\
         current-context: {NAME}\n",
        url = serde_json::Value::from(url),
        ca = base64(ca_pem.as_bytes()),
        token = serde_json::Value::from(token),
    )
}

/// Standard base64 as a quoted YAML string, the encoding of a kubeconfig's
/// `*-data` fields. k8s-openapi's `ByteString` serialises exactly so, which
/// spares a base64 dependency.
fn base64(bytes: &[u8]) -> serde_json::Value {
    serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec()))
        .unwrap_or_else(|err| unreachable!("bytes serialise to a string: {err}"))
}

/// The kubeconfig as kube-rs reads it.
pub fn parse(text: &str) -> Result<Kubeconfig, KubeconfigError> {
    Kubeconfig::from_yaml(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn kube_reads_what_we_write() {
        let config = parse(&render("https://127.0.0.1:1234", CA, "t0k")).unwrap();
        assert_eq!(config.current_context.as_deref(), Some(NAME));
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:1234"));
        let ca = cluster.certificate_authority_data.as_deref().unwrap();
        let decoded: k8s_openapi::ByteString =
            serde_json::from_value(serde_json::Value::from(ca)).unwrap();
        assert_eq!(decoded.0, CA.as_bytes());
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
