//! A CRD version's `additionalPrinterColumns`, as the apiextensions server
//! serves them (`tableconvertor`): validated with the CRD, then each column's
//! JSONPath evaluated against every custom resource of a Table, the first
//! match formatted by the column's type (`date` as an age).
//!
//! JSONPath is client-go's template syntax, in the subset printer columns
//! use: `.field`, `['field']`, `[N]`, `[*]` and `[?(@.path=="value")]` (also
//! `!=`, a number, `true`/`false`, or `[?(@.path)]` for presence).

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::status::FieldError;

/// One column of a CRD version.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    path: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter {
        path: Vec<String>,
        test: Option<(bool, Value)>,
    },
}

const TYPES: [&str; 5] = ["boolean", "date", "integer", "number", "string"];
const FORMATS: [&str; 8] = [
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];

/// `ValidateCustomResourceColumnDefinition` for each column of a version at
/// `path` (`spec.versions[i]`).
pub fn validate(version: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let columns = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, column) in columns.iter().enumerate() {
        let at = format!("{path}.additionalPrinterColumns[{i}]");
        let text = |key: &str| column.get(key).and_then(Value::as_str).unwrap_or("");
        if text("name").is_empty() {
            errs.push(FieldError::required(format!("{at}.name"), ""));
        }
        let types = format!("must be one of {}", TYPES.join(","));
        match text("type") {
            "" => errs.push(FieldError::required(format!("{at}.type"), types)),
            kind if !TYPES.contains(&kind) => {
                errs.push(FieldError::invalid(format!("{at}.type"), kind, types));
            }
            _ => {}
        }
        let format = text("format");
        if !format.is_empty() && !FORMATS.contains(&format) {
            errs.push(FieldError::invalid(
                format!("{at}.format"),
                format,
                format!("must be one of {}", FORMATS.join(",")),
            ));
        }
        match text("jsonPath") {
            "" => errs.push(FieldError::required(format!("{at}.JSONPath"), "")),
            json_path if parse(json_path).is_none() => errs.push(FieldError::invalid(
                format!("{at}.JSONPath"),
                json_path,
                "must be a simple json path",
            )),
            _ => {}
        }
    }
    errs
}

/// The columns of a version (validated with its CRD); empty when it
/// declares none, and the Table shows the default Age.
pub fn of_version(version: &Value) -> Vec<PrinterColumn> {
    let columns = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    columns
        .iter()
        .filter_map(|column| {
            let text = |key: &str| {
                column
                    .get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            let json_path = text("jsonPath");
            let description = match text("description") {
                d if d.is_empty() => {
                    format!("Custom resource definition column (in JSONPath format): {json_path}")
                }
                d => d,
            };
            Some(PrinterColumn {
                name: text("name"),
                kind: text("type"),
                format: text("format"),
                description,
                priority: column.get("priority").and_then(Value::as_i64).unwrap_or(0),
                path: parse(&json_path)?,
            })
        })
        .collect()
}

impl PrinterColumn {
    /// The column's cell for `object`: `null` (kubectl prints a blank) when
    /// nothing matches or the value is not of the column's type.
    pub fn cell(&self, object: &Value, now: Timestamp) -> Value {
        let Some(value) = first_match(object, &self.path) else {
            return Value::Null;
        };
        match (self.kind.as_str(), value) {
            (_, Value::Null) => Value::Null,
            // Printed as the JSONPath template prints it.
            ("string", Value::String(s)) => json!(s),
            ("string", other) => json!(other.to_string()),
            ("integer", Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => json!(i),
                (None, Some(f)) => json!(f as i64),
                _ => Value::Null,
            },
            ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
            ("boolean", Value::Bool(b)) => json!(b),
            ("date", Value::String(s)) => match s.parse::<Timestamp>() {
                Ok(_) => json!(crate::table::since(s, now)),
                Err(_) => json!("<invalid>"),
            },
            _ => Value::Null,
        }
    }
}

/// Parses a column's path (with or without client-go's `{…}`); `None`
/// outside the supported subset.
fn parse(text: &str) -> Option<Vec<Step>> {
    let text = text.trim();
    let text = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or(text);
    let mut rest = text.strip_prefix('.').or_else(|| {
        // `[...]` may start a path too.
        text.starts_with('[').then_some(text)
    })?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inner = &after[..end];
            steps.push(bracket(inner)?);
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix('.') {
            rest = after;
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            let name = &rest[..end];
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_alphanumeric() || "_-/".contains(c))
            {
                return None;
            }
            steps.push(Step::Field(name.to_owned()));
            rest = &rest[end..];
        }
    }
    Some(steps)
}

fn bracket(inner: &str) -> Option<Step> {
    let inner = inner.trim();
    if inner == "*" {
        return Some(Step::All);
    }
    if let Ok(index) = inner.parse::<i64>() {
        return Some(Step::Index(index));
    }
    if let Some(quoted) = inner
        .strip_prefix('\'')
        .and_then(|q| q.strip_suffix('\''))
        .or_else(|| inner.strip_prefix('"').and_then(|q| q.strip_suffix('"')))
    {
        return Some(Step::Field(quoted.to_owned()));
    }
    let filter = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (left, test) = match filter.split_once("==") {
        Some((left, right)) => (left, Some((true, literal(right)?))),
        None => match filter.split_once("!=") {
            Some((left, right)) => (left, Some((false, literal(right)?))),
            None => (filter, None),
        },
    };
    let path = left.trim().strip_prefix("@.")?;
    let path: Vec<String> = path.split('.').map(str::to_owned).collect();
    if path.iter().any(String::is_empty) {
        return None;
    }
    Some(Step::Filter { path, test })
}

fn literal(text: &str) -> Option<Value> {
    let text = text.trim();
    if let Some(s) = text
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .or_else(|| text.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
    {
        return Some(json!(s));
    }
    serde_json::from_str(text).ok()
}

/// The first value the path reaches (missing keys are no match, as with
/// `AllowMissingKeys`).
fn first_match<'a>(object: &'a Value, steps: &[Step]) -> Option<&'a Value> {
    let Some((step, rest)) = steps.split_first() else {
        return Some(object);
    };
    match step {
        Step::Field(name) => first_match(object.get(name)?, rest),
        Step::Index(index) => {
            let items = object.as_array()?;
            let at = if *index < 0 {
                items.len().checked_sub(index.unsigned_abs() as usize)?
            } else {
                *index as usize
            };
            first_match(items.get(at)?, rest)
        }
        Step::All => match object {
            Value::Array(items) => items.iter().find_map(|item| first_match(item, rest)),
            Value::Object(map) => map.values().find_map(|item| first_match(item, rest)),
            _ => None,
        },
        Step::Filter { path, test } => object
            .as_array()?
            .iter()
            .filter(|item| {
                let found = path.iter().try_fold(*item, |v, key| v.get(key));
                match (found, test) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(v), Some((equal, expected))) => (v == expected) == *equal,
                }
            })
            .find_map(|item| first_match(item, rest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(kind: &str, json_path: &str) -> PrinterColumn {
        let version = json!({"additionalPrinterColumns": [
            {"name": "C", "type": kind, "jsonPath": json_path}
        ]});
        of_version(&version).remove(0)
    }

    fn object() -> Value {
        json!({
            "metadata": {"creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {"name": "simcloud", "replicas": 3, "ratio": 0.5, "on": true,
                     "labels": {"app.kubernetes.io/name": "x"}},
            "status": {"conditions": [
                {"type": "Progressing", "status": "False", "reason": "Done"},
                {"type": "Ready", "status": "True", "reason": "Active"}
            ], "items": [{"n": 1}, {"n": 2}]}
        })
    }

    #[test]
    fn printer_column_paths_reach_fields_indexes_and_filtered_items() {
        let now: Timestamp = "2025-01-01T00:05:00Z".parse().unwrap();
        let cell = |kind: &str, path: &str| column(kind, path).cell(&object(), now);
        assert_eq!(cell("string", ".spec.name"), json!("simcloud"));
        assert_eq!(
            cell("string", r#".status.conditions[?(@.type=="Ready")].status"#),
            json!("True")
        );
        assert_eq!(
            cell("string", r#".status.conditions[?(@.type!="Ready")].reason"#),
            json!("Done")
        );
        assert_eq!(cell("integer", ".status.items[1].n"), json!(2));
        assert_eq!(cell("integer", ".status.items[-1].n"), json!(2));
        assert_eq!(cell("integer", ".status.items[*].n"), json!(1));
        assert_eq!(
            cell("string", ".spec.labels['app.kubernetes.io/name']"),
            json!("x")
        );
        assert_eq!(cell("integer", ".spec.replicas"), json!(3));
        assert_eq!(cell("number", ".spec.ratio"), json!(0.5));
        assert_eq!(cell("boolean", ".spec.on"), json!(true));
        assert_eq!(cell("string", ".spec.replicas"), json!("3"));
        assert_eq!(cell("date", ".metadata.creationTimestamp"), json!("5m"));
        assert_eq!(cell("date", ".spec.name"), json!("<invalid>"));
        // Missing, or of another type than the column's: no value (a blank).
        assert_eq!(cell("string", ".status.active.version"), Value::Null);
        assert_eq!(
            cell("string", r#".status.conditions[?(@.type=="Gone")].status"#),
            Value::Null
        );
        assert_eq!(cell("integer", ".spec.name"), Value::Null);
        assert_eq!(cell("boolean", ".spec.replicas"), Value::Null);
    }

    #[test]
    fn printer_columns_are_validated_with_their_crd() {
        let version = json!({"additionalPrinterColumns": [
            {"name": "", "type": "text", "jsonPath": ".spec.a"},
            {"name": "B", "type": "string", "format": "money", "jsonPath": "spec..a]"},
            {"name": "C", "jsonPath": ""},
            {"name": "D", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
        ]});
        let fields: Vec<String> = validate(&version, "spec.versions[0]")
            .iter()
            .map(|e| e.field.clone())
            .collect();
        let at = "spec.versions[0].additionalPrinterColumns";
        assert_eq!(
            fields,
            [
                format!("{at}[0].name"),
                format!("{at}[0].type"),
                format!("{at}[1].format"),
                format!("{at}[1].JSONPath"),
                format!("{at}[2].type"),
                format!("{at}[2].JSONPath"),
            ]
        );
    }
}
