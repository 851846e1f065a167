//! Reading what clients send, for every handler: path ids, authority names
//! (bare or pinned), kinds, run ids, args, the bodies of a submission and of
//! an invocation, and `Prefer: wait`. Each rule is written once here, with
//! the schema the OpenAPI document shows for it; handlers import this
//! module and `views`, never each other.

use axum::http::{HeaderMap, header};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::time::Duration;
use uuid::Uuid;

use super::error::ApiError;
use crate::domain::names::{AUTHORITY_ID_PATTERN, KIND_PATTERN};
use crate::domain::trace_context::TraceContext;
use crate::domain::{AuthorityId, AuthorityRef, Kind};
use crate::ledger::submit::Submission;

/// Longest accepted `run_id`.
const RUN_ID_MAX_LEN: usize = 128;

/// A path id: `what` names it in the refusal (`a command id`, `a hold id`).
pub(super) fn parse_id(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::InvalidId(format!("{raw:?} is not {what} (UUID)")))
}

/// An authority id in a path.
pub(super) fn authority_id(raw: &str) -> Result<AuthorityId, ApiError> {
    AuthorityId::parse(raw).map_err(|e| ApiError::InvalidId(e.to_string()))
}

/// A refused body.
pub(super) fn invalid(e: &dyn std::fmt::Display) -> ApiError {
    ApiError::InvalidBody(e.to_string())
}

/// The schema of a command kind wherever the document shows one.
pub(super) fn kind_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .pattern(Some(KIND_PATTERN))
        .description(Some(
            "A kind of the catalog: a lowercase letter, then a-z, 0-9, '_', '.', '-'; at most 64 characters.",
        ))
        .build()
}

/// The schema of an authority id wherever the document shows one.
pub(super) fn authority_id_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .pattern(Some(AUTHORITY_ID_PATTERN))
        .build()
}

/// `"agent-1"`, or `{"id": "agent-1", "generation": 7}` to pin a generation.
#[derive(Debug, utoipa::ToSchema)]
#[serde(untagged)]
pub(super) enum AuthorityField {
    Name(AuthorityName),
    Pinned(PinnedAuthority),
}

impl<'de> Deserialize<'de> for AuthorityField {
    /// By the JSON type, so a bad object says which field is wrong.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        match Value::deserialize(d)? {
            Value::String(name) => Ok(AuthorityField::Name(AuthorityName(name))),
            v @ Value::Object(_) => PinnedAuthority::deserialize(v)
                .map(AuthorityField::Pinned)
                .map_err(|e| D::Error::custom(format_args!("authority: {e}"))),
            _ => Err(D::Error::custom(
                "authority must be a name (\"payments\") or {\"id\": name, \"generation\": n}",
            )),
        }
    }
}

/// An authority id: 1-128 of A-Z, a-z, 0-9, `_`, `.`, `:`, `-`, starting
/// with a letter or digit.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub(super) struct AuthorityName(String);

impl utoipa::PartialSchema for AuthorityName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        authority_id_schema().into()
    }
}

impl utoipa::ToSchema for AuthorityName {}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PinnedAuthority {
    #[schema(schema_with = authority_id_schema)]
    id: String,
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "generation")]
    generation: i64,
}

/// A generation: a JSON integer, also when spelled with a zero fraction
/// (`7.0`), as JSON Schema counts it.
fn generation<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    if let Some(i) = n.as_i64() {
        return Ok(i);
    }
    match n.as_f64() {
        #[allow(clippy::cast_possible_truncation)]
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
        _ => Err(serde::de::Error::custom(format_args!(
            "generation must be an integer, not {n}"
        ))),
    }
}

pub(super) fn authority(field: AuthorityField) -> Result<AuthorityRef, ApiError> {
    Ok(match field {
        AuthorityField::Name(AuthorityName(id)) => AuthorityRef {
            id: AuthorityId::parse(&id).map_err(|e| invalid(&e))?,
            pinned_generation: None,
        },
        AuthorityField::Pinned(PinnedAuthority { id, generation }) => {
            if generation < 1 {
                return Err(invalid(&"a pinned authority generation is 1 or more"));
            }
            AuthorityRef {
                id: AuthorityId::parse(&id).map_err(|e| invalid(&e))?,
                pinned_generation: Some(generation),
            }
        }
    })
}

/// The authority a request names, else the one the catalog names for its
/// kind (`what` is how the request calls the kind: `kind`, `tool`).
pub(super) fn authority_or_catalog(
    field: Option<AuthorityField>,
    catalog: Option<&str>,
    what: &str,
    kind: &Kind,
) -> Result<AuthorityRef, ApiError> {
    match (field, catalog) {
        (Some(field), _) => authority(field),
        (None, Some(a)) => Ok(AuthorityRef {
            id: AuthorityId::parse(a).map_err(|e| invalid(&e))?,
            pinned_generation: None,
        }),
        (None, None) => Err(invalid(&format_args!(
            "no authority given, and the catalog names none for {what} {kind}"
        ))),
    }
}

pub(super) fn args(value: Option<Value>) -> Result<Value, ApiError> {
    match value {
        None => Ok(Value::Object(Map::new())),
        Some(v @ Value::Object(_)) if holds_nul(&v) => Err(invalid(
            &"args must not contain U+0000 (PostgreSQL cannot store it)",
        )),
        Some(v @ Value::Object(_)) => Ok(v),
        Some(_) => Err(invalid(&"args must be a JSON object")),
    }
}

/// Whether any key or string anywhere in `value` contains U+0000.
fn holds_nul(value: &Value) -> bool {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) if s.contains('\0') => return true,
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                if map.keys().any(|k| k.contains('\0')) {
                    return true;
                }
                stack.extend(map.values());
            }
            _ => {}
        }
    }
    false
}

pub(super) fn run_id(run_id: Option<String>) -> Result<Option<String>, ApiError> {
    if let Some(r) = &run_id {
        let printable = r.bytes().all(|b| (0x20..=0x7e).contains(&b));
        if r.is_empty() || r.len() > RUN_ID_MAX_LEN || !printable {
            return Err(invalid(&format_args!(
                "run_id must be 1-{RUN_ID_MAX_LEN} characters of printable ASCII"
            )));
        }
    }
    Ok(run_id)
}

/// The body of `POST /v1/commands`. Nothing else is accepted: the state,
/// scope, generation and timestamps belong to the ledger.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmitBody {
    #[schema(schema_with = kind_schema)]
    pub(super) kind: String,
    pub(super) authority: AuthorityField,
    /// A JSON object (default `{}`); the whole body nests at most 128 levels.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(super) args: Option<Value>,
    /// 1-128 characters of printable ASCII; names the agent run the request belongs to.
    #[serde(default)]
    #[schema(pattern = r"^[ -~]{1,128}$")]
    pub(super) run_id: Option<String>,
    /// RFC 3339; after it the command must not start.
    #[serde(default, deserialize_with = "instant::deadline")]
    pub(super) deadline: Option<DateTime<Utc>>,
    /// RFC 3339; the command is not claimed before it (recorded at once,
    /// cancellable until it starts). A `deadline` must be later.
    #[serde(default, deserialize_with = "instant::not_before")]
    pub(super) not_before: Option<DateTime<Utc>>,
    /// -100..=100, higher claimed first within the authority (with aging);
    /// default: the kind's `priority`; at most its `max_priority`.
    #[serde(default)]
    #[schema(minimum = -100, maximum = 100)]
    pub(super) priority: Option<i64>,
}

/// The trace context a request's command is recorded with: the request
/// span's when traces are exported (a child of the caller's, or a new
/// trace), else the caller's `traceparent` and `tracestate` as sent. A
/// header that does not conform is ignored, as W3C Trace Context says.
pub(super) fn trace_of(headers: &HeaderMap) -> Option<TraceContext> {
    crate::telemetry::current_trace(callers_trace(headers))
}

/// The `traceparent` and `tracestate` a caller sent, if they conform.
pub(super) fn callers_trace(headers: &HeaderMap) -> Option<TraceContext> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    TraceContext::from_headers(header("traceparent"), header("tracestate"))
}

/// A submission as admission takes it, from the body of `POST /v1/commands`
/// (or one item of a batch), recorded with `trace` ([`trace_of`]).
pub(super) fn submission(
    body: SubmitBody,
    trace: Option<TraceContext>,
) -> Result<Submission, ApiError> {
    Ok(Submission {
        kind: Kind::parse(&body.kind).map_err(|e| invalid(&e))?,
        authority: authority(body.authority)?,
        args: args(body.args)?,
        run_id: run_id(body.run_id)?,
        deadline: body.deadline,
        not_before: body.not_before,
        priority: body.priority,
        trace,
    })
}

/// The body of `POST /v1/invoke` (and of `POST /api/invoke`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct InvokeBody {
    /// The kind of command, as `kind` in `POST /v1/commands`.
    #[schema(schema_with = kind_schema)]
    pub(super) tool: String,
    #[serde(default, alias = "run_id")]
    #[schema(pattern = r"^[ -~]{1,128}$")]
    pub(super) run_id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(super) args: Option<Value>,
    /// Defaults to the authority the catalog names for the tool.
    #[serde(default)]
    pub(super) authority: Option<AuthorityField>,
    #[serde(default, deserialize_with = "instant::deadline")]
    pub(super) deadline: Option<DateTime<Utc>>,
    /// As `not_before` in `POST /v1/commands` (also spelled `not_before`).
    #[serde(
        default,
        alias = "not_before",
        deserialize_with = "instant::not_before"
    )]
    pub(super) not_before: Option<DateTime<Utc>>,
    /// As `priority` in `POST /v1/commands`.
    #[serde(default)]
    #[schema(minimum = -100, maximum = 100)]
    pub(super) priority: Option<i64>,
}

/// `Prefer: wait=N` (RFC 7240), among other preferences; `None` when absent
/// or malformed (a preference that cannot be honoured is ignored).
pub(super) fn prefer_wait(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get_all(header::HeaderName::from_static("prefer"))
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|pref| {
            let (name, value) = pref.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("wait") {
                return None;
            }
            let value = value.split(';').next()?.trim().trim_matches('"');
            value.parse::<u64>().ok().map(Duration::from_secs)
        })
}

/// An RFC 3339 instant in a body, whose refusal names its field (serde's
/// own error names only a line and a column).
pub(super) mod instant {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize as _, Deserializer};

    fn named<'de, D: Deserializer<'de>>(
        d: D,
        field: &str,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        let Some(text) = Option::<serde_json::Value>::deserialize(d)? else {
            return Ok(None);
        };
        text.as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| Some(t.with_timezone(&Utc)))
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "{field} must be an RFC 3339 instant such as 2026-12-01T08:00:00Z, not {text}"
                ))
            })
    }

    pub(in crate::http) fn not_before<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        named(d, "not_before")
    }

    pub(in crate::http) fn deadline<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        named(d, "deadline")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("prefer", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn prefer_wait_is_found_among_other_preferences() {
        assert_eq!(
            prefer_wait(&headers(&["wait=30"])),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            prefer_wait(&headers(&["respond-async, Wait = 5"])),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            prefer_wait(&headers(&["return=minimal", "wait=\"7\""])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(prefer_wait(&headers(&["wait=soon"])), None);
        assert_eq!(prefer_wait(&headers(&["wait=-1"])), None);
        assert_eq!(prefer_wait(&headers(&[])), None);
    }
}
