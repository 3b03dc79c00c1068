//! Cosign-compatible signatures of provider artifacts: who published a version, checked
//! before it runs. This module owns the format (cosign's `SIGNATURE_SPEC.md`: tag-based
//! discovery, simple-signing payloads, keyed ECDSA P-256 signatures), the keys, the
//! operator's policy, and the verdict; [`super::Distribution`] fetches and pushes the
//! signature artifacts through the registry client and remembers verdicts in the cache.
//!
//! The signatures of the manifest `sha256:HEX` live in the same repository under the tag
//! `sha256-HEX.sig`: an OCI image manifest with one layer per signature, each layer a
//! simple-signing payload (`application/vnd.dev.cosign.simplesigning.v1+json`) whose
//! `critical.image.docker-manifest-digest` names the signed digest, with the base64 ASN.1
//! ECDSA signature over the payload's bytes in the layer annotation
//! `dev.cosignproject.cosign/signature`. `cosign sign --key` writes exactly this, and
//! `cosign verify --key` reads what `provider sign` writes.
//!
//! The crypto is ring's (ECDSA P-256 with SHA-256, ASN.1 signatures); only the format is
//! ours. The `sigstore` crate was measured and not taken: with only its `cosign` feature it
//! adds 140 packages (aws-lc's C build, a second oci-client, OpenID Connect, an HTTP/3
//! stack), because `cosign` requires `fulcio` and `rekor`. Keyless signatures (Fulcio
//! certificates, Rekor entries) are therefore not verified: a version needs a signature by
//! one of the keys the operator configured.
//!
//! Everything read from a registry is untrusted and bounded: the signature manifest
//! ([`MAX_SIGNATURE_MANIFEST_BYTES`]), its layers ([`MAX_SIGNATURES`]) and each payload
//! ([`MAX_PAYLOAD_BYTES`]).

use std::fmt;

use base64::Engine;
use oci_client::manifest::OciImageManifest;
use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_ASN1, ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair,
    UnparsedPublicKey,
};
use serde::{Deserialize, Serialize};
use x509_parser::oid_registry::{OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY};
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

use super::layout::{OCI_MANIFEST, sha256_digest};

/// The media type of a signature layer: a simple-signing payload.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature of the payload.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// `critical.type` of a cosign image signature.
pub const SIGNATURE_TYPE: &str = "cosign container image signature";
/// The config media type cosign writes on a signature manifest.
pub const IMAGE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Largest signature manifest accepted: 256 KiB, room for [`MAX_SIGNATURES`] layers with
/// their annotations many times over.
pub const MAX_SIGNATURE_MANIFEST_BYTES: usize = 256 << 10;
/// Most signatures (layers) one signature manifest may carry; more is refused, and
/// `provider sign` will not append past it.
pub const MAX_SIGNATURES: usize = 64;
/// Largest payload read: 16 KiB (cosign's are about 250 bytes, plus optional claims).
pub const MAX_PAYLOAD_BYTES: i64 = 16 << 10;
/// Largest key file read.
pub const MAX_KEY_BYTES: usize = 64 << 10;

/// DER prefix of a P-256 SubjectPublicKeyInfo (id-ecPublicKey, prime256v1, a 66-byte bit
/// string): with the 65-byte uncompressed point it is the key `cosign.pub` holds.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The tag the signatures of `digest` live under: `sha256-HEX.sig`.
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// Why a key cannot be used. The message names the key (its file or Secret key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not PEM, or not the kind of PEM expected.
    #[error("{name}: {problem}")]
    Unusable {
        /// The file or Secret/ConfigMap key it came from.
        name: String,
        /// What is wrong.
        problem: String,
    },
}

fn unusable(name: &str, problem: impl Into<String>) -> KeyError {
    KeyError::Unusable {
        name: name.to_string(),
        problem: problem.into(),
    }
}

/// The one PEM block of `pem`: its label and contents.
fn pem_block(name: &str, pem: &[u8]) -> Result<(String, Vec<u8>), KeyError> {
    if pem.len() > MAX_KEY_BYTES {
        return Err(unusable(
            name,
            format!(
                "{} bytes; a PEM key is far smaller (at most {MAX_KEY_BYTES} are read)",
                pem.len()
            ),
        ));
    }
    let (block, _) = x509_parser::pem::Pem::read(std::io::Cursor::new(pem))
        .map_err(|error| unusable(name, format!("not a PEM file ({error})")))?;
    Ok((block.label, block.contents))
}

/// A public key a signature may be verified with: an ECDSA P-256 key as `cosign
/// generate-key-pair` writes `cosign.pub` (PEM `PUBLIC KEY`, a SubjectPublicKeyInfo).
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    name: String,
    /// The uncompressed point.
    point: Vec<u8>,
    fingerprint: String,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for PublicKey {
    /// `NAME (sha256:…)`: how messages name a key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.fingerprint)
    }
}

impl PublicKey {
    /// The key in `pem`, named `name` (its file, or `Secret ns/name key k`) in messages.
    pub fn from_pem(name: impl Into<String>, pem: &[u8]) -> Result<PublicKey, KeyError> {
        let name = name.into();
        let (label, der) = pem_block(&name, pem)?;
        if label != "PUBLIC KEY" {
            return Err(unusable(
                &name,
                format!(
                    "a PEM {label:?}; expected a \"PUBLIC KEY\" (an ECDSA P-256 public key, as cosign.pub or `openssl pkey -pubout` writes it)"
                ),
            ));
        }
        let (rest, spki) = SubjectPublicKeyInfo::from_der(&der)
            .map_err(|error| unusable(&name, format!("not a SubjectPublicKeyInfo ({error})")))?;
        if !rest.is_empty() {
            return Err(unusable(&name, "trailing bytes after the public key"));
        }
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|parameters| parameters.as_oid().ok());
        if spki.algorithm.algorithm != OID_KEY_TYPE_EC_PUBLIC_KEY || curve != Some(OID_EC_P256) {
            let curve = curve.map_or(String::new(), |oid| format!(" on {oid}"));
            return Err(unusable(
                &name,
                format!(
                    "the key is {}{curve}; only ECDSA P-256 keys (id-ecPublicKey on prime256v1, 1.2.840.10045.3.1.7) are supported, as cosign generate-key-pair makes them",
                    spki.algorithm.algorithm
                ),
            ));
        }
        let point = spki.subject_public_key.data.to_vec();
        if point.len() != 65 || point[0] != 4 {
            return Err(unusable(
                &name,
                "the P-256 point is not 65 bytes in uncompressed form",
            ));
        }
        Ok(PublicKey::from_point(name, point))
    }

    fn from_point(name: String, point: Vec<u8>) -> PublicKey {
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(&point);
        PublicKey {
            name,
            point,
            fingerprint: sha256_digest(&spki),
        }
    }

    /// Where the key came from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sha256:` of the key's DER SubjectPublicKeyInfo: the same key has the same
    /// fingerprint wherever it is read from (`openssl pkey -pubin -outform DER | sha256sum`).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Whether `signature` (ASN.1 ECDSA) is this key's over `payload`.
    pub fn verifies(&self, payload: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, &self.point)
            .verify(payload, signature)
            .is_ok()
    }
}

/// A private key `provider sign` signs with: PKCS#8 PEM (`PRIVATE KEY`) of an ECDSA P-256
/// key, as `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` writes it.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    public: PublicKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.public)
    }
}

impl SigningKey {
    /// The key in `pem`, named `name` in messages.
    pub fn from_pem(name: impl Into<String>, pem: &[u8]) -> Result<SigningKey, KeyError> {
        let name = name.into();
        let (label, der) = pem_block(&name, pem)?;
        match label.as_str() {
            "PRIVATE KEY" => {}
            "ENCRYPTED SIGSTORE PRIVATE KEY" | "ENCRYPTED COSIGN PRIVATE KEY" => {
                return Err(unusable(
                    &name,
                    "a cosign-encrypted key, which wasm-ccm does not decrypt; sign with a PKCS#8 key (openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out key.pem), which `cosign import-key-pair --key key.pem` also turns into a cosign key",
                ));
            }
            "EC PRIVATE KEY" => {
                return Err(unusable(
                    &name,
                    "a SEC1 \"EC PRIVATE KEY\"; convert it to PKCS#8 with openssl pkcs8 -topk8 -nocrypt -in KEY -out key.pem",
                ));
            }
            other => {
                return Err(unusable(
                    &name,
                    format!("a PEM {other:?}; expected a \"PRIVATE KEY\" (PKCS#8, ECDSA P-256)"),
                ));
            }
        }
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &der, &SystemRandom::new())
            .map_err(|error| {
                unusable(
                    &name,
                    format!(
                        "not an ECDSA P-256 private key in PKCS#8 ({error}); only P-256 keys are supported"
                    ),
                )
            })?;
        let public = PublicKey::from_point(name, pair.public_key().as_ref().to_vec());
        Ok(SigningKey { pair, public })
    }

    /// The public half.
    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    /// The ASN.1 ECDSA signature of `payload`.
    pub fn sign(&self, payload: &[u8]) -> Result<Vec<u8>, KeyError> {
        self.pair
            .sign(&SystemRandom::new(), payload)
            .map(|signature| signature.as_ref().to_vec())
            .map_err(|_| unusable(&self.public.name, "signing failed"))
    }
}

/// Keys one of which must have signed a version: the operator's
/// (`--provider-signature-key`) or a CloudProvider's (`spec.signature.keys`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKeys {
    /// Where they are configured, for messages: the flag or the field.
    pub source: String,
    /// The keys.
    pub keys: Vec<PublicKey>,
}

impl fmt::Display for TrustedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(ToString::to_string).collect();
        write!(f, "{} [{}]", self.source, keys.join(", "))
    }
}

/// What a version must carry to run: a valid signature by a key of *each* set. No sets,
/// no requirement. The operator's flag and a CloudProvider's spec each add a set, so a
/// spec can tighten the operator's policy but never loosen it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignaturePolicy {
    /// The sets, each of which must be met.
    pub required: Vec<TrustedKeys>,
}

impl SignaturePolicy {
    /// Whether any signature is required.
    pub fn is_required(&self) -> bool {
        self.required.iter().any(|set| !set.keys.is_empty())
    }

    /// This policy and `keys` too (nothing is added for no keys).
    pub fn and(mut self, keys: TrustedKeys) -> SignaturePolicy {
        if !keys.keys.is_empty() {
            self.required.push(keys);
        }
        self
    }

    /// Whether the keys whose fingerprints are in `verified` meet every set.
    pub fn met_by(&self, verified: &[String]) -> bool {
        self.required.iter().all(|set| {
            set.keys.is_empty()
                || set
                    .keys
                    .iter()
                    .any(|key| verified.iter().any(|f| f == key.fingerprint()))
        })
    }

    /// The sets, with their sources and keys, for messages.
    pub fn describe(&self) -> String {
        let sets: Vec<String> = self.required.iter().map(ToString::to_string).collect();
        sets.join(" and ")
    }
}

/// The simple-signing payload cosign signs (`containers-signature(5)`'s JSON format).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Payload {
    /// What the signature is about.
    pub critical: Critical,
    /// Optional claims; cosign writes `null`.
    #[serde(default)]
    pub optional: Option<serde_json::Value>,
}

/// The signed claims.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Critical {
    /// The repository signed (ignored when verifying, as cosign does).
    pub identity: PayloadIdentity,
    /// The manifest signed.
    pub image: PayloadImage,
    /// [`SIGNATURE_TYPE`].
    #[serde(rename = "type")]
    pub type_: String,
}

/// `critical.identity`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PayloadIdentity {
    /// `REGISTRY/REPOSITORY`.
    #[serde(rename = "docker-reference")]
    pub docker_reference: String,
}

/// `critical.image`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PayloadImage {
    /// The manifest digest signed. (cosign's spec once spelled it `Docker-manifest-digest`.)
    #[serde(rename = "docker-manifest-digest", alias = "Docker-manifest-digest")]
    pub docker_manifest_digest: String,
}

impl Payload {
    /// The payload `provider sign` signs for `digest` of `repository` (`REGISTRY/REPO`).
    pub fn new(repository: &str, digest: &str) -> Payload {
        Payload {
            critical: Critical {
                identity: PayloadIdentity {
                    docker_reference: repository.to_string(),
                },
                image: PayloadImage {
                    docker_manifest_digest: digest.to_string(),
                },
                type_: SIGNATURE_TYPE.to_string(),
            },
            optional: None,
        }
    }

    /// The bytes signed, as cosign writes them.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// One signature read from a signature manifest.
#[derive(Debug, Clone)]
pub struct Signature {
    /// The payload's bytes (what was signed), if it could be read.
    pub payload: Result<Vec<u8>, String>,
    /// The decoded signature, if the annotation was there and base64.
    pub signature: Result<Vec<u8>, String>,
}

impl Signature {
    /// The digest the payload claims, if it is a cosign image signature.
    pub fn claimed_digest(&self) -> Option<String> {
        let payload: Payload = serde_json::from_slice(self.payload.as_ref().ok()?).ok()?;
        (payload.critical.type_ == SIGNATURE_TYPE)
            .then_some(payload.critical.image.docker_manifest_digest)
    }

    /// The repository the payload names (for `provider inspect`).
    pub fn claimed_repository(&self) -> Option<String> {
        let payload: Payload = serde_json::from_slice(self.payload.as_ref().ok()?).ok()?;
        Some(payload.critical.identity.docker_reference)
    }

    /// Whether `key` signed this payload.
    pub fn verifies_with(&self, key: &PublicKey) -> bool {
        match (&self.payload, &self.signature) {
            (Ok(payload), Ok(signature)) => key.verifies(payload, signature),
            _ => false,
        }
    }
}

/// A simple-signing layer of a signature manifest.
#[derive(Debug, Clone)]
pub struct SignatureLayer {
    /// The layer: where its payload is, and its size.
    pub descriptor: oci_client::manifest::OciDescriptor,
    /// Its decoded signature, if the annotation was there and base64.
    pub signature: Result<Vec<u8>, String>,
}

/// The layers of a signature manifest that may be signatures, checked against the bounds.
pub fn signature_layers(manifest: &[u8]) -> Result<Vec<SignatureLayer>, String> {
    if manifest.len() > MAX_SIGNATURE_MANIFEST_BYTES {
        return Err(format!(
            "the signature manifest is {} bytes; at most {MAX_SIGNATURE_MANIFEST_BYTES} are read",
            manifest.len()
        ));
    }
    let manifest: OciImageManifest = serde_json::from_slice(manifest)
        .map_err(|error| format!("the signature manifest is not an OCI image manifest: {error}"))?;
    if manifest.layers.len() > MAX_SIGNATURES {
        return Err(format!(
            "the signature manifest has {} layers; at most {MAX_SIGNATURES} signatures are read",
            manifest.layers.len()
        ));
    }
    Ok(manifest
        .layers
        .into_iter()
        .filter(|layer| layer.media_type == SIMPLE_SIGNING)
        .map(|layer| {
            let signature = layer
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(SIGNATURE_ANNOTATION))
                .ok_or_else(|| format!("layer {} has no {SIGNATURE_ANNOTATION}", layer.digest))
                .and_then(|text| {
                    base64::engine::general_purpose::STANDARD
                        .decode(text.trim())
                        .map_err(|error| {
                            format!(
                                "layer {}: the signature is not base64: {error}",
                                layer.digest
                            )
                        })
                });
            SignatureLayer {
                descriptor: layer,
                signature,
            }
        })
        .collect())
}

/// What the policy was checked against, and what passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The fingerprints of the policy's keys that signed the digest.
    pub keys: Vec<String>,
    /// Whether the verdict came from the cache (no request, no signature checked).
    pub cached: bool,
}

/// Why a version is refused by the signature policy. The message names the reference, the
/// digest and the keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No signature claims this digest (no signature artifact, or none for this digest).
    #[error("{reference} ({digest}): no signature by {keys}: {detail}")]
    Missing {
        /// The reference as given.
        reference: String,
        /// The manifest digest checked.
        digest: String,
        /// The keys required, with their sources and fingerprints.
        keys: String,
        /// What was found.
        detail: String,
    },
    /// Signatures claim this digest, but none verifies with a required key.
    #[error("{reference} ({digest}): no valid signature by {keys}: {detail}")]
    Invalid {
        /// The reference as given.
        reference: String,
        /// The manifest digest checked.
        digest: String,
        /// The keys required, with their sources and fingerprints.
        keys: String,
        /// What was found.
        detail: String,
    },
    /// The signature artifact could not be read (a registry failure: may pass).
    #[error("{reference} ({digest}): cannot read the signatures ({tag}): {error}")]
    Unavailable {
        /// The reference as given.
        reference: String,
        /// The manifest digest checked.
        digest: String,
        /// The signature tag.
        tag: String,
        /// What went wrong.
        error: String,
    },
}

impl SignatureError {
    /// `SignatureMissing`, `SignatureInvalid`, or `FetchFailed`: the condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            SignatureError::Missing { .. } => "SignatureMissing",
            SignatureError::Invalid { .. } => "SignatureInvalid",
            SignatureError::Unavailable { .. } => "FetchFailed",
        }
    }

    /// The refusal of a `file://` provider under a policy: a file has no signatures.
    pub fn file(reference: &str, digest: &str, policy: &SignaturePolicy) -> SignatureError {
        SignatureError::Missing {
            reference: reference.to_string(),
            digest: digest.to_string(),
            keys: policy.describe(),
            detail: "a file:// provider has no signature artifact; publish it to a registry and sign it (wasm-ccm provider push --sign-key)".into(),
        }
    }
}

/// Check `signatures` (read from the signature artifact of `digest`; `None` when there is
/// none) against `policy`.
pub fn verify(
    policy: &SignaturePolicy,
    reference: &str,
    digest: &str,
    signatures: Option<&[Signature]>,
) -> Result<Verified, SignatureError> {
    let tag = signature_tag(digest);
    let Some(signatures) = signatures else {
        return Err(SignatureError::Missing {
            reference: reference.to_string(),
            digest: digest.to_string(),
            keys: policy.describe(),
            detail: format!("the repository has no signature artifact (tag {tag})"),
        });
    };
    let claiming: Vec<&Signature> = signatures
        .iter()
        .filter(|signature| signature.claimed_digest().as_deref() == Some(digest))
        .collect();
    let mut verified: Vec<String> = Vec::new();
    for set in &policy.required {
        for key in &set.keys {
            if claiming
                .iter()
                .any(|signature| signature.verifies_with(key))
                && !verified.iter().any(|f| f == key.fingerprint())
            {
                verified.push(key.fingerprint().to_string());
            }
        }
    }
    if policy.met_by(&verified) {
        return Ok(Verified {
            keys: verified,
            cached: false,
        });
    }
    let unmet: Vec<String> = policy
        .required
        .iter()
        .filter(|set| {
            !set.keys
                .iter()
                .any(|key| verified.iter().any(|f| f == key.fingerprint()))
        })
        .map(ToString::to_string)
        .collect();
    let keys = unmet.join(" and ");
    if claiming.is_empty() {
        return Err(SignatureError::Missing {
            reference: reference.to_string(),
            digest: digest.to_string(),
            keys,
            detail: format!(
                "{} signature(s) under tag {tag}, none for this digest",
                signatures.len()
            ),
        });
    }
    let problems: Vec<String> = claiming
        .iter()
        .filter_map(|signature| {
            signature
                .payload
                .as_ref()
                .err()
                .or(signature.signature.as_ref().err())
                .cloned()
        })
        .take(3)
        .collect();
    let problems = if problems.is_empty() {
        String::new()
    } else {
        format!(" ({})", problems.join("; "))
    };
    Err(SignatureError::Invalid {
        reference: reference.to_string(),
        digest: digest.to_string(),
        keys,
        detail: format!(
            "{} signature(s) under tag {tag} claim this digest, none verifies with these keys{problems}",
            claiming.len()
        ),
    })
}

/// The config blob of a signature manifest with `layers`, as cosign (go-containerregistry's
/// empty image with layers appended) writes it.
pub fn signature_config(layer_digests: &[String]) -> Vec<u8> {
    let history: Vec<serde_json::Value> = layer_digests
        .iter()
        .map(|_| serde_json::json!({"created": "0001-01-01T00:00:00Z"}))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": history,
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": layer_digests},
        "config": {},
    }))
    .unwrap_or_default()
}

/// The signature manifest with `layers` (each a descriptor JSON) and the config `config`.
pub fn signature_manifest(config: &[u8], layers: &[serde_json::Value]) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": IMAGE_CONFIG,
            "size": config.len(),
            "digest": sha256_digest(config),
        },
        "layers": layers,
    }))
    .unwrap_or_default()
}

/// The layer descriptor of a signature: its payload and base64 signature.
pub fn signature_layer(payload: &[u8], signature: &[u8]) -> serde_json::Value {
    serde_json::json!({
        "mediaType": SIMPLE_SIGNING,
        "size": payload.len(),
        "digest": sha256_digest(payload),
        "annotations": {
            SIGNATURE_ANNOTATION: base64::engine::general_purpose::STANDARD.encode(signature),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key pair made by ring, as PKCS#8 and SPKI PEM.
    fn key_pair(name: &str) -> (SigningKey, PublicKey) {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &SystemRandom::new())
                .unwrap();
        let private = pem("PRIVATE KEY", pkcs8.as_ref());
        let signing = SigningKey::from_pem(format!("{name}.key"), private.as_bytes()).unwrap();
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(signing.pair.public_key().as_ref());
        let public =
            PublicKey::from_pem(format!("{name}.pub"), pem("PUBLIC KEY", &spki).as_bytes())
                .unwrap();
        (signing, public)
    }

    fn pem(label: &str, der: &[u8]) -> String {
        let text = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = text
            .as_bytes()
            .chunks(64)
            .map(|chunk| std::str::from_utf8(chunk).unwrap())
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    }

    const DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000001";

    fn signed(key: &SigningKey, digest: &str) -> Signature {
        let payload = Payload::new("127.0.0.1:5000/p/simcloud", digest).to_bytes();
        let signature = key.sign(&payload).unwrap();
        Signature {
            payload: Ok(payload),
            signature: Ok(signature),
        }
    }

    fn policy(keys: &[&PublicKey]) -> SignaturePolicy {
        SignaturePolicy::default().and(TrustedKeys {
            source: "--provider-signature-key".into(),
            keys: keys.iter().map(|key| (*key).clone()).collect(),
        })
    }

    #[test]
    fn a_signature_round_trips_in_the_cosign_layout() {
        let (key, public) = key_pair("release");
        assert_eq!(key.public_key().fingerprint(), public.fingerprint());
        let payload = Payload::new("127.0.0.1:5000/p/simcloud", DIGEST).to_bytes();
        assert_eq!(
            String::from_utf8(payload.clone()).unwrap(),
            format!(
                r#"{{"critical":{{"identity":{{"docker-reference":"127.0.0.1:5000/p/simcloud"}},"image":{{"docker-manifest-digest":"{DIGEST}"}},"type":"cosign container image signature"}},"optional":null}}"#
            )
        );
        let signature = key.sign(&payload).unwrap();
        let layer = signature_layer(&payload, &signature);
        let config = signature_config(&[sha256_digest(&payload)]);
        let manifest = signature_manifest(&config, &[layer]);
        let layers = signature_layers(&manifest).unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0].descriptor.digest, sha256_digest(&payload));
        let read = Signature {
            payload: Ok(payload),
            signature: layers[0].signature.clone(),
        };
        assert_eq!(read.claimed_digest().as_deref(), Some(DIGEST));
        let verified = verify(&policy(&[&public]), "oci://r/p:v1", DIGEST, Some(&[read])).unwrap();
        assert_eq!(verified.keys, vec![public.fingerprint().to_string()]);
        assert_eq!(
            signature_tag(DIGEST),
            format!("sha256-{}.sig", &DIGEST[7..])
        );
    }

    #[test]
    fn a_tampered_payload_or_another_key_is_invalid_and_another_digest_is_missing() {
        let (key, public) = key_pair("release");
        let (_, other) = key_pair("other");
        let good = signed(&key, DIGEST);

        let mut tampered = good.clone();
        let mut bytes = tampered.payload.clone().unwrap();
        bytes.extend_from_slice(b" ");
        tampered.payload = Ok(bytes);
        let error = verify(
            &policy(&[&public]),
            "oci://r/p:v1",
            DIGEST,
            Some(&[tampered]),
        )
        .unwrap_err();
        assert_eq!(error.reason(), "SignatureInvalid", "{error}");

        let error = verify(
            &policy(&[&other]),
            "oci://r/p:v1",
            DIGEST,
            Some(std::slice::from_ref(&good)),
        )
        .unwrap_err();
        assert_eq!(error.reason(), "SignatureInvalid");
        let text = error.to_string();
        assert!(text.contains("other.pub (sha256:"), "names the key: {text}");
        assert!(text.contains(DIGEST), "names the digest: {text}");

        let elsewhere = signed(
            &key,
            "sha256:0000000000000000000000000000000000000000000000000000000000000002",
        );
        let error = verify(
            &policy(&[&public]),
            "oci://r/p:v1",
            DIGEST,
            Some(&[elsewhere]),
        )
        .unwrap_err();
        assert_eq!(error.reason(), "SignatureMissing", "{error}");
        let error = verify(&policy(&[&public]), "oci://r/p:v1", DIGEST, None).unwrap_err();
        assert_eq!(error.reason(), "SignatureMissing");
        assert!(error.to_string().contains(".sig"), "{error}");
    }

    #[test]
    fn every_key_set_must_be_met_so_a_spec_tightens_the_flag() {
        let (operator, operator_pub) = key_pair("operator");
        let (_, spec_pub) = key_pair("spec");
        let policy = policy(&[&operator_pub]).and(TrustedKeys {
            source: "spec.signature.keys".into(),
            keys: vec![spec_pub.clone()],
        });
        let error = verify(
            &policy,
            "oci://r/p:v1",
            DIGEST,
            Some(&[signed(&operator, DIGEST)]),
        )
        .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("spec.signature.keys [spec.pub"), "{text}");
        assert!(!text.contains("operator.pub"), "only the unmet set: {text}");
        assert!(policy.met_by(&[
            operator_pub.fingerprint().to_string(),
            spec_pub.fingerprint().to_string()
        ]));
        assert!(!SignaturePolicy::default().is_required());
    }

    #[test]
    fn keys_other_than_ecdsa_p256_are_refused_naming_the_file() {
        let error = PublicKey::from_pem("k.pub", b"not pem").unwrap_err();
        assert!(
            error.to_string().starts_with("k.pub: not a PEM file"),
            "{error}"
        );
        // An Ed25519 SubjectPublicKeyInfo (OID 1.3.101.112).
        let mut ed25519 = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        ed25519.extend_from_slice(&[7; 32]);
        let error = PublicKey::from_pem("ed.pub", pem("PUBLIC KEY", &ed25519).as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("1.3.101.112") && error.contains("P-256"),
            "{error}"
        );
        // A P-384 key: id-ecPublicKey on secp384r1.
        let mut p384 = vec![
            0x30, 0x76, 0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06,
            0x05, 0x2b, 0x81, 0x04, 0x00, 0x22, 0x03, 0x62, 0x00, 0x04,
        ];
        p384.extend_from_slice(&[1; 96]);
        let error = PublicKey::from_pem("p384.pub", pem("PUBLIC KEY", &p384).as_bytes())
            .unwrap_err()
            .to_string();
        assert!(error.contains("1.3.132.0.34"), "{error}");
        let error = SigningKey::from_pem(
            "cosign.key",
            pem("ENCRYPTED SIGSTORE PRIVATE KEY", b"x").as_bytes(),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("cosign-encrypted"), "{error}");
        let (_, public) = key_pair("k");
        let error = SigningKey::from_pem(
            "k.pub",
            pem("PUBLIC KEY", &{
                let mut spki = P256_SPKI_PREFIX.to_vec();
                spki.extend_from_slice(&public.point);
                spki
            })
            .as_bytes(),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("expected a \"PRIVATE KEY\""), "{error}");
    }

    #[test]
    fn signature_manifests_are_bounded() {
        let big = vec![b' '; MAX_SIGNATURE_MANIFEST_BYTES + 1];
        assert!(signature_layers(&big).unwrap_err().contains("at most"));
        let layers: Vec<serde_json::Value> = (0..=MAX_SIGNATURES)
            .map(|i| signature_layer(format!("{i}").as_bytes(), b"s"))
            .collect();
        let manifest = signature_manifest(b"{}", &layers);
        assert!(
            signature_layers(&manifest)
                .unwrap_err()
                .contains(&format!("at most {MAX_SIGNATURES} signatures"))
        );
        let manifest = signature_manifest(b"{}", &layers[..2]);
        assert_eq!(signature_layers(&manifest).unwrap().len(), 2);
    }
}
