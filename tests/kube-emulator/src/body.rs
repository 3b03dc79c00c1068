//! Request bodies: JSON parsed into a `Value` as Go's decoder reads it
//! (a repeated key's object is merged into the one before, anything else
//! replaces it, as decoding into the same struct or map does), together
//! with the paths of the keys
//! it repeats, which strict decoding (`fieldValidation=Strict`, or `Warn`
//! as warnings) reports as `duplicate field "metadata.name"`.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A parsed body and the keys it repeats, in the order met.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub value: Value,
    /// Paths as sigs.k8s.io/json prints them: `metadata.labels.a`,
    /// `spec.ports[0].name`; each once.
    pub duplicates: Vec<String>,
}

impl Parsed {
    /// A body known to repeat nothing (built by the server itself).
    pub fn clean(value: Value) -> Parsed {
        Parsed {
            value,
            duplicates: Vec::new(),
        }
    }
}

/// Parses `bytes` as one JSON value, noting repeated keys.
pub fn parse(bytes: &[u8]) -> Result<Parsed, serde_json::Error> {
    let duplicates = RefCell::new(Vec::new());
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Node {
        path: String::new(),
        duplicates: &duplicates,
    }
    .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(Parsed {
        value,
        duplicates: duplicates.into_inner(),
    })
}

/// One value being read, at `path`.
struct Node<'a> {
    path: String,
    duplicates: &'a RefCell<Vec<String>>,
}

impl Node<'_> {
    fn child(&self, path: String) -> Node<'_> {
        Node {
            path,
            duplicates: self.duplicates,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) =
            seq.next_element_seed(self.child(format!("{}[{}]", self.path, items.len())))?
        {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if object.contains_key(&key) {
                let mut duplicates = self.duplicates.borrow_mut();
                if !duplicates.contains(&path) {
                    duplicates.push(path.clone());
                }
            }
            let value = map.next_value_seed(self.child(path))?;
            match object.get_mut(&key) {
                Some(before) => merge_repeated(before, value),
                None => {
                    object.insert(key, value);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

/// A repeated key's value over the one before it: objects merge key by
/// key, anything else replaces.
fn merge_repeated(before: &mut Value, value: Value) {
    match (before, value) {
        (Value::Object(before), Value::Object(value)) => {
            for (key, value) in value {
                match before.get_mut(&key) {
                    Some(existing) => merge_repeated(existing, value),
                    None => {
                        before.insert(key, value);
                    }
                }
            }
        }
        (before, value) => *before = value,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::parse;

    #[test]
    fn repeated_keys_are_named_by_path_and_merge_as_go_decodes_them() {
        let parsed = parse(
            br#"{"metadata": {"name": "a", "labels": {"x": "1", "x": "2"}, "name": "b"},
                 "spec": {"ports": [{"port": 1, "port": 2}]}, "metadata": {"name": "c"}}"#,
        )
        .unwrap();
        assert_eq!(
            parsed.duplicates,
            [
                "metadata.labels.x",
                "metadata.name",
                "spec.ports[0].port",
                "metadata"
            ]
        );
        assert_eq!(
            parsed.value,
            json!({"metadata": {"name": "c", "labels": {"x": "2"}}, "spec": {"ports": [{"port": 2}]}})
        );
    }

    #[test]
    fn clean_bodies_and_errors() {
        let parsed = parse(br#"{"a": [1, 2.5, null, true, "x"]}"#).unwrap();
        assert!(parsed.duplicates.is_empty());
        assert_eq!(parsed.value, json!({"a": [1, 2.5, null, true, "x"]}));
        assert!(parse(b"{} trailing").is_err());
        assert!(parse(b"{").is_err());
    }
}
