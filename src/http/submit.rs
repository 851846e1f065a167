//! Where a request becomes a row: `POST /v1/commands` and `POST /v1/invoke`.
//! The request is validated and canonicalized (the pure domain), then
//! admitted: under its key (new / replay / conflict), or, keyless, under its
//! intent (new / the same command: coalesced or replay / held / refused).
//! The unique index on (scope, key) decides every race; keyless commands are
//! recorded under a key derived from the intent, so racing copies collide.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;
use uuid::Uuid;

use super::AppState;
use super::commands::{CommandView, applied_wait, key_expiry, location, prefer_wait, settle, view};
use super::error::{ApiError, Problem};
use super::extract::{AppJson, Auth};
use super::holds::HeldAnswer;
use crate::db::holds::{HoldRow, NewHold};
use crate::db::{self, CommandRow, NewCommand, Principal};
use crate::domain::admission::{
    IntentVerdict, KeyMode, KindPolicy, Latest, derived_key, intent_verdict,
};
use crate::domain::{
    AuthorityId, AuthorityRef, CanonicalRequest, Disposition, IdempotencyKey, KeyError, Kind,
    RequestDigest, canonical_request, differences, disposition, request_digest_v1,
};

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
    kind: String,
    authority: AuthorityField,
    /// A JSON object (default `{}`); the whole body nests at most 128 levels.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    args: Option<Value>,
    /// 1-128 characters of printable ASCII; names the agent run the request belongs to.
    #[serde(default)]
    #[schema(pattern = r"^[ -~]{1,128}$")]
    run_id: Option<String>,
    /// RFC 3339; after it the command must not start.
    #[serde(default)]
    deadline: Option<DateTime<Utc>>,
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
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .pattern(Some(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"))
            .into()
    }
}

impl utoipa::ToSchema for AuthorityName {}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PinnedAuthority {
    #[schema(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")]
    id: String,
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "generation")]
    generation: i64,
}

/// A validated submission.
#[derive(Debug)]
struct Submission {
    kind: Kind,
    authority: AuthorityRef,
    args: Value,
    run_id: Option<String>,
    deadline: Option<DateTime<Utc>>,
}

fn invalid(e: &dyn std::fmt::Display) -> ApiError {
    ApiError::InvalidBody(e.to_string())
}

fn authority(field: AuthorityField) -> Result<AuthorityRef, ApiError> {
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

fn args(value: Option<Value>) -> Result<Value, ApiError> {
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

fn run_id(run_id: Option<String>) -> Result<Option<String>, ApiError> {
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

fn validate(body: SubmitBody) -> Result<Submission, ApiError> {
    Ok(Submission {
        kind: Kind::parse(&body.kind).map_err(|e| invalid(&e))?,
        authority: authority(body.authority)?,
        args: args(body.args)?,
        run_id: run_id(body.run_id)?,
        deadline: body.deadline,
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

/// What admission did with a request.
#[derive(Debug)]
enum Admitted {
    Command {
        row: CommandRow,
        disposition: Disposition,
    },
    Held(HoldRow),
}

/// Admits a validated submission: records it, or finds what it repeats.
async fn admit(
    state: &AppState,
    principal: &Principal,
    key: Option<IdempotencyKey>,
    sub: &Submission,
    policy: &KindPolicy,
) -> Result<(Admitted, CanonicalRequest), ApiError> {
    let canonical = canonical_request(
        sub.kind.as_str(),
        &sub.authority.canonical(),
        &sub.args,
        sub.run_id.as_deref(),
        &policy.canonical,
    )
    .map_err(ApiError::InvalidArgs)?;
    let admitted = match key {
        Some(key) if policy.guard_keyed => {
            match under_key(state, principal, &key, sub, &canonical).await? {
                Some(admitted) => admitted,
                None => guarded(state, principal, Some(&key), sub, &canonical, policy).await?,
            }
        }
        Some(key) => keyed(state, principal, &key, sub, &canonical).await?,
        None if policy.key == KeyMode::Fingerprint => {
            guarded(state, principal, None, sub, &canonical, policy).await?
        }
        None => return Err(KeyError::Missing.into()),
    };
    Ok((admitted, canonical))
}

fn new_command<'a>(
    principal: &'a Principal,
    key: &'a str,
    sub: &'a Submission,
    canonical: &'a CanonicalRequest,
    intent_epoch: Option<i32>,
    actor: &'a str,
) -> NewCommand<'a> {
    NewCommand {
        id: Uuid::now_v7(),
        scope: principal.id,
        idempotency_key: key,
        request_digest: canonical.digest.as_bytes(),
        digest_version: canonical.version,
        kind: sub.kind.as_str(),
        authority_id: sub.authority.id.as_str(),
        pinned_generation: sub.authority.pinned_generation,
        intent_digest: canonical.intent_digest.as_bytes(),
        intent_epoch,
        canonical_rules: &canonical.rules,
        run_id: sub.run_id.as_deref(),
        args: &sub.args,
        canonical: &canonical.form,
        deadline_at: sub.deadline,
        actor,
    }
}

/// Under a client key: the unique index decides.
async fn keyed(
    state: &AppState,
    principal: &Principal,
    key: &IdempotencyKey,
    sub: &Submission,
    canonical: &CanonicalRequest,
) -> Result<Admitted, ApiError> {
    let actor = principal.actor();
    let new = new_command(principal, key.as_str(), sub, canonical, None, &actor);
    // If the stored row vanished in between (retention), insert again.
    for _ in 0..3 {
        if let Some(row) = db::commands::insert_pending(&state.pool, &new).await? {
            return Ok(recorded(state, row));
        }
        if let Some(admitted) = under_key(state, principal, key, sub, canonical).await? {
            return Ok(admitted);
        }
    }
    Err(ApiError::Internal(anyhow::anyhow!(
        "idempotency key {key} kept disappearing between insert and lookup"
    )))
}

/// What the ledger already holds under `key`: the same request (replay,
/// compared at the stored row's digest version) or a conflict; `None` when
/// the key is unused.
async fn under_key(
    state: &AppState,
    principal: &Principal,
    key: &IdempotencyKey,
    sub: &Submission,
    canonical: &CanonicalRequest,
) -> Result<Option<Admitted>, ApiError> {
    let Some(stored) = db::commands::find_by_key(&state.pool, principal.id, key.as_str()).await?
    else {
        return Ok(None);
    };
    let incoming = match stored.digest_version {
        1 => request_digest_v1(sub.kind.as_str(), &sub.authority.canonical(), &sub.args),
        _ => canonical.digest,
    };
    match disposition(
        RequestDigest::from_slice(&stored.request_digest).as_ref(),
        &incoming,
    ) {
        Disposition::Replay => Ok(Some(Admitted::Command {
            row: stored,
            disposition: Disposition::Replay,
        })),
        _ => Err(ApiError::KeyConflict {
            command_id: stored.id,
            stored_digest: hex::encode(&stored.request_digest),
            incoming_digest: incoming.to_string(),
            differences: if stored.digest_version == canonical.version {
                differences(&stored.canonical, &canonical.form)
            } else {
                Vec::new()
            },
        }),
    }
}

fn recorded(state: &AppState, row: CommandRow) -> Admitted {
    tracing::info!(command.id = %row.id, kind = %row.kind, authority = %row.authority_id, "command recorded");
    crate::crash::point(crate::crash::CrashPoint::AfterInsert);
    state.wake.pending(&row.authority_id);
    Admitted::Command {
        row,
        disposition: Disposition::New,
    }
}

/// Under the intent guard: keyless submissions (recorded under a key
/// derived from the intent), and keyed ones of kinds that opt in. Copies
/// within the window are one command; each new command of an intent takes
/// the next epoch, and the unique index on (scope, intent, epoch) makes
/// racing copies collide whatever their keys; a near-duplicate after the
/// window is held, allowed or refused as the kind says.
async fn guarded(
    state: &AppState,
    principal: &Principal,
    key: Option<&IdempotencyKey>,
    sub: &Submission,
    canonical: &CanonicalRequest,
    policy: &KindPolicy,
) -> Result<Admitted, ApiError> {
    let actor = principal.actor();
    for _ in 0..4 {
        let latest = db::commands::latest_by_intent(
            &state.pool,
            principal.id,
            sub.authority.id.as_str(),
            canonical.intent_digest.as_bytes(),
            canonical.digest.as_bytes(),
        )
        .await?;
        let facts = latest.as_ref().map(|l| Latest {
            same_request: l.same_request,
            age: Duration::from_secs_f64(l.age_seconds.max(0.0)),
            epoch: u32::try_from(l.max_epoch).unwrap_or(0),
        });
        match (intent_verdict(facts, policy), latest) {
            (IntentVerdict::New { epoch }, _) => {
                let derived = derived_key(&canonical.intent_digest, epoch);
                let key_str = key.map_or(derived.as_str(), IdempotencyKey::as_str);
                let epoch = i32::try_from(epoch)
                    .map_err(|_| ApiError::Internal(anyhow::anyhow!("intent epoch overflow")))?;
                let new = new_command(principal, key_str, sub, canonical, Some(epoch), &actor);
                match db::commands::insert_pending(&state.pool, &new).await {
                    Ok(Some(row)) => return Ok(recorded(state, row)),
                    // The client's key was taken meanwhile: the key decides. (A
                    // derived key taken means another copy won this epoch.)
                    Ok(None) => {
                        if let Some(key) = key
                            && let Some(admitted) =
                                under_key(state, principal, key, sub, canonical).await?
                        {
                            return Ok(admitted);
                        }
                    }
                    Err(e) if db::commands::is_epoch_conflict(&e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            (IntentVerdict::Same, Some(l)) => {
                let row = db::commands::get(&state.pool, l.id, Some(principal.id))
                    .await?
                    .ok_or(ApiError::NotFound)?;
                // Another run's command answers this request: remember it
                // before answering, so that this request retried after the
                // window is a replay of the same command, not a new run.
                if !l.same_request {
                    db::commands::remember_coalesced(
                        &state.pool,
                        &row,
                        canonical.digest.as_bytes(),
                        sub.run_id.as_deref(),
                    )
                    .await?;
                }
                let disposition = if row.state().is_terminal() {
                    Disposition::Replay
                } else {
                    Disposition::Coalesced
                };
                return Ok(Admitted::Command { row, disposition });
            }
            (IntentVerdict::Held, Some(l)) => {
                let mut conn = state.pool.acquire().await?;
                let hold = db::holds::hold(
                    &mut conn,
                    &NewHold {
                        id: Uuid::now_v7(),
                        scope: principal.id,
                        kind: sub.kind.as_str(),
                        authority_id: sub.authority.id.as_str(),
                        pinned_generation: sub.authority.pinned_generation,
                        run_id: sub.run_id.as_deref(),
                        args: &sub.args,
                        canonical: &canonical.form,
                        canonical_rules: &canonical.rules,
                        request_digest: canonical.digest.as_bytes(),
                        intent_digest: canonical.intent_digest.as_bytes(),
                        digest_version: canonical.version,
                        deadline_at: sub.deadline,
                        resembles: l.id,
                    },
                )
                .await?;
                tracing::info!(hold.id = %hold.id, resembles = %l.id, "near-duplicate held");
                return Ok(Admitted::Held(hold));
            }
            (IntentVerdict::Refused, Some(l)) => {
                return Err(ApiError::NearDuplicate { command_id: l.id });
            }
            (_, None) => {}
        }
    }
    Err(ApiError::Internal(anyhow::anyhow!(
        "admission under the intent guard did not settle after four attempts"
    )))
}

/// `POST /v1/commands`: the pending row is committed before any 2xx is sent.
#[utoipa::path(post, path = "/v1/commands", operation_id = "submitCommand", tag = "commands",
    request_body = SubmitBody,
    params(("Idempotency-Key" = String, Header, description = "1-255 printable ASCII, bare or as an RFC 8941 quoted string. Kinds whose policy lets the intent stand in for a key (`key = \"fingerprint\"` in ledger.toml) may omit it", pattern = r"^[!#-~][!-~]{0,254}$"),
           ("Prefer" = Option<String>, Header, description = "wait=N: answer once the command is terminal, at most N seconds")),
    responses((status = 202, description = "new (a command), or held (a hold)", body = Submitted<'static>, headers(("Idempotency-Key-Expires" = String, description = "with serve --retention: the earliest HTTP date at which pruning may forget this command and its key"))),
              (status = 200, description = "replay or coalesced", body = CommandView<'static>, headers(("Idempotency-Key-Expires" = String, description = "with serve --retention: the earliest HTTP date at which pruning may forget this command and its key"))),
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
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let key = idempotency_key(&headers)?;
    let wait = prefer_wait(&headers).map(|w| w.min(state.max_wait));
    let sub = validate(body)?;
    let policy = state.policies.get(sub.kind.as_str()).clone();
    let (admitted, _) = admit(&state, &principal, key, &sub, &policy)
        .await
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
            let (row, waited) = settle(&state, row, wait, principal.visible_scope()).await?;
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
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct InvokeView<'a> {
    /// `executed`, `coalesced`, `replay`, `held` or `pending`.
    outcome: &'static str,
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
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
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
    };
    let (admitted, canonical) = admit(&state, &principal, key, &sub, &policy)
        .await
        .inspect_err(|e| state.counters.refused(e))?;
    let fingerprint = canonical.intent_digest.to_string();
    match admitted {
        Admitted::Held(hold) => {
            state.counters.count(Disposition::Held);
            let v = InvokeView {
                outcome: "held",
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
            let (row, _) = settle(&state, row, Some(wait), principal.visible_scope()).await?;
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
