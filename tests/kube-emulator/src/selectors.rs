//! Label and field selectors (`labelSelector=` / `fieldSelector=` on list
//! and watch): the grammar of apimachinery's `labels.Parse` and
//! `fields.ParseSelector`, the structured `metav1.LabelSelector` of
//! workloads (`LabelSelectorAsSelector`), and matching against an object.

use std::fmt;

use serde_json::{Map, Value};

use crate::validation;

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
}

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Exists,
    DoesNotExist,
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    GreaterThan(i64),
    LessThan(i64),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
}

fn lex(input: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = input.chars().collect();
    let mut i = 0;
    let special = |c: char| matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>');
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let (token, len) = match (c, next) {
            ('!', Some('=')) => (Token::NotEq, 2),
            ('=', Some('=')) => (Token::DoubleEq, 2),
            ('!', _) => (Token::Not, 1),
            ('=', _) => (Token::Eq, 1),
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            (',', _) => (Token::Comma, 1),
            ('>', _) => (Token::Gt, 1),
            ('<', _) => (Token::Lt, 1),
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !special(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                tokens.push(match word.as_str() {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Ident(word),
                });
                continue;
            }
        };
        tokens.push(token);
        i += len;
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        token
    }

    fn key(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Ident(key)) => {
                let errs = validation::qualified_name(&key);
                if let Some(msg) = errs.first() {
                    return Err(format!(
                        "unable to parse requirement: key: Invalid value: {}: {msg}",
                        crate::status::quote(&key)
                    ));
                }
                Ok(key)
            }
            other => Err(format!(
                "found '{}', expected: identifier",
                describe(other.as_ref())
            )),
        }
    }

    fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(Token::Ident(_)) => match self.next() {
                Some(Token::Ident(v)) => Ok(v),
                _ => unreachable!("peeked an identifier"),
            },
            // `key=` with nothing after selects the empty value.
            Some(Token::Comma) | None => Ok(String::new()),
            other => Err(format!("found '{}', expected: identifier", describe(other))),
        }
    }

    fn values(&mut self) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Token::Open) => {}
            other => {
                return Err(format!(
                    "found '{}', expected: '('",
                    describe(other.as_ref())
                ));
            }
        }
        let mut values = Vec::new();
        loop {
            match self.next() {
                Some(Token::Ident(v)) => values.push(v),
                Some(Token::Close) if values.is_empty() => break,
                other => {
                    return Err(format!(
                        "found '{}', expected: identifier",
                        describe(other.as_ref())
                    ));
                }
            }
            match self.next() {
                Some(Token::Comma) => {}
                Some(Token::Close) => break,
                other => {
                    return Err(format!(
                        "found '{}', expected: ',' or ')'",
                        describe(other.as_ref())
                    ));
                }
            }
        }
        if values.is_empty() {
            return Err("unable to parse requirement: for 'in', 'notin' operators, values set can't be empty".to_owned());
        }
        Ok(values)
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        if self.peek() == Some(&Token::Not) {
            self.pos += 1;
            let key = self.key()?;
            return Ok(Requirement {
                key,
                op: Op::DoesNotExist,
            });
        }
        let key = self.key()?;
        let op = match self.peek() {
            None | Some(Token::Comma) => Op::Exists,
            Some(Token::Eq | Token::DoubleEq) => {
                self.pos += 1;
                Op::Equals(self.value()?)
            }
            Some(Token::NotEq) => {
                self.pos += 1;
                Op::NotEquals(self.value()?)
            }
            Some(Token::In) => {
                self.pos += 1;
                Op::In(self.values()?)
            }
            Some(Token::NotIn) => {
                self.pos += 1;
                Op::NotIn(self.values()?)
            }
            Some(Token::Gt | Token::Lt) => {
                let greater = self.next() == Some(Token::Gt);
                let value = self.value()?;
                let n: i64 = value.parse().map_err(|_| {
                    format!("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: {value}")
                })?;
                if greater {
                    Op::GreaterThan(n)
                } else {
                    Op::LessThan(n)
                }
            }
            other => {
                return Err(format!(
                    "found '{}', expected: '=', '!=', '==', 'in', notin'",
                    describe(other)
                ));
            }
        };
        if let Op::Equals(v) | Op::NotEquals(v) = &op
            && let Some(msg) = validation::label_value(v).first()
        {
            return Err(format!(
                "unable to parse requirement: values[0][{key}]: Invalid value: {}: {msg}",
                crate::status::quote(v)
            ));
        }
        if let Op::In(vs) | Op::NotIn(vs) = &op {
            for (i, v) in vs.iter().enumerate() {
                if let Some(msg) = validation::label_value(v).first() {
                    return Err(format!(
                        "unable to parse requirement: values[{i}][{key}]: Invalid value: {}: {msg}",
                        crate::status::quote(v)
                    ));
                }
            }
        }
        Ok(Requirement { key, op })
    }
}

fn describe(token: Option<&Token>) -> String {
    match token {
        None => String::new(),
        Some(Token::Ident(s)) => s.clone(),
        Some(Token::Not) => "!".into(),
        Some(Token::Eq) => "=".into(),
        Some(Token::DoubleEq) => "==".into(),
        Some(Token::NotEq) => "!=".into(),
        Some(Token::In) => "in".into(),
        Some(Token::NotIn) => "notin".into(),
        Some(Token::Open) => "(".into(),
        Some(Token::Close) => ")".into(),
        Some(Token::Comma) => ",".into(),
        Some(Token::Gt) => ">".into(),
        Some(Token::Lt) => "<".into(),
    }
}

impl LabelSelector {
    /// Parses a selector such as `app=web,tier!=db,env in (a,b),!legacy`.
    pub fn parse(input: &str) -> Result<LabelSelector, String> {
        let mut parser = Parser {
            tokens: lex(input)?,
            pos: 0,
        };
        let mut requirements = Vec::new();
        while parser.peek().is_some() {
            requirements.push(parser.requirement()?);
            match parser.next() {
                None => break,
                Some(Token::Comma) if parser.peek().is_some() => {}
                other => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        describe(other.as_ref())
                    ));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// `LabelSelectorAsSelector` of a `metav1.LabelSelector` object:
    /// `matchLabels` as equality requirements, `matchExpressions` by their
    /// operator, sorted by key. The error is apimachinery's for an unknown
    /// operator or a requirement `NewRequirement` refuses.
    pub fn from_api(selector: &Value) -> Result<LabelSelector, String> {
        let mut requirements: Vec<Requirement> = selector
            .get("matchLabels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(key, value)| Requirement {
                key: key.clone(),
                op: Op::Equals(value.as_str().unwrap_or("").to_owned()),
            })
            .collect();
        let expressions = selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for expression in expressions {
            let key = expression.get("key").and_then(Value::as_str).unwrap_or("");
            let values: Vec<String> = crate::meta::string_list(expression.get("values"));
            let operator = expression
                .get("operator")
                .and_then(Value::as_str)
                .unwrap_or("");
            let op = match operator {
                "In" | "NotIn" if values.is_empty() => {
                    return Err("for 'in', 'notin' operators, values set can't be empty".into());
                }
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err("values set must be empty for exists and does not exist".into());
                }
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => {
                    return Err(format!(
                        "{} is not a valid label selector operator",
                        crate::status::quote(other)
                    ));
                }
            };
            requirements.push(Requirement {
                key: key.to_owned(),
                op,
            });
        }
        for requirement in &requirements {
            if let Some(msg) = validation::qualified_name(&requirement.key).first() {
                return Err(format!(
                    "key: Invalid value: {}: {msg}",
                    crate::status::quote(&requirement.key)
                ));
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key).and_then(Value::as_str);
            match &r.op {
                Op::Exists => value.is_some(),
                Op::DoesNotExist => value.is_none(),
                Op::Equals(v) => value == Some(v.as_str()),
                Op::NotEquals(v) => value != Some(v.as_str()),
                Op::In(vs) => value.is_some_and(|x| vs.iter().any(|v| v == x)),
                Op::NotIn(vs) => value.is_none_or(|x| !vs.iter().any(|v| v == x)),
                Op::GreaterThan(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                Op::LessThan(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

/// The selector as `labels.Selector.String()` writes it:
/// `app=web,tier in (a,b),!legacy`.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sorted = |values: &[String]| {
            let mut values = values.to_vec();
            values.sort();
            values.join(",")
        };
        let requirements: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match &r.op {
                Op::Exists => r.key.clone(),
                Op::DoesNotExist => format!("!{}", r.key),
                Op::Equals(v) => format!("{}={v}", r.key),
                Op::NotEquals(v) => format!("{}!={v}", r.key),
                Op::In(vs) => format!("{} in ({})", r.key, sorted(vs)),
                Op::NotIn(vs) => format!("{} notin ({})", r.key, sorted(vs)),
                Op::GreaterThan(n) => format!("{}>{n}", r.key),
                Op::LessThan(n) => format!("{}<{n}", r.key),
            })
            .collect();
        f.write_str(&requirements.join(","))
    }
}

/// A parsed field selector: `field=value` / `field!=value` terms, all of
/// which must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

#[derive(Debug, Clone, PartialEq)]
struct FieldTerm {
    field: String,
    equal: bool,
    value: String,
}

/// Splits on `sep` not preceded by a backslash escape.
fn split_escaped(input: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    for c in input.chars() {
        if escaped {
            current.push('\\');
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    if escaped {
        current.push('\\');
    }
    parts.push(current);
    parts
}

fn unescape(value: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            if c == ',' || c == '=' {
                return Err(format!("invalid field selector: unescaped character: {c}"));
            }
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(e @ ('\\' | ',' | '=')) => out.push(e),
            Some(e) => {
                return Err(format!(
                    "invalid field selector: unrecognized escape sequence: \\{e}"
                ));
            }
            None => return Err("invalid field selector: unterminated escape sequence".to_owned()),
        }
    }
    Ok(out)
}

impl FieldSelector {
    /// Parses a selector such as `metadata.name=n1,spec.unschedulable!=true`.
    pub fn parse(input: &str) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        if input.is_empty() {
            return Ok(FieldSelector { terms });
        }
        for term in split_escaped(input, ',') {
            if term.is_empty() {
                continue;
            }
            let found = term.char_indices().find_map(|(i, _)| {
                ["!=", "==", "="]
                    .iter()
                    .find(|op| term[i..].starts_with(**op))
                    .map(|op| (i, *op))
            });
            let Some((at, op)) = found else {
                return Err(format!(
                    "invalid selector: '{input}'; can't understand '{term}'"
                ));
            };
            terms.push(FieldTerm {
                field: term[..at].to_owned(),
                equal: op != "!=",
                value: unescape(&term[at + op.len()..])?,
            });
        }
        Ok(FieldSelector { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The field names the selector uses.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// The value `field` must equal, if a term requires one
    /// (`RequiresExactMatch`): `metadata.name=x` or `metadata.name==x`.
    pub fn requires_exact(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.equal && t.field == field)
            .map(|t| t.value.as_str())
    }

    /// Whether an object whose selectable fields are `fields` is selected.
    pub fn matches(&self, fields: &[(String, String)]) -> bool {
        self.terms.iter().all(|t| {
            let value = fields
                .iter()
                .find(|(name, _)| *name == t.field)
                .map_or("", |(_, v)| v.as_str());
            (value == t.value) == t.equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_workload_selector_prints_and_matches_as_labels_selector_does() {
        let selector = LabelSelector::from_api(&serde_json::json!({
            "matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "canary"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }))
        .unwrap();
        assert_eq!(
            selector.to_string(),
            "app=shop,env in (canary,prod),!legacy,tier=web"
        );
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
                .collect::<Map<String, Value>>()
        };
        assert!(selector.matches(&labels(&[
            ("app", "shop"),
            ("tier", "web"),
            ("env", "prod")
        ])));
        assert!(!selector.matches(&labels(&[("app", "shop"), ("tier", "web")])));
        let bad = serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        assert_eq!(
            LabelSelector::from_api(&bad).unwrap_err(),
            "\"Near\" is not a valid label selector operator"
        );
    }

    #[test]
    fn label_selector_operators() {
        let l = labels(json!({"app": "web", "tier": "front", "n": "5"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,api)", true),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=web,tier=back", false),
            ("n>4", true),
            ("n<4", false),
            ("", true),
        ] {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(&l), want, "{sel}");
        }
    }

    #[test]
    fn bad_label_selectors_are_errors() {
        for sel in ["app in", "app in ()", "=x", "a,", "bad key!=x", "app=a b"] {
            assert!(LabelSelector::parse(sel).is_err(), "{sel}");
        }
    }

    #[test]
    fn field_selectors() {
        let fields = vec![
            ("metadata.name".to_owned(), "n1".to_owned()),
            ("spec.unschedulable".to_owned(), "false".to_owned()),
        ];
        let s = FieldSelector::parse("metadata.name=n1,spec.unschedulable!=true").unwrap();
        assert!(s.matches(&fields));
        let s = FieldSelector::parse("metadata.name==n2").unwrap();
        assert!(!s.matches(&fields));
        assert!(FieldSelector::parse("nonsense").is_err());
        assert_eq!(s.requires_exact("metadata.name"), Some("n2"));
        assert_eq!(s.requires_exact("spec.unschedulable"), None);
        let s = FieldSelector::parse("metadata.name!=n1").unwrap();
        assert_eq!(s.requires_exact("metadata.name"), None);
        let s = FieldSelector::parse(r"a=x\,y").unwrap();
        assert!(s.matches(&[("a".to_owned(), "x,y".to_owned())]));
    }
}
