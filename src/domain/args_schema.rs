//! A kind's declared arguments (`args_schema` in the catalog), compiled once
//! and enforced at admission: args that do not match are refused before
//! anything is recorded, with every failing field named by its JSON pointer.
//! The schema is a JSON Schema (2020-12 unless it names another draft in
//! `$schema`); `format` is checked (an address declared `"format":
//! "email"` must be one), and references must resolve inside the schema:
//! nothing is fetched, so a remote `$ref` is refused when the catalog loads.

use serde_json::Value;
use std::sync::Arc;

/// At most this many failures are listed in one refusal.
const MAX_VIOLATIONS: usize = 20;

/// A compiled args schema: the document callers are shown (`GET
/// /v1/kinds`, an MCP tool's input schema) and the validator admission runs.
#[derive(Clone)]
pub struct ArgsSchema {
    source: Value,
    validator: Arc<jsonschema::Validator>,
}

impl std::fmt::Debug for ArgsSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ArgsSchema").field(&self.source).finish()
    }
}

/// Two schemas are the same when their documents are.
impl PartialEq for ArgsSchema {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for ArgsSchema {}

/// One field of the args that the schema refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// A JSON pointer into the args (`""` is the args object itself; a
    /// missing or unexpected field is pointed at by its own name).
    pub pointer: String,
    pub message: String,
}

/// Args that do not match their kind's schema: every failing field, in the
/// validator's order (at most [`MAX_VIOLATIONS`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the args do not match the kind's args_schema: {}", summary(.violations, *.more))]
pub struct SchemaMismatch {
    pub violations: Vec<Violation>,
    /// How many more failures there were than are listed.
    pub more: usize,
}

impl SchemaMismatch {
    /// Adds a failure found by another check (canonical form's, of money
    /// it cannot read), unless the field is named already, so that one
    /// refusal names every failing field.
    pub fn also(&mut self, pointer: &str, message: String) {
        if self.violations.iter().any(|v| v.pointer == pointer) {
            return;
        }
        if self.violations.len() < MAX_VIOLATIONS {
            self.violations.push(Violation {
                pointer: pointer.to_owned(),
                message,
            });
        } else {
            self.more += 1;
        }
    }
}

fn summary(violations: &[Violation], more: usize) -> String {
    let mut parts: Vec<String> = violations
        .iter()
        .map(|v| format!("{}: {}", display(&v.pointer), v.message))
        .collect();
    if more > 0 {
        parts.push(format!("and {more} more"));
    }
    parts.join("; ")
}

fn display(pointer: &str) -> &str {
    if pointer.is_empty() { "/" } else { pointer }
}

impl ArgsSchema {
    /// Compiles a kind's args schema: a JSON Schema object describing the
    /// args object (its `type`, when given, is `"object"`; it is added
    /// when not). Refused: anything that is not a valid JSON Schema, and a
    /// reference that does not resolve inside the document.
    pub fn compile(schema: &Value) -> Result<ArgsSchema, String> {
        let Value::Object(map) = schema else {
            return Err("args_schema must be a table (a JSON Schema object)".to_owned());
        };
        let source = match map.get("type") {
            None => {
                let mut map = map.clone();
                map.insert("type".to_owned(), Value::String("object".to_owned()));
                Value::Object(map)
            }
            Some(t) if t == "object" => schema.clone(),
            Some(t) => {
                return Err(format!(
                    "args_schema describes the args object: its type is \"object\", not {t}"
                ));
            }
        };
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&source)
            .map_err(|e| format!("args_schema is not a valid JSON Schema: {e}"))?;
        Ok(ArgsSchema {
            source,
            validator: Arc::new(validator),
        })
    }

    /// The schema document, as callers are shown it.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Checks `args` against the schema.
    pub fn check(&self, args: &Value) -> Result<(), SchemaMismatch> {
        let mut violations = Vec::new();
        let mut total = 0;
        for error in self.validator.iter_errors(args) {
            for v in violations_of(&error, args) {
                total += 1;
                if violations.len() < MAX_VIOLATIONS {
                    violations.push(v);
                }
            }
        }
        if total == 0 {
            return Ok(());
        }
        Err(SchemaMismatch {
            more: total - violations.len(),
            violations,
        })
    }
}

/// One validation error as the fields it names: a missing required field
/// and each unexpected field by its own pointer, anything else where it
/// sits. Messages mask the value (the caller sent it; a long one would
/// only bloat the answer).
fn violations_of(error: &jsonschema::ValidationError<'_>, args: &Value) -> Vec<Violation> {
    use jsonschema::error::ValidationErrorKind as K;
    let at = error.instance_path().as_str().to_owned();
    let child = |name: &str| format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"));
    match error.kind() {
        K::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            vec![Violation {
                pointer: child(&name),
                message: "is required and missing".to_owned(),
            }]
        }
        K::AdditionalProperties { unexpected } | K::UnevaluatedProperties { unexpected } => {
            unexpected
                .iter()
                .map(|name| unexpected_field(child(name)))
                .collect()
        }
        // `additionalProperties: false` beside no `properties` allows no
        // field at all, and the validator reports only the first, at the
        // object: name each of its fields.
        K::FalseSchema
            if error
                .schema_path()
                .as_str()
                .ends_with("/additionalProperties") =>
        {
            match args.pointer(&at) {
                Some(Value::Object(object)) if !object.is_empty() => object
                    .keys()
                    .map(|name| unexpected_field(child(name)))
                    .collect(),
                _ => vec![unexpected_field(at)],
            }
        }
        _ => vec![Violation {
            pointer: at,
            message: error.masked().to_string(),
        }],
    }
}

fn unexpected_field(pointer: String) -> Violation {
    Violation {
        pointer,
        message: "is not a field the schema allows".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refund() -> ArgsSchema {
        ArgsSchema::compile(&json!({
            "required": ["to", "amount"],
            "properties": {
                "to": {"type": "string", "format": "email"},
                "amount": {"type": "string"},
                "mode": {"type": "string", "enum": ["hang", "stall", "reject"]}
            }
        }))
        .unwrap()
    }

    fn pointers(args: &Value) -> Vec<String> {
        refund()
            .check(args)
            .unwrap_err()
            .violations
            .into_iter()
            .map(|v| v.pointer)
            .collect()
    }

    #[test]
    fn args_that_match_the_schema_pass() {
        let s = refund();
        assert_eq!(s.source()["type"], "object");
        assert!(
            s.check(&json!({"to": "ada@example.com", "amount": "12.00 USD", "trace_id": "a-1"}))
                .is_ok()
        );
    }

    #[test]
    fn each_missing_misnamed_or_mistyped_field_is_named_by_its_pointer() {
        assert_eq!(pointers(&json!({"amount": "1.00 USD"})), ["/to"]);
        let mut both = pointers(&json!({}));
        both.sort();
        assert_eq!(both, ["/amount", "/to"]);
        assert_eq!(
            pointers(&json!({"customer": "x@y.z", "amount": "1.00 USD"})),
            ["/to"]
        );
        let mut typed = pointers(&json!({"to": "not an address", "amount": 12, "mode": "fly"}));
        typed.sort();
        assert_eq!(typed, ["/amount", "/mode", "/to"]);
        let refused = refund().check(&json!({"amount": "1.00 USD"})).unwrap_err();
        assert!(
            refused.to_string().contains("/to: is required"),
            "{refused}"
        );
    }

    #[test]
    fn unexpected_fields_are_named_one_by_one() {
        let closed = ArgsSchema::compile(&json!({
            "properties": {"to": {"type": "string"}},
            "additionalProperties": false
        }))
        .unwrap();
        let refused = closed
            .check(&json!({"to": "a", "customer": "b", "a/b": 1}))
            .unwrap_err();
        let mut pointers: Vec<&str> = refused
            .violations
            .iter()
            .map(|v| v.pointer.as_str())
            .collect();
        pointers.sort_unstable();
        assert_eq!(pointers, ["/a~1b", "/customer"]);
    }

    #[test]
    fn another_checks_failure_is_added_once_per_field() {
        let mut refused = refund()
            .check(&json!({"customer": "x@y.z", "amount": "twelve bucks"}))
            .unwrap_err();
        refused.also("/amount", "not money".to_owned());
        refused.also("/to", "named already".to_owned());
        let named: Vec<(&str, &str)> = refused
            .violations
            .iter()
            .map(|v| (v.pointer.as_str(), v.message.as_str()))
            .collect();
        assert_eq!(
            named,
            [("/to", "is required and missing"), ("/amount", "not money")]
        );
    }

    #[test]
    fn a_long_list_of_failures_is_cut_and_counted() {
        let many = ArgsSchema::compile(&json!({"additionalProperties": false})).unwrap();
        let args: serde_json::Map<String, Value> =
            (0..30).map(|i| (format!("f{i}"), json!(i))).collect();
        let refused = many.check(&Value::Object(args)).unwrap_err();
        assert_eq!(
            (refused.violations.len(), refused.more),
            (20, 10),
            "{refused:?}"
        );
        assert!(refused.to_string().ends_with("and 10 more"));
    }

    #[test]
    fn a_schema_that_is_not_a_json_schema_is_refused() {
        for (bad, says) in [
            (json!(3), "must be a table"),
            (json!({"type": "string"}), "its type is \"object\""),
            (
                json!({"properties": {"to": {"type": "text"}}}),
                "not a valid JSON Schema",
            ),
            (json!({"required": "to"}), "not a valid JSON Schema"),
            (
                json!({"properties": {"to": {"minLength": -1}}}),
                "not a valid JSON Schema",
            ),
        ] {
            let e = ArgsSchema::compile(&bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_reference_is_resolved_inside_the_schema_never_fetched() {
        let local = ArgsSchema::compile(&json!({
            "$defs": {"email": {"type": "string", "format": "email"}},
            "properties": {"to": {"$ref": "#/$defs/email"}}
        }))
        .unwrap();
        assert!(local.check(&json!({"to": "x"})).is_err());
        for remote in [
            "https://example.com/schemas/refund.json",
            "file:///etc/passwd",
        ] {
            let e =
                ArgsSchema::compile(&json!({"properties": {"to": {"$ref": remote}}})).unwrap_err();
            assert!(e.contains("not a valid JSON Schema"), "{remote}: {e}");
        }
    }
}
