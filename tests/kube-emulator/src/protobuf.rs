//! Request bodies in Kubernetes' protobuf form
//! (`application/vnd.kubernetes.protobuf`), which client-go's typed
//! clients send by default (kubectl's `create` subcommands, and since
//! v1.35 Helm 4 storing its releases in Secrets): the `k8s\0` envelope
//! (`runtime.Unknown`), the protobuf wire format, and the messages such a
//! client writes to the emulator, read into the JSON the rest of the
//! emulator handles, as Go would encode the decoded struct (empty fields
//! omitted, bytes in base64, times in RFC 3339).
//!
//! Each message is a table of its fields (`messages`), with upstream's
//! field numbers. A field a table does not list is refused, naming the
//! message and the number, rather than dropped: a client that needs it
//! can send JSON.

mod messages;

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
    #[error("proto: wrong wireType for field {field} of {message}")]
    WrongWireType {
        message: &'static str,
        field: &'static str,
    },
    /// A field the tables do not list: refused rather than dropped.
    #[error(
        "proto: field {number} of {message} is not read by kube-emulator; send the object as JSON"
    )]
    UnknownField { message: &'static str, number: u64 },
    /// A kind the emulator cannot read in protobuf (JSON works).
    #[error("{api_version} {kind} in protobuf is not supported by kube-emulator")]
    Unsupported { api_version: String, kind: String },
}

/// A message: its name (for errors) and fields.
#[derive(Debug)]
struct Message {
    name: &'static str,
    fields: &'static [Field],
}

/// One field of a message: its number, JSON name and type.
#[derive(Debug, Clone, Copy)]
struct Field(u64, &'static str, Kind);

/// The type of a field's value, and when Go's JSON writes it.
///
/// Go writes every field of a struct on the wire, zero or not, but a
/// pointer only when set. The plain scalars are Go's `omitempty` values,
/// left out of the JSON when zero (as are the few without `omitempty`,
/// ports, whose zero is invalid anyway); the `…Ptr` ones are pointers,
/// kept whatever their value.
#[derive(Debug, Clone, Copy)]
enum Kind {
    String,
    Int32,
    Int64,
    Bool,
    StringPtr,
    Int32Ptr,
    Int64Ptr,
    BoolPtr,
    /// `metav1.Time`: an RFC 3339 string, left out when zero.
    Time,
    /// `intstr.IntOrString`: a JSON number or string.
    IntOrString,
    /// `resource.Quantity`: its string.
    Quantity,
    /// `metav1.FieldsV1`: the JSON it holds.
    FieldsV1,
    Message(&'static Message),
    /// A message Go embeds (`json:",inline"`): its fields are the outer
    /// object's.
    Inline(&'static Message),
    Messages(&'static Message),
    Strings,
    StringMap,
    BytesMap,
    QuantityMap,
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
    let schema =
        messages::for_type(&api_version, &kind).ok_or_else(|| DecodeError::Unsupported {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let mut object = message_value(raw, schema)?;
    object.insert("apiVersion".to_owned(), json!(api_version));
    object.insert("kind".to_owned(), json!(kind));
    Ok(Value::Object(object))
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

/// An `int32` from its varint: Go keeps the low 32 bits (a negative value
/// is sent sign-extended to ten bytes).
fn int32(varint: u64) -> i32 {
    (varint as u32).cast_signed()
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

/// A message as the JSON object Go would encode once it decoded it.
fn message_value(bytes: &[u8], message: &Message) -> Result<Map<String, Value>, DecodeError> {
    let mut out = Map::new();
    read_fields(bytes, message, &mut out)?;
    Ok(out)
}

/// Adds the fields of `message` in `bytes` to `out`.
fn read_fields(
    bytes: &[u8],
    message: &Message,
    out: &mut Map<String, Value>,
) -> Result<(), DecodeError> {
    for item in Reader(bytes) {
        let (number, wire) = item?;
        let Some(&Field(_, name, kind)) = message.fields.iter().find(|f| f.0 == number) else {
            return Err(DecodeError::UnknownField {
                message: message.name,
                number,
            });
        };
        let key = name.to_owned();
        match (kind, wire) {
            (Kind::String, Wire::Bytes(b)) => {
                if !b.is_empty() {
                    out.insert(key, json!(text(b)?));
                }
            }
            (Kind::StringPtr, Wire::Bytes(b)) => {
                out.insert(key, json!(text(b)?));
            }
            (Kind::Int32, Wire::Varint(v)) => {
                let n = int32(v);
                if n != 0 {
                    out.insert(key, json!(n));
                }
            }
            (Kind::Int32Ptr, Wire::Varint(v)) => {
                out.insert(key, json!(int32(v)));
            }
            // Go's int64 fields are two's complement varints.
            (Kind::Int64, Wire::Varint(v)) => {
                if v != 0 {
                    out.insert(key, json!(v.cast_signed()));
                }
            }
            (Kind::Int64Ptr, Wire::Varint(v)) => {
                out.insert(key, json!(v.cast_signed()));
            }
            (Kind::Bool, Wire::Varint(v)) => {
                if v != 0 {
                    out.insert(key, json!(true));
                }
            }
            (Kind::BoolPtr, Wire::Varint(v)) => {
                out.insert(key, json!(v != 0));
            }
            (Kind::Time, Wire::Bytes(b)) => {
                if let Some(time) = time(b)? {
                    out.insert(key, json!(time));
                }
            }
            (Kind::IntOrString, Wire::Bytes(b)) => {
                out.insert(key, int_or_string(b)?);
            }
            (Kind::Quantity, Wire::Bytes(b)) => {
                out.insert(key, quantity(b)?);
            }
            (Kind::FieldsV1, Wire::Bytes(b)) => {
                out.insert(key, fields_v1(b)?);
            }
            (Kind::Message(inner), Wire::Bytes(b)) => {
                out.insert(key, Value::Object(message_value(b, inner)?));
            }
            (Kind::Inline(inner), Wire::Bytes(b)) => read_fields(b, inner, out)?,
            (Kind::Messages(inner), Wire::Bytes(b)) => {
                list_item(out, key, Value::Object(message_value(b, inner)?));
            }
            (Kind::Strings, Wire::Bytes(b)) => list_item(out, key, json!(text(b)?)),
            (Kind::StringMap, Wire::Bytes(b)) => {
                let (entry_key, value) = entry(b)?;
                map_entry(out, key, entry_key, json!(text(value)?));
            }
            (Kind::BytesMap, Wire::Bytes(b)) => {
                let (entry_key, value) = entry(b)?;
                map_entry(out, key, entry_key, bytes_value(value));
            }
            (Kind::QuantityMap, Wire::Bytes(b)) => {
                let (entry_key, value) = entry(b)?;
                map_entry(out, key, entry_key, quantity(value)?);
            }
            _ => {
                return Err(DecodeError::WrongWireType {
                    message: message.name,
                    field: name,
                });
            }
        }
    }
    Ok(())
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

const TIME: &Message = &Message {
    name: "Time",
    fields: &[
        Field(1, "seconds", Kind::Int64Ptr),
        Field(2, "nanos", Kind::Int32Ptr),
    ],
};

/// A `metav1.Time`; `None` for Go's zero time, which encodes as `null`.
/// JSON has whole seconds: the nanoseconds are dropped, as Go drops them.
fn time(bytes: &[u8]) -> Result<Option<String>, DecodeError> {
    // `metav1.Time` marshals the zero time as nothing at all (seconds 0
    // is the Unix epoch, a real time).
    if bytes.is_empty() {
        return Ok(None);
    }
    let time = message_value(bytes, TIME)?;
    let seconds = time.get("seconds").and_then(Value::as_i64).unwrap_or(0);
    Timestamp::from_second(seconds)
        .map(|t| Some(t.to_string()))
        .map_err(|_| DecodeError::Malformed("time out of range"))
}

const INT_OR_STRING: &Message = &Message {
    name: "IntOrString",
    fields: &[
        Field(1, "type", Kind::Int64Ptr),
        Field(2, "intVal", Kind::Int32Ptr),
        Field(3, "strVal", Kind::StringPtr),
    ],
};

/// An `intstr.IntOrString`: `intVal` as a number for type 0 (Int),
/// `strVal` as a string for type 1 (String).
fn int_or_string(bytes: &[u8]) -> Result<Value, DecodeError> {
    let fields = message_value(bytes, INT_OR_STRING)?;
    let (value, zero) = match fields.get("type").and_then(Value::as_i64).unwrap_or(0) {
        0 => (fields.get("intVal"), json!(0)),
        1 => (fields.get("strVal"), json!("")),
        _ => {
            return Err(DecodeError::Malformed(
                "IntOrString type is neither Int (0) nor String (1)",
            ));
        }
    };
    Ok(value.cloned().unwrap_or(zero))
}

const QUANTITY: &Message = &Message {
    name: "Quantity",
    fields: &[Field(1, "string", Kind::StringPtr)],
};

/// A `resource.Quantity`: its string (`"0"` when none is sent).
fn quantity(bytes: &[u8]) -> Result<Value, DecodeError> {
    let fields = message_value(bytes, QUANTITY)?;
    Ok(fields.get("string").cloned().unwrap_or_else(|| json!("0")))
}

/// A `metav1.FieldsV1`: the JSON document in its one `bytes` field.
fn fields_v1(bytes: &[u8]) -> Result<Value, DecodeError> {
    let mut value = json!({});
    for item in Reader(bytes) {
        match item? {
            (1, Wire::Bytes(raw)) => {
                value = serde_json::from_slice(raw)
                    .map_err(|_| DecodeError::Malformed("FieldsV1 does not hold JSON"))?;
            }
            (1, _) => {
                return Err(DecodeError::WrongWireType {
                    message: "FieldsV1",
                    field: "Raw",
                });
            }
            (number, _) => {
                return Err(DecodeError::UnknownField {
                    message: "FieldsV1",
                    number,
                });
            }
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `value` as a varint.
    fn varint_bytes(mut value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while value >= 0x80 {
            out.push(u8::try_from(value & 0x7f).unwrap() | 0x80);
            value >>= 7;
        }
        out.push(u8::try_from(value).unwrap());
        out
    }

    /// A length-delimited field.
    fn field(number: u64, bytes: &[u8]) -> Vec<u8> {
        let len = u64::try_from(bytes.len()).unwrap();
        [
            varint_bytes(number << 3 | 2),
            varint_bytes(len),
            bytes.to_vec(),
        ]
        .concat()
    }

    /// A varint field.
    fn varint(number: u64, value: u64) -> Vec<u8> {
        [varint_bytes(number << 3), varint_bytes(value)].concat()
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
            varint(7, 0),
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
            varint(1, 0),
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

    /// A Service port as kubectl writes it: every field of the struct,
    /// zero or not.
    fn service_port(target_port: &[u8]) -> Vec<u8> {
        [
            field(1, b"http"),
            field(2, b"TCP"),
            varint(3, 80),
            field(4, target_port),
            varint(5, 0),
        ]
        .concat()
    }

    fn service_ports(target_port: &[u8]) -> Value {
        let spec = field(1, &service_port(target_port));
        let service = decode(&envelope("v1", "Service", &field(2, &spec))).unwrap();
        service["spec"]["ports"][0].clone()
    }

    #[test]
    fn int_or_string_is_a_number_or_a_string_by_its_type() {
        let number = [varint(1, 0), varint(2, 8080), field(3, b"")].concat();
        assert_eq!(
            service_ports(&number),
            json!({"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080})
        );
        let name = [varint(1, 1), varint(2, 0), field(3, b"web")].concat();
        assert_eq!(service_ports(&name)["targetPort"], "web");
        assert_eq!(service_ports(b"")["targetPort"], 0, "Go's zero IntOrString");
        assert_eq!(
            decode(&envelope(
                "v1",
                "Service",
                &field(2, &field(1, &service_port(&varint(1, 2))))
            )),
            Err(DecodeError::Malformed(
                "IntOrString type is neither Int (0) nor String (1)"
            ))
        );
    }

    #[test]
    fn quantities_are_their_strings() {
        let quantity = |s: &[u8]| field(2, &field(1, s));
        let limits = [field(1, b"cpu"), quantity(b"500m")].concat();
        let requests = [field(1, b"memory"), quantity(b"64Mi")].concat();
        let resources = [field(1, &limits), field(2, &requests)].concat();
        let container = [field(1, b"web"), field(2, b"nginx"), field(8, &resources)].concat();
        let template = field(2, &field(2, &container));
        let deployment = field(2, &field(3, &template));
        let decoded = decode(&envelope("apps/v1", "Deployment", &deployment)).unwrap();
        assert_eq!(
            decoded["spec"]["template"]["spec"]["containers"][0],
            json!({
                "name": "web", "image": "nginx",
                "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "64Mi"}},
            })
        );
    }

    #[test]
    fn a_negative_int32_is_read_from_its_ten_byte_varint() {
        // Go sends int32(-1) sign-extended: ten bytes.
        let minus_one = varint(1, u64::MAX);
        assert_eq!(minus_one.len(), 11);
        let spec = [minus_one, varint(5, 0), varint(6, 10)].concat();
        let decoded = decode(&envelope("apps/v1", "Deployment", &field(2, &spec))).unwrap();
        assert_eq!(
            decoded["spec"],
            json!({"replicas": -1, "revisionHistoryLimit": 10}),
            "a pointer is kept, a zero `omitempty` value left out"
        );
        // Go keeps the low 32 bits of a longer varint.
        let spec = varint(1, (1 << 32) | 3);
        let decoded = decode(&envelope("apps/v1", "Deployment", &field(2, &spec))).unwrap();
        assert_eq!(decoded["spec"]["replicas"], 3);
    }

    #[test]
    fn a_field_the_tables_do_not_list_is_refused_not_dropped() {
        let pod_spec = [field(2, &field(1, b"web")), field(23, b"")].concat();
        let deployment = field(2, &field(3, &field(2, &pod_spec)));
        let err = decode(&envelope("apps/v1", "Deployment", &deployment)).unwrap_err();
        assert_eq!(
            err,
            DecodeError::UnknownField {
                message: "PodSpec",
                number: 23
            }
        );
        assert_eq!(
            err.to_string(),
            "proto: field 23 of PodSpec is not read by kube-emulator; send the object as JSON"
        );
        assert_eq!(
            decode(&envelope("v1", "ConfigMap", &varint(2, 1))),
            Err(DecodeError::WrongWireType {
                message: "ConfigMap",
                field: "data"
            })
        );
    }

    #[test]
    fn managed_fields_keep_their_field_set() {
        let entry = [
            field(1, b"kubectl"),
            field(2, b"Apply"),
            field(3, b"v1"),
            field(4, &varint(1, 1_700_000_000)),
            field(6, b"FieldsV1"),
            field(7, &field(1, br#"{"f:data":{}}"#)),
        ]
        .concat();
        let config_map = field(1, &field(17, &entry));
        let decoded = decode(&envelope("v1", "ConfigMap", &config_map)).unwrap();
        assert_eq!(
            decoded["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                "time": "2023-11-14T22:13:20Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {}},
            }])
        );
    }

    #[test]
    fn other_bodies_are_refused() {
        assert_eq!(decode(b"{}"), Err(DecodeError::NoEnvelope));
        assert_eq!(
            decode(&envelope("apps/v1", "DaemonSet", b"")),
            Err(DecodeError::Unsupported {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into()
            })
        );
        assert!(matches!(
            decode(&[b"k8s\0".as_slice(), &[0x0a, 0x05, 0x01]].concat()),
            Err(DecodeError::Malformed(_))
        ));
    }
}
