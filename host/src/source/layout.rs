//! The CNCF wasm artifact layout (`tag-security`'s "Wasm OCI Artifact" format, as `wkg`,
//! `oci-wasm` and ORAS write it): a manifest whose config is
//! `application/vnd.wasm.config.v0+json` and whose one layer is the component,
//! `application/wasm`. The older wasm-to-oci layer type is accepted when pulling.
//!
//! This module checks a pulled manifest against the layout (one wasm layer, a bounded size)
//! and builds the config and manifest `provider push` writes.

use std::collections::BTreeMap;

use oci_client::manifest::{OciDescriptor, OciImageManifest};
use serde::Serialize;

/// Media type of the config blob of a wasm artifact.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the one layer: the component's bytes.
pub const WASM_LAYER: &str = "application/wasm";
/// The layer media type of the older wasm-to-oci tool, still accepted when pulling.
pub const WASM_TO_OCI_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// Media type of the manifests `provider push` writes.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of an image index (a multi-platform image, a referrers list).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Manifest media types a provider pull accepts (a registry may answer with either).
pub const MANIFEST_TYPES: [&str; 2] = [
    OCI_MANIFEST,
    "application/vnd.docker.distribution.manifest.v2+json",
];
/// What the `artifact` commands accept besides: the indexes of multi-platform images (the
/// manager's own). Only they ask for an index, so a registry that answers by the Accept
/// header never hands a provider pull an index in place of a manifest.
pub const INDEX_TYPES: [&str; 2] = [
    OCI_INDEX,
    "application/vnd.docker.distribution.manifest.list.v2+json",
];
/// Largest component a pull accepts: 128 MiB, many times any real provider. A registry
/// cannot make the manager hold more (the layer's size is checked before it is read, and
/// the read stops there).
pub const MAX_COMPONENT_BYTES: u64 = 128 << 20;

/// The largest manifest read, from a registry or the cache: the size the OCI distribution
/// spec says registries should accept (a provider's manifest is about 1 KiB).
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The layer media types a refused manifest's error names.
const MEDIA_TYPES_QUOTED: usize = 4;

/// Annotation keys `provider push` sets (the OCI image-spec's pre-defined ones).
pub mod annotation {
    /// The version of the packaged software, e.g. `v1.2.0`.
    pub const VERSION: &str = "org.opencontainers.image.version";
    /// The URL of the source the component was built from.
    pub const SOURCE: &str = "org.opencontainers.image.source";
    /// When the artifact was made, RFC 3339.
    pub const CREATED: &str = "org.opencontainers.image.created";
}

/// What a manifest says about the artifact: enough for `provider inspect` and the checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManifestSummary {
    /// `sha256:…` of the manifest: the artifact's identity.
    pub digest: String,
    /// The manifest's own media type.
    pub media_type: String,
    /// The config blob's media type.
    pub config_media_type: String,
    /// The media types of the layers, in order.
    pub layer_media_types: Vec<String>,
    /// The manifest's annotations (version, source, created...).
    pub annotations: BTreeMap<String, String>,
}

/// Why a manifest is not a wasm provider artifact.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The manifest is not JSON of an image manifest.
    #[error("the manifest is not an OCI image manifest: {0}")]
    NotAManifest(String),
    /// Not exactly one layer, or a layer that is not wasm.
    #[error(
        "not a wasm component artifact: config {config}, layers [{}]; expected one {WASM_LAYER} layer (config {WASM_CONFIG})",
        layers.join(", ")
    )]
    NotWasm {
        /// The config's media type.
        config: String,
        /// The layers' media types.
        layers: Vec<String>,
    },
    /// The layer is larger than [`MAX_COMPONENT_BYTES`].
    #[error("the component layer is {size} bytes; at most {MAX_COMPONENT_BYTES} are accepted")]
    TooLarge {
        /// The size the manifest states.
        size: i64,
    },
}

/// The manifest `bytes` (whose digest is `digest`), checked against the layout; returns it
/// with the descriptor of its one wasm layer.
pub fn check_manifest(
    bytes: &[u8],
    digest: &str,
) -> Result<(ManifestSummary, OciDescriptor), LayoutError> {
    let manifest: OciImageManifest = serde_json::from_slice(bytes).map_err(|error| {
        let media_type = serde_json::from_slice::<serde_json::Value>(bytes)
            .ok()
            .and_then(|value| value["mediaType"].as_str().map(str::to_string));
        LayoutError::NotAManifest(match media_type {
            Some(index) if INDEX_TYPES.contains(&index.as_str()) => format!(
                "it is an image index ({index}), as a multi-platform container image is; a provider is one image manifest"
            ),
            _ => error.to_string(),
        })
    })?;
    let summary = ManifestSummary {
        digest: digest.to_string(),
        media_type: manifest
            .media_type
            .clone()
            .unwrap_or_else(|| OCI_MANIFEST.to_string()),
        config_media_type: manifest.config.media_type.clone(),
        layer_media_types: manifest
            .layers
            .iter()
            .map(|layer| layer.media_type.clone())
            .collect(),
        annotations: manifest
            .annotations
            .clone()
            .map(|a| a.into_iter().collect())
            .unwrap_or_default(),
    };
    let wasm_layer = |layer: &OciDescriptor| {
        layer.media_type == WASM_LAYER || layer.media_type == WASM_TO_OCI_LAYER
    };
    let layer = match manifest.layers.as_slice() {
        [layer] if wasm_layer(layer) => layer.clone(),
        _ => {
            // The registry's words, in an error: a few, each one short escaped line.
            let quoted = |media_type: &str| {
                crate::text::ellipsized(crate::text::escaped(media_type).into_owned(), 128)
            };
            let mut layers: Vec<String> = summary
                .layer_media_types
                .iter()
                .take(MEDIA_TYPES_QUOTED)
                .map(|media_type| quoted(media_type))
                .collect();
            if summary.layer_media_types.len() > MEDIA_TYPES_QUOTED {
                layers.push(format!(
                    "and {} more",
                    summary.layer_media_types.len() - MEDIA_TYPES_QUOTED
                ));
            }
            return Err(LayoutError::NotWasm {
                config: quoted(&summary.config_media_type),
                layers,
            });
        }
    };
    if layer.size < 0 || layer.size as u64 > MAX_COMPONENT_BYTES {
        return Err(LayoutError::TooLarge { size: layer.size });
    }
    Ok((summary, layer))
}

/// The interfaces a component imports and exports, recorded in the artifact's config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ComponentWorld {
    /// Imported interfaces, e.g. `wasi:http/outgoing-handler@0.2.6`.
    pub imports: Vec<String>,
    /// Exported interfaces, e.g. `wasm-ccm:provider/instances@0.1.0`.
    pub exports: Vec<String>,
}

/// The config blob of the CNCF layout (the fields `oci-wasm`'s `WasmConfig` reads).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WasmConfig<'a> {
    created: &'a str,
    architecture: &'static str,
    os: &'static str,
    layer_digests: [&'a str; 1],
    component: ComponentSection<'a>,
}

#[derive(Debug, Serialize)]
struct ComponentSection<'a> {
    exports: &'a [String],
    imports: &'a [String],
}

/// The blobs and manifest of one artifact, ready to push.
#[derive(Debug, Clone)]
pub struct Packed {
    /// The config blob and its digest.
    pub config: (Vec<u8>, String),
    /// The layer (the component) and its digest.
    pub layer: (Vec<u8>, String),
    /// The manifest's bytes as pushed, and their digest.
    pub manifest: (Vec<u8>, String),
}

/// Pack `wasm` in the CNCF layout with `annotations` on the manifest (`created` is also
/// the config's creation time).
pub fn pack(
    wasm: Vec<u8>,
    world: &ComponentWorld,
    created: &str,
    annotations: BTreeMap<String, String>,
) -> Packed {
    let layer_digest = sha256_digest(&wasm);
    let config = WasmConfig {
        created,
        architecture: "wasm",
        os: "wasip2",
        layer_digests: [&layer_digest],
        component: ComponentSection {
            exports: &world.exports,
            imports: &world.imports,
        },
    };
    let config = serde_json::to_vec(&config).unwrap_or_default();
    let config_digest = sha256_digest(&config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": WASM_CONFIG,
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": WASM_LAYER,
            "digest": layer_digest,
            "size": wasm.len(),
        }],
        "annotations": annotations,
    });
    let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
    let manifest_digest = sha256_digest(&manifest);
    Packed {
        config: (config, config_digest),
        layer: (wasm, layer_digest),
        manifest: (manifest, manifest_digest),
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// The digest of `bytes` with the algorithm `like` names (`sha512:…` or else sha256), so
/// content is checked against a digest of either algorithm the distribution spec allows.
pub fn digest_like(like: &str, bytes: &[u8]) -> String {
    use sha2::Digest;
    if like.starts_with("sha512:") {
        format!("sha512:{}", hex::encode(sha2::Sha512::digest(bytes)))
    } else {
        sha256_digest(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[(&str, i64)]) -> Vec<u8> {
        let layers: Vec<_> = layers
            .iter()
            .map(|(media_type, size)| {
                serde_json::json!({"mediaType": media_type, "digest": sha256_digest(b"x"), "size": size})
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": config, "digest": sha256_digest(b"{}"), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn one_wasm_layer_of_either_type_is_a_provider_artifact() {
        for layer in [WASM_LAYER, WASM_TO_OCI_LAYER] {
            let bytes = manifest(WASM_CONFIG, &[(layer, 10)]);
            let (summary, descriptor) = check_manifest(&bytes, "sha256:m").unwrap();
            assert_eq!(descriptor.size, 10);
            assert_eq!(summary.layer_media_types, [layer]);
            assert_eq!(summary.config_media_type, WASM_CONFIG);
        }
    }

    #[test]
    fn other_artifacts_are_refused_naming_their_media_types() {
        let image = manifest(
            "application/vnd.oci.image.config.v1+json",
            &[("application/vnd.oci.image.layer.v1.tar+gzip", 10)],
        );
        let error = check_manifest(&image, "sha256:m").unwrap_err().to_string();
        assert_eq!(
            error,
            "not a wasm component artifact: config application/vnd.oci.image.config.v1+json, \
             layers [application/vnd.oci.image.layer.v1.tar+gzip]; expected one application/wasm \
             layer (config application/vnd.wasm.config.v0+json)"
        );
        let two = manifest(WASM_CONFIG, &[(WASM_LAYER, 1), (WASM_LAYER, 1)]);
        assert!(matches!(
            check_manifest(&two, "d"),
            Err(LayoutError::NotWasm { layers, .. }) if layers.len() == 2
        ));
        // The registry's words, in an error: a few media types, each one short escaped line.
        let long = format!("\u{1b}[2J{}", "x".repeat(1000));
        let many: Vec<(&str, i64)> = vec![(long.as_str(), 1); 1000];
        let error = check_manifest(&manifest(&long, &many), "d")
            .unwrap_err()
            .to_string();
        assert!(
            error.len() < 1024 && !error.contains('\u{1b}') && error.contains("and 996 more"),
            "{error}"
        );
        assert!(matches!(
            check_manifest(b"{\"schemaVersion\": 2}", "d"),
            Err(LayoutError::NotAManifest(_))
        ));
        let index =
            serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []});
        let error = check_manifest(index.to_string().as_bytes(), "d").unwrap_err();
        assert_eq!(
            error.to_string(),
            "the manifest is not an OCI image manifest: it is an image index \
             (application/vnd.oci.image.index.v1+json), as a multi-platform container image is; \
             a provider is one image manifest"
        );
        let huge = manifest(WASM_CONFIG, &[(WASM_LAYER, 1 << 40)]);
        assert!(matches!(
            check_manifest(&huge, "d"),
            Err(LayoutError::TooLarge { .. })
        ));
    }

    #[test]
    fn digests_are_computed_with_the_algorithm_they_are_checked_against() {
        assert_eq!(digest_like("sha256:00", b"x"), sha256_digest(b"x"));
        let sha512 = digest_like("sha512:00", b"x");
        assert!(
            sha512.starts_with("sha512:") && sha512.len() == 7 + 128,
            "{sha512}"
        );
    }

    #[test]
    fn a_packed_artifact_passes_its_own_check() {
        let world = ComponentWorld {
            imports: vec!["wasi:http/outgoing-handler@0.2.6".into()],
            exports: vec!["wasm-ccm:provider/instances@0.1.0".into()],
        };
        let annotations = BTreeMap::from([(annotation::VERSION.to_string(), "v1".to_string())]);
        let packed = pack(
            b"\0asm".to_vec(),
            &world,
            "2026-11-24T00:00:00Z",
            annotations,
        );
        assert_eq!(packed.manifest.1, sha256_digest(&packed.manifest.0));
        let (summary, layer) = check_manifest(&packed.manifest.0, &packed.manifest.1).unwrap();
        assert_eq!(layer.digest, packed.layer.1);
        assert_eq!(summary.annotations[annotation::VERSION], "v1");
        let config: serde_json::Value = serde_json::from_slice(&packed.config.0).unwrap();
        assert_eq!(config["layerDigests"][0], packed.layer.1.as_str());
        assert_eq!(config["os"], "wasip2");
        assert_eq!(config["component"]["exports"][0], world.exports[0].as_str());
    }
}
