//! The `provider` and `providers` parts of the chart's `values.schema.json`, generated from the CloudProvider
//! CRD's schema (itself generated from [`crate::resource::CloudProviderSpec`]) and compared
//! with the committed file: a field added to or changed in the spec that the chart's schema
//! does not follow fails here, and the file as it should be is written to `target/tmp/`.
//!
//! The chart renders `provider` into the CloudProvider's spec (templates/cloudprovider.yaml):
//! `ref` is `spec.provider`, `allowedHosts` is `spec.egress.allowedHosts`, and every other
//! key is the spec's field of the same name. Its values default to empty (`""`, `{}`, `[]`),
//! which means "not set": the template leaves the field out, and names the two required ones.
//! Each entry of `providers` (several providers, one CloudProvider each) is what `provider`
//! holds, with `ref` and `name` required.
//!
//! The CRD's structural schema becomes JSON Schema (draft 7, what Helm checks values with):
//! objects refuse unknown keys (where the API server would prune them), `int-or-string` is
//! either type, a `set` list has unique items, OpenAPI's boolean `exclusiveMinimum` becomes a bound, and each CEL rule
//! (`x-kubernetes-validations`) becomes the JSON Schema [`cel_rule`] gives for it. A rule or
//! a schema keyword with no translation fails the test, so none is dropped unnoticed.

use serde_json::{Map, Value, json};

use crate::reference_pages::yaml_value;

/// The spec's schema in the CRD the manager ships.
fn crd_spec_schema() -> Value {
    let crd = yaml_value(&crate::resource::crd_yaml());
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// The chart's `provider` value: the spec's fields as the chart names them, each of which may
/// be left empty.
fn provider_schema(spec: &Value) -> Value {
    let field = |name: &str| -> Value {
        let schema = &spec["properties"][name];
        assert!(schema.is_object(), "the spec has no field {name}");
        may_be_empty(translate(schema, &format!("spec.{name}")))
    };
    let mut egress = field("egress");
    let allowed_hosts = egress["properties"]
        .as_object_mut()
        .and_then(|properties| properties.remove("allowedHosts"))
        .expect("spec.egress.allowedHosts");
    let mut properties = Map::new();
    properties.insert("ref".into(), field("provider"));
    properties.insert("allowedHosts".into(), allowed_hosts);
    properties.insert("egress".into(), egress);
    let renamed = ["provider", "egress"];
    for name in spec["properties"]
        .as_object()
        .expect("spec.properties")
        .keys()
    {
        if !renamed.contains(&name.as_str()) {
            properties.insert(name.clone(), field(name));
        }
    }
    json!({
        "type": "object",
        "additionalProperties": false,
        "description": spec["description"],
        "properties": properties,
    })
}

/// The chart's `providers` value: a list of what `provider` holds (by reference), each
/// naming its component and provider.
fn providers_schema() -> Value {
    json!({
        "type": "array",
        "description": "Several providers side by side, one CloudProvider each (FULLNAME-NAME): each entry what `provider` holds.",
        "items": {"allOf": [{"$ref": "#/properties/provider"}, {"required": ["ref", "name"]}]},
    })
}

/// `schema` with an empty value allowed: a string of any pattern, length or enum
/// may be `""`, and an object's rules hold only once it has a key.
fn may_be_empty(mut schema: Value) -> Value {
    let object = schema.as_object_mut().expect("a schema");
    object.remove("minLength");
    if let Some(Value::Array(values)) = object.get_mut("enum")
        && values.iter().all(Value::is_string)
    {
        values.push(json!(""));
    }
    if let Some(Value::String(pattern)) = object.get_mut("pattern") {
        let inner = pattern
            .strip_prefix('^')
            .and_then(|p| p.strip_suffix('$'))
            .unwrap_or_else(|| panic!("an anchored pattern: {pattern}"));
        *pattern = format!("^({inner})?$");
    }
    if let Some(rules) = object.remove("allOf") {
        object.insert("if".into(), json!({"type": "object", "minProperties": 1}));
        object.insert("then".into(), json!({ "allOf": rules }));
    }
    schema
}

/// The JSON Schema of the structural schema `schema`, found at `path`.
fn translate(schema: &Value, path: &str) -> Value {
    let mut out = Map::new();
    let mut rules = Vec::new();
    let preserves_unknown = schema["x-kubernetes-preserve-unknown-fields"] == json!(true);
    for (keyword, value) in schema.as_object().expect("a schema") {
        match keyword.as_str() {
            "type" | "description" | "enum" | "pattern" | "required" | "minLength"
            | "maxLength" | "minItems" | "maxItems" | "minProperties" | "maxProperties" => {
                out.insert(keyword.clone(), value.clone());
            }
            "minimum" | "maximum" => {
                let exclusive = format!("exclusive{}", capitalised(keyword));
                let keyword = if schema[&exclusive] == json!(true) {
                    exclusive
                } else {
                    keyword.clone()
                };
                out.insert(keyword, integral(value));
            }
            // Folded into the bound above; nullability and formats (`int32`, `double`) say
            // nothing a value file can break; preserve-unknown-fields is read above.
            "exclusiveMinimum"
            | "exclusiveMaximum"
            | "nullable"
            | "format"
            | "x-kubernetes-preserve-unknown-fields" => {}
            "x-kubernetes-list-type" if value == "set" => {
                out.insert("uniqueItems".into(), true.into());
            }
            "x-kubernetes-int-or-string" => {
                out.insert("type".into(), json!(["integer", "string"]));
            }
            "properties" => {
                let properties: Map<String, Value> = value
                    .as_object()
                    .expect("properties")
                    .iter()
                    .map(|(name, property)| {
                        (name.clone(), translate(property, &format!("{path}.{name}")))
                    })
                    .collect();
                out.insert("properties".into(), properties.into());
            }
            "items" => {
                out.insert("items".into(), translate(value, &format!("{path}[]")));
            }
            "additionalProperties" => {
                out.insert(keyword.clone(), translate(value, &format!("{path}{{}}")));
            }
            "x-kubernetes-validations" => {
                for validation in value.as_array().expect("validations") {
                    let rule = validation["rule"].as_str().expect("a rule");
                    rules.push(cel_rule(rule).unwrap_or_else(|| {
                        panic!(
                            "{path}: no JSON Schema for the CEL rule {rule:?}; add its \
                             translation to chart_values_schema::cel_rule"
                        )
                    }));
                }
            }
            _ => panic!("{path}: the schema keyword {keyword} has no translation here"),
        }
    }
    if schema["type"] == "object" && !preserves_unknown && !out.contains_key("additionalProperties")
    {
        out.insert("additionalProperties".into(), false.into());
    }
    if !rules.is_empty() {
        out.insert("allOf".into(), rules.into());
    }
    out.into()
}

/// The JSON Schema that says what the CEL rule `rule` of the CRD says.
fn cel_rule(rule: &str) -> Option<Value> {
    let type_is =
        |value: &str| json!({"properties": {"type": {"const": value}}, "required": ["type"]});
    let one_of = |keys: &[&str]| {
        let each: Vec<Value> = keys.iter().map(|key| json!({"required": [key]})).collect();
        json!({ "oneOf": each })
    };
    Some(match rule {
        "[has(self.inline), has(self.configMapKeyRef), has(self.secretKeyRef)].exists_one(set, set)" => {
            one_of(&["inline", "configMapKeyRef", "secretKeyRef"])
        }
        "[has(self.configMapKeyRef), has(self.secretKeyRef)].exists_one(set, set)" => {
            one_of(&["configMapKeyRef", "secretKeyRef"])
        }
        "has(self.headerName) == (has(self.type) && self.type == 'Header')" => json!({
            "if": type_is("Header"),
            "then": {"required": ["headerName"]},
            "else": {"not": {"required": ["headerName"]}},
        }),
        "has(self.aws) == (has(self.type) && self.type == 'AwsSigV4')" => json!({
            "if": type_is("AwsSigV4"),
            "then": {"required": ["aws"]},
            "else": {"not": {"required": ["aws"]}},
        }),
        "has(self.secretKeyRef) != (has(self.type) && self.type == 'AwsSigV4')" => json!({
            "if": type_is("AwsSigV4"),
            "then": {"not": {"required": ["secretKeyRef"]}},
            "else": {"required": ["secretKeyRef"]},
        }),
        "has(self.webIdentity) ? !(has(self.accessKeyIdRef) || has(self.secretAccessKeyRef) || has(self.sessionTokenRef)) : (has(self.accessKeyIdRef) && has(self.secretAccessKeyRef))" =>
        {
            json!({
                "if": {"required": ["webIdentity"]},
                "then": {"not": {"anyOf": [
                    {"required": ["accessKeyIdRef"]},
                    {"required": ["secretAccessKeyRef"]},
                    {"required": ["sessionTokenRef"]},
                ]}},
                "else": {"required": ["accessKeyIdRef", "secretAccessKeyRef"]},
            })
        }
        _ => return None,
    })
}

/// A bound as JSON writes it: `100`, not `100.0`.
fn integral(value: &Value) -> Value {
    match value.as_f64() {
        Some(number) if number.fract() == 0.0 && number.abs() < 1e15 => json!(number as i64),
        _ => value.clone(),
    }
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[test]
fn the_chart_values_schema_follows_the_cloudprovider_spec() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let path = format!("{root}/charts/wasm-ccm/values.schema.json");
    let committed = std::fs::read_to_string(&path).expect("values.schema.json");
    let mut schema: Value = serde_json::from_str(&committed).expect("values.schema.json is JSON");
    schema["properties"]["provider"] = provider_schema(&crd_spec_schema());
    schema["properties"]["providers"] = providers_schema();
    let generated = serde_json::to_string_pretty(&schema).expect("JSON") + "\n";
    if committed != generated {
        let out = format!("{root}/target/tmp/values.schema.json");
        std::fs::create_dir_all(format!("{root}/target/tmp")).expect("target/tmp");
        std::fs::write(&out, &generated).expect("write the generated schema");
        panic!("{path} differs from the CloudProvider spec: the file as generated is {out}");
    }
}
