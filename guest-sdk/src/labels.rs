//! Choosing target nodes by their labels, as upstream's `filterTargetNodes` reads AWS's
//! `service.beta.kubernetes.io/aws-load-balancer-target-node-labels` (`key=value,key2`):
//! a [`LabelSelector`] parsed from such an annotation, and the list of label keys a provider
//! declares it reads ([`label_keys`]), which is all the host passes it of a node's labels.
//!
//! Both refuse what upstream drops or mangles silently (an entry without a key, two `=`, a
//! key given twice, a key the provider does not read); the errors say what is wrong, and the
//! provider says where (its annotation, its cloud-config field).

use std::fmt;

/// The labels a node needs to be a target: every label, with the value where one is given
/// (`key` and `key=` ask for the label with any value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelSelector(Vec<(String, Option<String>)>);

/// Why an annotation's value is not a [`LabelSelector`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelectorError {
    /// An entry (given) with nothing before its `=`.
    NoKey(String),
    /// An entry (given) with a second `=`.
    TwoEquals(String),
    /// An entry (given) whose key an earlier entry named.
    GivenBefore(String),
    /// A key (given) the provider does not read: the host never passes it, so no node
    /// would match.
    NotRead(String),
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectorError::NoKey(entry) => write!(f, "entry {entry:?} has no label key"),
            SelectorError::TwoEquals(entry) => write!(
                f,
                "entry {entry:?} has more than one '=': write key=value or key"
            ),
            SelectorError::GivenBefore(entry) => {
                write!(f, "entry {entry:?} names a label key given before")
            }
            SelectorError::NotRead(key) => write!(
                f,
                "names node label {key:?}, which the provider does not read"
            ),
        }
    }
}

impl std::error::Error for SelectorError {}

impl SelectorError {
    /// The error as a provider whose cloud-config field `field` lists the `readable` keys
    /// tells it: a key it does not read says where to add it.
    pub fn explained(&self, field: &str, readable: &[String]) -> String {
        match self {
            SelectorError::NotRead(_) => {
                format!("{self}: add it to \"{field}\" in the cloud config (now {readable:?})")
            }
            _ => self.to_string(),
        }
    }
}

impl LabelSelector {
    /// The selector `value` (`key=value,key2`, spaces and empty entries ignored) asks for:
    /// `None` with no entry (every node, as upstream). Each key must be one of `readable`,
    /// the label keys the provider declared in its node metadata.
    pub fn parse(value: &str, readable: &[String]) -> Result<Option<LabelSelector>, SelectorError> {
        let mut wanted: Vec<(String, Option<String>)> = Vec::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (key, value) = match entry.split_once('=') {
                Some((key, value)) => (key.trim(), Some(value.trim())),
                None => (entry, None),
            };
            let entry = || entry.to_string();
            if key.is_empty() {
                return Err(SelectorError::NoKey(entry()));
            }
            if value.is_some_and(|value| value.contains('=')) {
                return Err(SelectorError::TwoEquals(entry()));
            }
            if wanted.iter().any(|(k, _)| k == key) {
                return Err(SelectorError::GivenBefore(entry()));
            }
            if !readable.iter().any(|k| k == key) {
                return Err(SelectorError::NotRead(key.to_string()));
            }
            let value = value.filter(|value| !value.is_empty()).map(str::to_string);
            wanted.push((key.to_string(), value));
        }
        Ok((!wanted.is_empty()).then_some(LabelSelector(wanted)))
    }

    /// Whether a node with `labels` is a target.
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        self.0.iter().all(|(key, wanted)| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .is_some_and(|(_, value)| wanted.as_ref().is_none_or(|wanted| wanted == value))
        })
    }
}

/// Why a cloud-config value is not a list of label keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelKeysError {
    /// Not a JSON list: the value.
    NotAList(String),
    /// An item that is not a string.
    NotAString(String),
    /// A string that is not a label key.
    NotALabelKey(String),
    /// A key listed twice.
    ListedTwice(String),
}

impl fmt::Display for LabelKeysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabelKeysError::NotAList(value) => write!(f, "got {value}"),
            LabelKeysError::NotAString(item) => write!(f, "{item} is not a string"),
            LabelKeysError::NotALabelKey(key) => write!(f, "{key:?} is not a label key"),
            LabelKeysError::ListedTwice(key) => write!(f, "{key:?} is listed twice"),
        }
    }
}

impl std::error::Error for LabelKeysError {}

/// A cloud config's list of distinct label keys (`[]` when not given).
pub fn label_keys(value: Option<serde_json::Value>) -> Result<Vec<String>, LabelKeysError> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let serde_json::Value::Array(items) = value else {
        return Err(LabelKeysError::NotAList(value.to_string()));
    };
    let mut keys: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let serde_json::Value::String(key) = item else {
            return Err(LabelKeysError::NotAString(item.to_string()));
        };
        if !is_label_key(&key) {
            return Err(LabelKeysError::NotALabelKey(key));
        }
        if keys.contains(&key) {
            return Err(LabelKeysError::ListedTwice(key));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// A Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a name of at most
/// 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit.
pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|prefix| {
        prefix.len() <= 253
            && prefix.split('.').all(|part| {
                !part.is_empty()
                    && !part.starts_with('-')
                    && !part.ends_with('-')
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
    });
    let name_ok = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    prefix_ok && name_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable() -> Vec<String> {
        vec!["node-role.example.com/lb".into(), "tier".into()]
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_selector_is_a_key_value_list() {
        assert_eq!(LabelSelector::parse(" , ", &readable()), Ok(None));
        assert_eq!(
            LabelSelector::parse(" node-role.example.com/lb = edge , tier,, ", &readable()),
            Ok(Some(LabelSelector(vec![
                ("node-role.example.com/lb".into(), Some("edge".into())),
                ("tier".into(), None),
            ])))
        );
        assert_eq!(
            LabelSelector::parse("tier=", &readable()),
            Ok(Some(LabelSelector(vec![("tier".into(), None)]))),
            "`key=` asks for the label with any value, as `key` does"
        );
    }

    #[test]
    fn a_node_needs_every_label_with_its_value_where_given() {
        let selector = LabelSelector::parse("node-role.example.com/lb=edge,tier", &readable())
            .unwrap()
            .unwrap();
        for target in [
            labels(&[("tier", "gold"), ("node-role.example.com/lb", "edge")]),
            labels(&[("node-role.example.com/lb", "edge"), ("tier", "")]),
        ] {
            assert!(selector.matches(&target), "{target:?}");
        }
        for other in [
            labels(&[("node-role.example.com/lb", "edge")]),
            labels(&[("node-role.example.com/lb", "inner"), ("tier", "gold")]),
            labels(&[("node-role.example.com/lb", "Edge"), ("tier", "gold")]),
            labels(&[("tier", "gold")]),
            labels(&[]),
        ] {
            assert!(!selector.matches(&other), "{other:?}");
        }
    }

    #[test]
    fn a_bad_entry_is_refused_naming_it() {
        for (value, error) in [
            ("=edge", "entry \"=edge\" has no label key"),
            (
                "tier=a=b",
                "entry \"tier=a=b\" has more than one '=': write key=value or key",
            ),
            (
                "tier=a,tier=b",
                "entry \"tier=b\" names a label key given before",
            ),
            (
                "kubernetes.io/hostname=n1",
                "names node label \"kubernetes.io/hostname\", which the provider does not read",
            ),
        ] {
            let refused = LabelSelector::parse(value, &readable()).unwrap_err();
            assert_eq!(refused.to_string(), error, "{value}");
            let explained = refused.explained("label_keys", &readable());
            match refused {
                SelectorError::NotRead(_) => assert_eq!(
                    explained,
                    format!(
                        "{error}: add it to \"label_keys\" in the cloud config \
                         (now [\"node-role.example.com/lb\", \"tier\"])"
                    )
                ),
                _ => assert_eq!(explained, error),
            }
        }
    }

    #[test]
    fn label_keys_are_a_list_of_distinct_keys() {
        use serde_json::json;
        assert_eq!(label_keys(None), Ok(vec![]));
        assert_eq!(
            label_keys(Some(json!(["node-role.example.com/lb", "tier"]))),
            Ok(readable())
        );
        for (value, error) in [
            (json!("tier"), "got \"tier\""),
            (json!([1]), "1 is not a string"),
            (
                json!(["Example.com/lb"]),
                "\"Example.com/lb\" is not a label key",
            ),
            (json!(["tier", "tier"]), "\"tier\" is listed twice"),
        ] {
            assert_eq!(
                label_keys(Some(value.clone())).unwrap_err().to_string(),
                error,
                "{value}"
            );
        }
    }

    #[test]
    fn label_keys_are_checked_as_kubernetes_checks_them() {
        for key in [
            "tier",
            "node-role.kubernetes.io/control-plane",
            "a",
            "A_b.c-9",
            &"x".repeat(63),
        ] {
            assert!(is_label_key(key), "{key}");
        }
        for key in [
            "",
            "-tier",
            "tier-",
            "/tier",
            "Example.com/tier",
            "example..com/tier",
            "example.com/",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(!is_label_key(key), "{key}");
        }
    }
}
