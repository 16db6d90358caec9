//! One validation issue, shaped like the zod issues Runway answers with: `code`, `path` (an
//! array of keys and indices), `message`, plus the code's own keys (`expected`, `values`,
//! `minimum`, `keys`, …). Messages follow zod 4's wording, as in the captured answers.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// One problem with a create body.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Issue {
    pub code: &'static str,
    pub path: Vec<Value>,
    pub message: String,
    /// The code-specific keys, flattened into the issue object.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A path below `base`: `at(&["promptImage".into()], 0)` is `["promptImage", 0]`.
pub(crate) fn at(base: &[Value], seg: impl Into<Value>) -> Vec<Value> {
    let mut path = base.to_vec();
    path.push(seg.into());
    path
}

/// zod's name for the type of a value (`undefined` when absent).
pub(crate) fn type_name(value: Option<&Value>) -> &'static str {
    match value {
        None => "undefined",
        Some(Value::Null) => "null",
        Some(Value::Bool(_)) => "boolean",
        Some(Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Array(_)) => "array",
        Some(Value::Object(_)) => "object",
    }
}

fn extra(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

impl Issue {
    /// `invalid_type`: wrong JSON type, `null`, or missing (`got` = `None`).
    pub(crate) fn invalid_type(path: Vec<Value>, expected: &str, got: Option<&Value>) -> Issue {
        Issue {
            code: "invalid_type",
            path,
            message: format!(
                "Invalid input: expected {expected}, received {}",
                type_name(got)
            ),
            extra: extra(&[("expected", json!(expected))]),
        }
    }

    /// `invalid_value`: not one of the allowed literals.
    pub(crate) fn invalid_value(path: Vec<Value>, values: Vec<Value>) -> Issue {
        let message = match values.as_slice() {
            [one] => format!("Invalid input: expected {one}"),
            _ => {
                let list: Vec<String> = values.iter().map(Value::to_string).collect();
                format!("Invalid option: expected one of {}", list.join("|"))
            }
        };
        Issue {
            code: "invalid_value",
            path,
            message,
            extra: extra(&[("values", Value::Array(values))]),
        }
    }

    /// `too_small`: a string shorter, a number or an array smaller than `minimum`.
    pub(crate) fn too_small(path: Vec<Value>, origin: &str, minimum: u64) -> Issue {
        Issue {
            code: "too_small",
            path,
            message: format!(
                "Too small: expected {origin} {}",
                bound(origin, ">=", minimum)
            ),
            extra: extra(&[
                ("origin", json!(origin)),
                ("minimum", json!(minimum)),
                ("inclusive", json!(true)),
            ]),
        }
    }

    /// `too_big`: a string longer, a number or an array larger than `maximum`.
    pub(crate) fn too_big(path: Vec<Value>, origin: &str, maximum: u64) -> Issue {
        Issue {
            code: "too_big",
            path,
            message: format!(
                "Too big: expected {origin} {}",
                bound(origin, "<=", maximum)
            ),
            extra: extra(&[
                ("origin", json!(origin)),
                ("maximum", json!(maximum)),
                ("inclusive", json!(true)),
            ]),
        }
    }

    /// `unrecognized_keys`: keys the schema does not have (the path is the object's).
    pub(crate) fn unrecognized_keys(path: Vec<Value>, keys: Vec<String>) -> Issue {
        let quoted: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
        Issue {
            code: "unrecognized_keys",
            path,
            message: format!("Unrecognized key(s): {}", quoted.join(", ")),
            extra: extra(&[("keys", json!(keys))]),
        }
    }

    /// `invalid_union` on `model`: no schema has this discriminator.
    pub(crate) fn unknown_model() -> Issue {
        Issue {
            code: "invalid_union",
            path: vec![json!("model")],
            message: "Invalid input".to_owned(),
            extra: extra(&[
                ("errors", json!([])),
                ("note", json!("No matching discriminator")),
                ("discriminator", json!("model")),
            ]),
        }
    }

    /// `custom`: a rule beyond types (asset form, frame positions).
    pub(crate) fn custom(path: Vec<Value>, message: impl Into<String>) -> Issue {
        Issue {
            code: "custom",
            path,
            message: message.into(),
            extra: Map::new(),
        }
    }
}

fn bound(origin: &str, op: &str, n: u64) -> String {
    match origin {
        "string" => format!("to have {op}{n} characters"),
        "array" => format!("to have {op}{n} items"),
        _ => format!("to be {op}{n}"),
    }
}
