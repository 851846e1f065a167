//! `POST /v1/commands` and `POST /v1/invoke` (also routed at
//! `POST /api/invoke`, the admission layer's name for it): parse and
//! validate the request (`params`), hand it to admission (`ledger::submit`,
//! where it becomes a row), then answer: the command (waiting for its
//! outcome when asked) or the hold.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use std::time::Duration;
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{AppJson, Auth};
use super::params::{
    InvokeBody, SubmitBody, args, authority_or_catalog, invalid, prefer_wait, run_id, submission,
    trace_of,
};
use super::views::{
    Asked, CommandView, HeldAnswer, applied_wait, chain_view, hold_location, key_expiry, location,
};
use super::wait::{Follow, settle};
use crate::domain::admission::KeyMode;
use crate::domain::{Disposition, IdempotencyKey, KeyError, Kind};
use crate::ledger::submit::{Admitted, Submission, admit};

const IDEMPOTENCY_KEY: &str = "idempotency-key";
const REPLAYED: &str = "idempotent-replayed";

/// How long `POST /v1/invoke` waits for the outcome unless `Prefer: wait` says otherwise.
const INVOKE_WAIT: Duration = Duration::from_secs(30);

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
           ("Prefer" = Option<String>, Header, description = "wait=N: answer once the command is terminal, at most N seconds"),
           ("traceparent" = Option<String>, Header, description = "W3C Trace Context: kept with the command (not part of its fingerprint), joined by the custodian's spans and sent on to the provider; one that does not conform is ignored"),
           ("tracestate" = Option<String>, Header, description = "W3C Trace Context, beside traceparent")),
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
    let sub = submission(body, trace_of(&headers))?;
    let policy = state.policies.get(sub.kind.as_str()).clone();
    let (admitted, _) = admit(
        state.pool(),
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
            response
                .headers_mut()
                .insert(header::LOCATION, hold_location(hold.id));
            Ok(response)
        }
        Admitted::Command { row, disposition } => {
            state.counters.count(disposition);
            let asked = Asked::of(&row);
            let (row, waited) = settle(&state, row, wait, Follow::Chain).await?;
            let status = if disposition == Disposition::New {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            let body = Submitted::Command(chain_view(&row, &asked, Some(disposition)));
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
    /// How many attempts the command took, when the ledger retried a
    /// failure with nothing done (absent: one); `command_id` is the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<u32>,
}

/// `POST /v1/invoke`: for agents. Records the intent (keyless unless an
/// `Idempotency-Key` is sent), waits (bounded) for the outcome, and says
/// what happened: `executed` (this call's command ran), `coalesced` (it was
/// another call's command, in flight when this one arrived), `replay` (it
/// had already finished), `held`, or `pending` (no outcome before the wait ended).
#[utoipa::path(post, path = "/v1/invoke", operation_id = "invoke", tag = "commands",
    request_body = InvokeBody,
    params(("Prefer" = Option<String>, Header, description = "wait=N (default 30)"),
           ("traceparent" = Option<String>, Header, description = "W3C Trace Context: kept with the command (not part of its fingerprint), joined by the custodian's spans and sent on to the provider; one that does not conform is ignored"),
           ("tracestate" = Option<String>, Header, description = "W3C Trace Context, beside traceparent")),
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
    let authority =
        authority_or_catalog(body.authority, policy.authority.as_deref(), "tool", &kind)?;
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
        trace: trace_of(&headers),
    };
    let (admitted, canonical) = admit(
        state.pool(),
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
                attempts: None,
            };
            Ok((StatusCode::ACCEPTED, Json(v)).into_response())
        }
        Admitted::Command { row, disposition } => {
            state.counters.count(disposition);
            let (row, _) = settle(&state, row, Some(wait), Follow::Chain).await?;
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
                attempts: (row.attempt() > 1).then(|| row.attempt()),
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

/// `POST /api/invoke`: the same operation as `POST /v1/invoke`, under the
/// admission layer's path.
#[utoipa::path(post, path = "/api/invoke", operation_id = "apiInvoke", tag = "admission layer",
    request_body = InvokeBody,
    params(("Prefer" = Option<String>, Header, description = "wait=N (default 30)"),
           ("traceparent" = Option<String>, Header, description = "W3C Trace Context: kept with the command (not part of its fingerprint), joined by the custodian's spans and sent on to the provider; one that does not conform is ignored"),
           ("tracestate" = Option<String>, Header, description = "W3C Trace Context, beside traceparent")),
    responses((status = 200, description = "executed, coalesced or replay", body = InvokeView<'static>),
              (status = 202, description = "held or pending", body = InvokeView<'static>),
              (status = 400, body = Problem), (status = 401, body = Problem), (status = 409, body = Problem),
              (status = 429, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn api_invoke(
    state: State<AppState>,
    auth: Auth,
    headers: HeaderMap,
    body: AppJson<InvokeBody>,
) -> Result<Response, ApiError> {
    invoke(state, auth, headers, body).await
}
