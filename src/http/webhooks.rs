//! `/v1/webhooks`: a principal registers where the outcomes of its commands
//! are pushed, lists and disables its endpoints and reads what was sent; an
//! operator sees every endpoint and redelivers an event. The events
//! themselves are written by the database with each outcome and sent by
//! the deliverer (`crate::webhooks`); docs/WEBHOOKS.md has the whole story.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppQuery, Auth};
use crate::db::webhooks::{AttemptRow, EndpointRow, EventRow, NewEndpoint};
use crate::db::{self, Principal, Role};
use crate::domain::Kind;
use crate::domain::webhook::{Host, TERMINAL_STATES, format_secret, parse_url};

/// Most live endpoints one scope may have: each terminal command of the
/// scope writes one event per endpoint, in the outcome's transaction.
const MAX_ENDPOINTS_PER_SCOPE: usize = 10;
/// Most kinds one endpoint may name.
const MAX_KINDS: usize = 64;
/// How long registration waits for the host's addresses.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// An endpoint as the API shows it: never its secret.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct WebhookView {
    id: Uuid,
    url: String,
    /// The dedup space whose commands it receives: the registering
    /// principal's fleet id or its own id (commands.scope).
    scope: Uuid,
    /// Only these kinds; null: every kind.
    kinds: Option<Vec<String>>,
    /// Only these terminal states; null: all five.
    states: Option<Vec<String>>,
    created_at: DateTime<Utc>,
    created_by: String,
    /// Set once disabled: no new events, and pending ones expired.
    disabled_at: Option<DateTime<Utc>>,
}

pub(super) fn webhook_view(e: &EndpointRow) -> WebhookView {
    WebhookView {
        id: e.id,
        url: e.url.clone(),
        scope: e.scope,
        kinds: e.kinds.clone(),
        states: e.states.clone(),
        created_at: e.created_at,
        created_by: e.created_by.clone(),
        disabled_at: e.disabled_at,
    }
}

/// A registered endpoint, with its secret: shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RegisteredWebhook {
    #[serde(flatten)]
    webhook: WebhookView,
    /// The HMAC-SHA256 key of `Ledger-Signature` (`whsec_` and 64 hex
    /// digits; the whole string is the key). Never shown again.
    secret: String,
}

/// `{"items": [endpoint, ...]}`
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct WebhookList {
    items: Vec<WebhookView>,
}

/// One attempt at sending an event.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct AttemptView {
    /// 1 for the first (as sent in `Ledger-Attempt`).
    n: i32,
    at: DateTime<Utc>,
    /// The receiver's HTTP status; null when none came back.
    status: Option<i32>,
    /// Why it failed; null for a 2xx.
    error: Option<String>,
    duration_ms: i32,
}

fn attempt_view(a: &AttemptRow) -> AttemptView {
    AttemptView {
        n: a.n,
        at: a.at,
        status: a.status,
        error: a.error.clone(),
        duration_ms: a.duration_ms,
    }
}

/// An event: what is sent, where it stands, each attempt.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct EventView {
    /// Sent as `Ledger-Event-Id` and `event_id`: the receiver's key for duplicates.
    id: Uuid,
    endpoint_id: Uuid,
    command_id: Uuid,
    /// `pending`, `delivered` or `expired`.
    state: String,
    created_at: DateTime<Utc>,
    /// No attempt after this; null until the first attempt.
    expires_at: Option<DateTime<Utc>>,
    /// When a pending event is due.
    next_attempt_at: Option<DateTime<Utc>>,
    delivered_at: Option<DateTime<Utc>>,
    last_error: Option<String>,
    /// The body sent, apart from `event_id` and `created_at`: command_id,
    /// key, kind, authority, state, result, error, finished_at, history_hash.
    #[schema(value_type = Object)]
    payload: Value,
    /// Every attempt that finished, first first.
    attempts: Vec<AttemptView>,
}

pub(super) fn event_view(e: &EventRow, attempts: &[AttemptRow]) -> EventView {
    EventView {
        id: e.id,
        endpoint_id: e.endpoint_id,
        command_id: e.command_id,
        state: e.state.clone(),
        created_at: e.created_at,
        expires_at: e.expires_at,
        next_attempt_at: e.next_attempt_at,
        delivered_at: e.delivered_at,
        last_error: e.last_error.clone(),
        payload: e.payload.clone(),
        attempts: attempts
            .iter()
            .filter(|a| a.event_id == e.id)
            .map(attempt_view)
            .collect(),
    }
}

/// `{"items": [event, ...]}`, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct EventList {
    items: Vec<EventView>,
}

/// Whose commands an endpoint receives.
#[derive(Debug, Clone, Copy, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum ScopeChoice {
    /// The principal's fleet: commands of kinds with `dedup_scope = fleet`
    /// (the default), recorded by any member.
    #[default]
    Fleet,
    /// The principal itself: commands of kinds with `dedup_scope = principal`.
    Principal,
}

/// `{"url", "kinds"?, "states"?, "scope"?}`
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Registration {
    /// Where events are POSTed: http or https, no user name or password,
    /// at most 2048 characters; not an address of the ledger's own network
    /// unless the operator allows private targets.
    #[schema(max_length = 2048)]
    url: String,
    /// Only commands of these kinds (1-64 kinds; omit for every kind).
    #[schema(min_items = 1, max_items = 64)]
    kinds: Option<Vec<String>>,
    /// Only these terminal states (omit for all five).
    #[schema(min_items = 1, max_items = 5)]
    states: Option<Vec<String>>,
    /// Whose commands: `fleet` (default) or `principal`.
    scope: Option<ScopeChoice>,
}

/// The kinds or states asked for: checked, sorted, without repeats.
fn filter_list(
    what: &str,
    list: Option<&[String]>,
    max: usize,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<Option<Vec<String>>, ApiError> {
    let Some(list) = list else {
        return Ok(None);
    };
    if list.is_empty() || list.len() > max {
        return Err(ApiError::InvalidBody(format!(
            "{what} must list 1-{max} values (omit it for all)"
        )));
    }
    for item in list {
        check(item).map_err(|e| ApiError::InvalidBody(format!("{what}: {e}")))?;
    }
    let mut list = list.to_vec();
    list.sort_unstable();
    list.dedup();
    Ok(Some(list))
}

impl Registration {
    /// Checks the body (untrusted input); the normalised URL, kinds and states.
    async fn check(
        &self,
        allow_private: bool,
    ) -> Result<(String, Option<Vec<String>>, Option<Vec<String>>), ApiError> {
        let target = parse_url(&self.url, allow_private)
            .map_err(|e| ApiError::InvalidBody(format!("url: {e}")))?;
        let kinds = filter_list("kinds", self.kinds.as_deref(), MAX_KINDS, |k| {
            Kind::parse(k).map(|_| ()).map_err(|e| e.to_string())
        })?;
        let states = filter_list(
            "states",
            self.states.as_deref(),
            TERMINAL_STATES.len(),
            |s| {
                if TERMINAL_STATES.contains(&s) {
                    Ok(())
                } else {
                    Err(format!(
                        "{s:?} is not a terminal state ({})",
                        TERMINAL_STATES.join(", ")
                    ))
                }
            },
        )?;
        // A name is checked by what it resolves to now (and again before
        // every connection the deliverer makes).
        if matches!(target.host, Host::Name(_)) {
            match tokio::time::timeout(
                RESOLVE_TIMEOUT,
                crate::webhooks::send::resolve_checked(&target, allow_private),
            )
            .await
            {
                Err(_) => {
                    return Err(ApiError::InvalidBody(format!(
                        "url: the host did not resolve within {} s",
                        RESOLVE_TIMEOUT.as_secs()
                    )));
                }
                Ok(Err(e)) => return Err(ApiError::InvalidBody(format!("url: {e}"))),
                Ok(Ok(_)) => {}
            }
        }
        Ok((target.url, kinds, states))
    }
}

fn parse_id(raw: &str, what: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::InvalidId(format!("{raw:?} is not {what} (UUID)")))
}

/// `POST /v1/webhooks`: registers an endpoint for the caller's fleet (or,
/// with `"scope": "principal"`, for the caller alone) and shows its secret
/// once.
#[utoipa::path(post, path = "/v1/webhooks", operation_id = "registerWebhook", tag = "webhooks",
    request_body = Registration,
    responses((status = 201, body = RegisteredWebhook), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 409, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn register(
    State(state): State<AppState>,
    Auth(principal): Auth,
    AppJson(body): AppJson<Registration>,
) -> Result<Response, ApiError> {
    let (url, kinds, states) = body.check(state.webhooks.allow_private).await?;
    let scope = match body.scope.unwrap_or_default() {
        ScopeChoice::Fleet => principal.fleet_id,
        ScopeChoice::Principal => principal.id,
    };
    let live = db::webhooks::list_endpoints(&state.pool, Some(std::slice::from_ref(&scope)))
        .await?
        .iter()
        .filter(|e| e.disabled_at.is_none())
        .count();
    if live >= MAX_ENDPOINTS_PER_SCOPE {
        return Err(ApiError::TooManyWebhooks {
            limit: MAX_ENDPOINTS_PER_SCOPE,
        });
    }
    let mut random = [0u8; 32];
    getrandom::fill(&mut random)
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("no randomness available: {e}")))?;
    let secret = format_secret(&random);
    let actor = principal.actor();
    let row = db::webhooks::insert_endpoint(
        &state.pool,
        &NewEndpoint {
            id: Uuid::now_v7(),
            scope,
            url: &url,
            kinds: kinds.as_deref(),
            states: states.as_deref(),
            secret: &secret,
            created_by: &actor,
        },
    )
    .await?;
    tracing::info!(webhook.id = %row.id, %actor, url = %row.url, "webhook endpoint registered");
    Ok((
        StatusCode::CREATED,
        Json(RegisteredWebhook {
            webhook: webhook_view(&row),
            secret,
        }),
    )
        .into_response())
}

/// `GET /v1/webhooks`: the caller's endpoints (its own scope's and its
/// fleet's); an operator's, every endpoint. Never a secret.
#[utoipa::path(get, path = "/v1/webhooks", operation_id = "listWebhooks", tag = "webhooks",
    responses((status = 200, body = WebhookList), (status = 401, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn list(
    State(state): State<AppState>,
    Auth(principal): Auth,
) -> Result<Response, ApiError> {
    let rows =
        db::webhooks::list_endpoints(&state.pool, principal.visible_scope().as_deref()).await?;
    Ok(Json(WebhookList {
        items: rows.iter().map(webhook_view).collect(),
    })
    .into_response())
}

/// `DELETE /v1/webhooks/{id}`: disables an endpoint (its own scope's or
/// fleet's; an operator, any): no more events, its pending ones expired.
/// Disabling it again changes nothing and succeeds.
#[utoipa::path(delete, path = "/v1/webhooks/{id}", operation_id = "disableWebhook", tag = "webhooks",
    params(("id" = Uuid, Path, description = "endpoint id")),
    responses((status = 200, body = WebhookView), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn disable(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "an endpoint id")?;
    let row = db::webhooks::disable_endpoint(
        &state.pool,
        id,
        principal.visible_scope().as_deref(),
        Utc::now(),
    )
    .await?
    .ok_or(ApiError::NotFound)?;
    let expired =
        db::webhooks::expire_events_of_endpoint(&state.pool, id, "the endpoint was disabled")
            .await?;
    tracing::info!(webhook.id = %id, actor = %principal.actor(), expired, "webhook endpoint disabled");
    Ok(Json(webhook_view(&row)).into_response())
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    /// Most events, 1-100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<i64>,
}

/// `GET /v1/webhooks/{id}/events[?limit=N]`: an endpoint's latest events,
/// newest first, each with its attempts.
#[utoipa::path(get, path = "/v1/webhooks/{id}/events", operation_id = "listWebhookEvents", tag = "webhooks",
    params(("id" = Uuid, Path, description = "endpoint id"), EventsQuery),
    responses((status = 200, body = EventList), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn events(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
    AppQuery(q): AppQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "an endpoint id")?;
    let limit = q.limit.unwrap_or(20);
    if !(1..=100).contains(&limit) {
        return Err(ApiError::InvalidQuery(
            "limit must be between 1 and 100".into(),
        ));
    }
    db::webhooks::get_endpoint(&state.pool, id, principal.visible_scope().as_deref())
        .await?
        .ok_or(ApiError::NotFound)?;
    let events = db::webhooks::events_of_endpoint(&state.pool, id, limit).await?;
    let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
    let attempts = db::webhooks::attempts_of(&state.pool, &ids).await?;
    Ok(Json(EventList {
        items: events.iter().map(|e| event_view(e, &attempts)).collect(),
    })
    .into_response())
}

fn operator(principal: &Principal) -> Result<(), ApiError> {
    match principal.role {
        Role::Operator => Ok(()),
        Role::Device => Err(ApiError::Forbidden(
            "redelivering webhooks is for operators",
        )),
    }
}

/// `POST /v1/webhooks/events/{id}/redeliver`: sends an event again
/// (operators): pending, due now, tried until the deliverers' expiry from
/// now, whatever became of it before. Its id stays the same, so a receiver
/// that has it already drops the copy.
#[utoipa::path(post, path = "/v1/webhooks/events/{id}/redeliver", operation_id = "redeliverWebhookEvent", tag = "webhooks",
    params(("id" = Uuid, Path, description = "event id")),
    responses((status = 200, body = EventView), (status = 400, body = Problem),
              (status = 401, body = Problem), (status = 403, body = Problem),
              (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn redeliver(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    operator(&principal)?;
    let id = parse_id(&id, "an event id")?;
    let event = crate::ledger::webhooks::redeliver(&state.pool, id, state.webhooks.expiry)
        .await?
        .ok_or(ApiError::NotFound)?;
    tracing::info!(event.id = %id, actor = %principal.actor(), "webhook event redelivered");
    let attempts = db::webhooks::attempts_of(&state.pool, &[id]).await?;
    Ok(Json(event_view(&event, &attempts)).into_response())
}
