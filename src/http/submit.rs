//! `POST /v1/commands` and `POST /v1/invoke`: parse and validate the
//! request, hand it to admission (`ledger::submit`, where it becomes a row),
//! then answer: the command (waiting for its outcome when asked) or the hold.

use crate::domain::names::AUTHORITY_ID_PATTERN;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::time::Duration;
use uuid::Uuid;

use super::AppState;
use super::commands::{CommandView, applied_wait, key_expiry, location, prefer_wait, settle, view};
use super::error::{ApiError, Problem};
use super::extract::{AppJson, Auth};
use super::holds::HeldAnswer;
use crate::domain::admission::KeyMode;
use crate::domain::{AuthorityId, AuthorityRef, Disposition, IdempotencyKey, KeyError, Kind};
use crate::ledger::submit::{Admitted, Submission, admit};

const IDEMPOTENCY_KEY: &str = "idempotency-key";
const REPLAYED: &str = "idempotent-replayed";

/// Longest accepted `run_id`.
const RUN_ID_MAX_LEN: usize = 128;
/// How long `POST /v1/invoke` waits for the outcome unless `Prefer: wait` says otherwise.
const INVOKE_WAIT: Duration = Duration::from_secs(30);

/// The body of `POST /v1/commands`. Nothing else is accepted: the state,
/// scope, generation and timestamps belong to the ledger.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SubmitBody {
    #[schema(pattern = r"^[a-z][a-z0-9_.\-]{0,63}$")]
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
    #[serde(default)]
    pub(super) deadline: Option<DateTime<Utc>>,
    /// RFC 3339; the command is not claimed before it (recorded at once,
    /// cancellable until it starts). A `deadline` must be later.
    #[serde(default)]
    pub(super) not_before: Option<DateTime<Utc>>,
    /// -100..=100, higher claimed first within the authority (with aging);
    /// default: the kind's `priority`; at most its `max_priority`.
    #[serde(default)]
    #[schema(minimum = -100, maximum = 100)]
    pub(super) priority: Option<i64>,
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

/// The schema of an authority id wherever the document shows one.
pub(super) fn authority_id_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .pattern(Some(AUTHORITY_ID_PATTERN))
        .build()
}

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

pub(super) fn invalid(e: &dyn std::fmt::Display) -> ApiError {
    ApiError::InvalidBody(e.to_string())
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

pub(super) fn validate(body: SubmitBody) -> Result<Submission, ApiError> {
    Ok(Submission {
        kind: Kind::parse(&body.kind).map_err(|e| invalid(&e))?,
        authority: authority(body.authority)?,
        args: args(body.args)?,
        run_id: run_id(body.run_id)?,
        deadline: body.deadline,
        not_before: body.not_before,
        priority: body.priority,
    })
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(KeyError::Repeated.into()),
        (Some(v), None) => Ok(Some(IdempotencyKey::parse_header(v.as_bytes())?)),
    }
}

/// `POST /v1/commands`: the pending row is committed before any 2xx is sent.
#[utoipa::path(post, path = "/v1/commands", operation_id = "submitCommand", tag = "commands",
    request_body = SubmitBody,
    params(("Idempotency-Key" = String, Header, description = "1-255 printable ASCII, bare or as an RFC 8941 quoted string. Kinds whose policy lets the intent stand in for a key (`key = \"fingerprint\"` in ledger.toml) may omit it", pattern = r"^[!#-~][!-~]{0,254}$"),
           ("Prefer" = Option<String>, Header, description = "wait=N: answer once the command is terminal, at most N seconds")),
    responses((status = 202, description = "new (a command), or held (a hold)", body = Submitted<'static>),
              (status = 200, description = "replay or coalesced", body = CommandView<'static>),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 408, body = Problem),
              (status = 409, body = Problem), (status = 413, body = Problem), (status = 415, body = Problem),
              (status = 422, body = Problem), (status = 429, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn submit(
    State(state): State<AppState>,
    Auth(principal): Auth,
    headers: HeaderMap,
    AppJson(body): AppJson<SubmitBody>,
) -> Result<Response, ApiError> {
    state.counters.requests(1);
    let key = idempotency_key(&headers)?;
    let wait = prefer_wait(&headers).map(|w| w.min(state.max_wait));
    let sub = validate(body)?;
    let policy = state.policies.get(sub.kind.as_str()).clone();
    let (admitted, _) = admit(
        &state.pool,
        &state.wake,
        &state.group,
        &principal,
        key,
        &sub,
        &policy,
    )
    .await
    .map_err(ApiError::from)
    .inspect_err(|e| state.counters.refused(e))?;
    match admitted {
        Admitted::Held(hold) => {
            state.counters.count(Disposition::Held);
            let mut response = (
                StatusCode::ACCEPTED,
                Json(Submitted::Held(HeldAnswer::new(&hold))),
            )
                .into_response();
            let path = HeaderValue::from_str(&format!("/v1/holds/{}", hold.id))
                .expect("a uuid path is a valid header");
            response.headers_mut().insert(header::LOCATION, path);
            Ok(response)
        }
        Admitted::Command { row, disposition } => {
            state.counters.count(disposition);
            let (row, waited) = settle(&state, row, wait).await?;
            let status = if disposition == Disposition::New {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            let body = Submitted::Command(view(&row, Some(disposition)));
            let mut response = (status, Json(body)).into_response();
            let h = response.headers_mut();
            h.insert(header::LOCATION, location(row.id));
            if disposition == Disposition::Replay {
                h.insert(REPLAYED, HeaderValue::from_static("true"));
            }
            applied_wait(&mut response, waited);
            key_expiry(&mut response, &row, state.retention);
            Ok(response)
        }
    }
}

/// What `POST /v1/commands` answers: the command, or the hold that stopped it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
enum Submitted<'a> {
    Command(CommandView<'a>),
    Held(HeldAnswer<'a>),
}

/// The body of `POST /v1/invoke`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct InvokeBody {
    /// The kind of command, as `kind` in `POST /v1/commands`.
    #[schema(pattern = r"^[a-z][a-z0-9_.\-]{0,63}$")]
    tool: String,
    #[serde(default, alias = "run_id")]
    #[schema(pattern = r"^[ -~]{1,128}$")]
    run_id: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    args: Option<Value>,
    /// Defaults to the authority the catalog names for the tool.
    #[serde(default)]
    authority: Option<AuthorityField>,
    #[serde(default)]
    deadline: Option<DateTime<Utc>>,
    /// As `not_before` in `POST /v1/commands` (also spelled `not_before`).
    #[serde(default, alias = "not_before")]
    not_before: Option<DateTime<Utc>>,
    /// As `priority` in `POST /v1/commands`.
    #[serde(default)]
    #[schema(minimum = -100, maximum = 100)]
    priority: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct InvokeView<'a> {
    /// `executed`, `coalesced`, `replay`, `held` or `pending`.
    outcome: &'static str,
    /// The outcome is `coalesced`: another call's command answered this one.
    coalesced: bool,
    /// The outcome is `replay`: the command had finished before this call.
    replay: bool,
    /// The intent digest: equal for every spelling of one intent.
    fingerprint: String,
    command_id: Option<Uuid>,
    state: Option<&'a str>,
    #[schema(value_type = Option<Object>)]
    result: Option<&'a Value>,
    #[schema(value_type = Option<Object>)]
    error: Option<&'a Value>,
    hold_id: Option<Uuid>,
}

/// `POST /v1/invoke`: for agents. Records the intent (keyless unless an
/// `Idempotency-Key` is sent), waits (bounded) for the outcome, and says
/// what happened: `executed` (this call's command ran), `coalesced` (it was
/// another call's command, in flight when this one arrived), `replay` (it
/// had already finished), `held`, or `pending` (no outcome before the wait ended).
#[utoipa::path(post, path = "/v1/invoke", operation_id = "invoke", tag = "commands",
    request_body = InvokeBody,
    params(("Prefer" = Option<String>, Header, description = "wait=N (default 30)")),
    responses((status = 200, description = "executed, coalesced or replay", body = InvokeView<'static>),
              (status = 202, description = "held or pending", body = InvokeView<'static>),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 409, body = Problem),
              (status = 429, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn invoke(
    State(state): State<AppState>,
    Auth(principal): Auth,
    headers: HeaderMap,
    AppJson(body): AppJson<InvokeBody>,
) -> Result<Response, ApiError> {
    state.counters.requests(1);
    let key = idempotency_key(&headers)?;
    let wait = prefer_wait(&headers)
        .unwrap_or(INVOKE_WAIT)
        .min(state.max_wait);
    let kind = Kind::parse(&body.tool).map_err(|e| invalid(&e))?;
    let mut policy = state.policies.get(kind.as_str()).clone();
    let authority = match (body.authority, &policy.authority) {
        (Some(field), _) => authority(field)?,
        (None, Some(a)) => AuthorityRef {
            id: AuthorityId::parse(a).map_err(|e| invalid(&e))?,
            pinned_generation: None,
        },
        (None, None) => {
            return Err(invalid(&format_args!(
                "no authority given, and the catalog names none for tool {kind}"
            )));
        }
    };
    // Agents do not send keys: the intent stands in for one here.
    policy.key = KeyMode::Fingerprint;
    let sub = Submission {
        kind,
        authority,
        args: args(body.args)?,
        run_id: run_id(body.run_id)?,
        deadline: body.deadline,
        not_before: body.not_before,
        priority: body.priority,
    };
    let (admitted, canonical) = admit(
        &state.pool,
        &state.wake,
        &state.group,
        &principal,
        key,
        &sub,
        &policy,
    )
    .await
    .map_err(ApiError::from)
    .inspect_err(|e| state.counters.refused(e))?;
    let fingerprint = canonical.intent_digest.to_string();
    match admitted {
        Admitted::Held(hold) => {
            state.counters.count(Disposition::Held);
            let v = InvokeView {
                outcome: "held",
                coalesced: false,
                replay: false,
                fingerprint,
                command_id: None,
                state: None,
                result: None,
                error: None,
                hold_id: Some(hold.id),
            };
            Ok((StatusCode::ACCEPTED, Json(v)).into_response())
        }
        Admitted::Command { row, disposition } => {
            state.counters.count(disposition);
            let (row, _) = settle(&state, row, Some(wait)).await?;
            let outcome = match (disposition, row.state().is_terminal()) {
                (_, false) => "pending",
                (Disposition::New, true) => "executed",
                (Disposition::Coalesced, true) => "coalesced",
                (_, true) => "replay",
            };
            let status = if outcome == "pending" {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            let v = InvokeView {
                outcome,
                coalesced: outcome == "coalesced",
                replay: outcome == "replay",
                fingerprint,
                command_id: Some(row.id),
                state: Some(&row.state),
                result: row.result.as_ref(),
                error: row.error.as_ref(),
                hold_id: None,
            };
            let mut response = (status, Json(v)).into_response();
            response
                .headers_mut()
                .insert(header::LOCATION, location(row.id));
            key_expiry(&mut response, &row, state.retention);
            Ok(response)
        }
    }
}
