//! Request bodies in Kubernetes' protobuf form
//! (`application/vnd.kubernetes.protobuf`), which client-go's typed
//! clients send by default since v1.35 (Helm 4 stores its releases in
//! Secrets through one): the `k8s\0` envelope (`runtime.Unknown`), the
//! protobuf wire format, and the messages such a client writes to the
//! emulator — Secrets, ConfigMaps and `DeleteOptions` — read into the JSON
//! the rest of the emulator handles, as Go would encode the decoded struct
//! (empty fields omitted, bytes in base64, times in RFC 3339).

use k8s_openapi::ByteString;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NoEnvelope,
    #[error("proto: {0}")]
    Malformed(&'static str),
    /// A kind the emulator cannot read in protobuf (JSON works).
    #[error("{api_version} {kind} in protobuf is not supported by kube-emulator")]
    Unsupported { api_version: String, kind: String },
}

/// The type of a field's value.
#[derive(Debug, Clone, Copy)]
enum Kind {
    String,
    Int,
    Bool,
    Time,
    Message(&'static [Field]),
    StringMap,
    BytesMap,
    Strings,
    Messages(&'static [Field]),
}

/// One field of a message: its number, JSON name and type.
#[derive(Debug, Clone, Copy)]
struct Field(u64, &'static str, Kind);

const OWNER_REFERENCE: &[Field] = &[
    Field(1, "kind", Kind::String),
    Field(3, "name", Kind::String),
    Field(4, "uid", Kind::String),
    Field(5, "apiVersion", Kind::String),
    Field(6, "controller", Kind::Bool),
    Field(7, "blockOwnerDeletion", Kind::Bool),
];

const OBJECT_META: &[Field] = &[
    Field(1, "name", Kind::String),
    Field(2, "generateName", Kind::String),
    Field(3, "namespace", Kind::String),
    Field(4, "selfLink", Kind::String),
    Field(5, "uid", Kind::String),
    Field(6, "resourceVersion", Kind::String),
    Field(7, "generation", Kind::Int),
    Field(8, "creationTimestamp", Kind::Time),
    Field(9, "deletionTimestamp", Kind::Time),
    Field(10, "deletionGracePeriodSeconds", Kind::Int),
    Field(11, "labels", Kind::StringMap),
    Field(12, "annotations", Kind::StringMap),
    Field(13, "ownerReferences", Kind::Messages(OWNER_REFERENCE)),
    Field(14, "finalizers", Kind::Strings),
];

const SECRET: &[Field] = &[
    Field(1, "metadata", Kind::Message(OBJECT_META)),
    Field(2, "data", Kind::BytesMap),
    Field(3, "type", Kind::String),
    Field(4, "stringData", Kind::StringMap),
    Field(5, "immutable", Kind::Bool),
];

const CONFIG_MAP: &[Field] = &[
    Field(1, "metadata", Kind::Message(OBJECT_META)),
    Field(2, "data", Kind::StringMap),
    Field(3, "binaryData", Kind::BytesMap),
    Field(4, "immutable", Kind::Bool),
];

const PRECONDITIONS: &[Field] = &[
    Field(1, "uid", Kind::String),
    Field(2, "resourceVersion", Kind::String),
];

const DELETE_OPTIONS: &[Field] = &[
    Field(1, "gracePeriodSeconds", Kind::Int),
    Field(2, "preconditions", Kind::Message(PRECONDITIONS)),
    Field(3, "orphanDependents", Kind::Bool),
    Field(4, "propagationPolicy", Kind::String),
    Field(5, "dryRun", Kind::Strings),
    Field(
        6,
        "ignoreStoreReadErrorWithClusterBreakingPotential",
        Kind::Bool,
    ),
];

/// The messages the emulator reads, by the envelope's type.
fn schema(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    match (api_version, kind) {
        ("v1", "Secret") => Some(SECRET),
        ("v1", "ConfigMap") => Some(CONFIG_MAP),
        (_, "DeleteOptions") => Some(DELETE_OPTIONS),
        _ => None,
    }
}

/// Whether a `Content-Type` is the protobuf one.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().unwrap_or("").trim() == MEDIA_TYPE
}

/// Reads an enveloped object into JSON with its `apiVersion` and `kind`.
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let message = body.strip_prefix(b"k8s\0").ok_or(DecodeError::NoEnvelope)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for item in Reader(message) {
        match item? {
            (1, Wire::Bytes(type_meta)) => {
                for item in Reader(type_meta) {
                    match item? {
                        (1, Wire::Bytes(v)) => api_version = text(v)?,
                        (2, Wire::Bytes(k)) => kind = text(k)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(bytes)) => raw = bytes,
            _ => {}
        }
    }
    let fields = schema(&api_version, &kind).ok_or_else(|| DecodeError::Unsupported {
        api_version: api_version.clone(),
        kind: kind.clone(),
    })?;
    let mut object = message_value(raw, fields)?;
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".to_owned(), json!(api_version));
        map.insert("kind".to_owned(), json!(kind));
    }
    Ok(object)
}

/// One field's value on the wire.
#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of a message, in order.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self
                .0
                .split_first()
                .ok_or(DecodeError::Malformed("unexpected EOF"))?;
            self.0 = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::Malformed("integer overflow"))
    }

    fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.0 = self
            .0
            .get(n..)
            .ok_or(DecodeError::Malformed("unexpected EOF"))?;
        Ok(())
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<(u64, Wire<'a>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let mut field = || {
            let key = self.varint()?;
            let wire = match key & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => {
                    self.skip(8)?;
                    Wire::Fixed
                }
                2 => {
                    let len = usize::try_from(self.varint()?)
                        .map_err(|_| DecodeError::Malformed("negative length"))?;
                    let bytes = self
                        .0
                        .get(..len)
                        .ok_or(DecodeError::Malformed("unexpected EOF"))?;
                    self.0 = &self.0[len..];
                    Wire::Bytes(bytes)
                }
                5 => {
                    self.skip(4)?;
                    Wire::Fixed
                }
                _ => return Err(DecodeError::Malformed("illegal wireType")),
            };
            Ok((key >> 3, wire))
        };
        let item = field();
        if item.is_err() {
            // Nothing after a malformed field can be read.
            self.0 = &[];
        }
        Some(item)
    }
}

fn text(bytes: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Malformed("invalid UTF-8"))
}

/// A map entry message: its key and value bytes.
fn entry(bytes: &[u8]) -> Result<(String, &[u8]), DecodeError> {
    let (mut key, mut value) = (String::new(), &[][..]);
    for item in Reader(bytes) {
        match item? {
            (1, Wire::Bytes(k)) => key = text(k)?,
            (2, Wire::Bytes(v)) => value = v,
            _ => {}
        }
    }
    Ok((key, value))
}

/// A message as the JSON Go would encode once it decoded it: zero values
/// and a zero time left out (every field of these types is `omitempty`,
/// or a pointer only set when sent).
fn message_value(bytes: &[u8], fields: &[Field]) -> Result<Value, DecodeError> {
    let mut out = Map::new();
    for item in Reader(bytes) {
        let (number, wire) = item?;
        let Some(Field(_, name, kind)) = fields.iter().find(|f| f.0 == number) else {
            continue;
        };
        let name = (*name).to_owned();
        match (*kind, wire) {
            (Kind::String, Wire::Bytes(b)) if !b.is_empty() => {
                out.insert(name, json!(text(b)?));
            }
            // Go's int64 fields are two's complement varints.
            (Kind::Int, Wire::Varint(v)) => {
                out.insert(name, json!(v.cast_signed()));
            }
            (Kind::Bool, Wire::Varint(v)) => {
                out.insert(name, json!(v != 0));
            }
            (Kind::Time, Wire::Bytes(b)) => {
                if let Some(time) = time(b)? {
                    out.insert(name, json!(time));
                }
            }
            (Kind::Message(inner), Wire::Bytes(b)) => {
                out.insert(name, message_value(b, inner)?);
            }
            (Kind::StringMap, Wire::Bytes(b)) => {
                let (key, value) = entry(b)?;
                map_entry(&mut out, name, key, json!(text(value)?));
            }
            (Kind::BytesMap, Wire::Bytes(b)) => {
                let (key, value) = entry(b)?;
                map_entry(&mut out, name, key, bytes_value(value));
            }
            (Kind::Strings, Wire::Bytes(b)) => {
                list_item(&mut out, name, json!(text(b)?));
            }
            (Kind::Messages(inner), Wire::Bytes(b)) => {
                list_item(&mut out, name, message_value(b, inner)?);
            }
            (Kind::String, Wire::Bytes(_)) => {}
            _ => return Err(DecodeError::Malformed("wrong wireType for field")),
        }
    }
    Ok(Value::Object(out))
}

fn bytes_value(bytes: &[u8]) -> Value {
    serde_json::to_value(ByteString(bytes.to_vec())).unwrap_or(Value::Null)
}

fn map_entry(out: &mut Map<String, Value>, name: String, key: String, value: Value) {
    if let Some(map) = out.entry(name).or_insert_with(|| json!({})).as_object_mut() {
        map.insert(key, value);
    }
}

fn list_item(out: &mut Map<String, Value>, name: String, value: Value) {
    if let Some(list) = out.entry(name).or_insert_with(|| json!([])).as_array_mut() {
        list.push(value);
    }
}

/// A `metav1.Time` (`seconds`, `nanos`); `None` for Go's zero time,
/// which encodes as `null`.
fn time(bytes: &[u8]) -> Result<Option<String>, DecodeError> {
    // `metav1.Time` marshals the zero time as nothing at all (seconds 0
    // is the Unix epoch, a real time).
    if bytes.is_empty() {
        return Ok(None);
    }
    let mut seconds = 0i64;
    for item in Reader(bytes) {
        if let (1, Wire::Varint(v)) = item? {
            seconds = v.cast_signed();
        }
    }
    Timestamp::from_second(seconds)
        .map(|t| Some(t.to_string()))
        .map_err(|_| DecodeError::Malformed("time out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field.
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend(bytes);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
        [b"k8s\0".to_vec(), field(1, &type_meta), field(2, raw)].concat()
    }

    #[test]
    fn a_secret_reads_as_go_would_encode_it() {
        let labels = [field(1, b"owner"), field(2, b"helm")].concat();
        let metadata = [
            field(1, b"sh.helm.release.v1.web.v1"),
            field(2, b""),
            field(8, b""),
            field(11, &labels),
        ]
        .concat();
        let data = [field(1, b"release"), field(2, b"\x01\x02hi")].concat();
        let secret = [
            field(1, &metadata),
            field(2, &data),
            field(3, b"helm.sh/release.v1"),
        ]
        .concat();
        assert_eq!(
            decode(&envelope("v1", "Secret", &secret)).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "sh.helm.release.v1.web.v1", "labels": {"owner": "helm"}},
                "data": {"release": "AQJoaQ=="},
                "type": "helm.sh/release.v1",
            })
        );
    }

    #[test]
    fn delete_options_keep_what_was_set() {
        let preconditions = field(2, b"42");
        let options = [
            vec![1 << 3, 0],
            field(2, &preconditions),
            field(4, b"Background"),
        ]
        .concat();
        assert_eq!(
            decode(&envelope("v1", "DeleteOptions", &options)).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"resourceVersion": "42"}, "propagationPolicy": "Background",
            })
        );
    }

    #[test]
    fn other_bodies_are_refused() {
        assert_eq!(decode(b"{}"), Err(DecodeError::NoEnvelope));
        assert_eq!(
            decode(&envelope("apps/v1", "Deployment", b"")),
            Err(DecodeError::Unsupported {
                api_version: "apps/v1".into(),
                kind: "Deployment".into()
            })
        );
        assert!(matches!(
            decode(&[b"k8s\0".as_slice(), &[0x0a, 0x05, 0x01]].concat()),
            Err(DecodeError::Malformed(_))
        ));
    }
}
