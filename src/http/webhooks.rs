//! `/v1/webhooks`: a principal registers where the outcomes of its commands
//! are pushed, lists and disables its endpoints and reads what was sent; an
//! operator sees every endpoint and redelivers an event. The events
//! themselves are written by the database with each outcome and sent by
//! the deliverer (`crate::webhooks`); docs/WEBHOOKS.md has the whole story.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppQuery, Auth, operator};
use super::params::parse_id;
use super::views::{EventView, WebhookView, event_view, webhook_view};
use crate::db;
use crate::db::webhooks::NewEndpoint;
use crate::domain::Kind;
use crate::domain::webhook::{Host, TERMINAL_STATES, format_secret, parse_url};

/// Most live endpoints one scope may have: each terminal command of the
/// scope writes one event per endpoint, in the outcome's transaction.
const MAX_ENDPOINTS_PER_SCOPE: usize = 10;
/// Most kinds one endpoint may name.
const MAX_KINDS: usize = 64;
/// How long registration waits for the host's addresses.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A registered endpoint, with its secret: shown this once.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RegisteredWebhook {
    #[serde(flatten)]
    webhook: WebhookView,
    /// The endpoint's secret, `whsec_` and 64 hex digits: a Standard
    /// Webhooks library takes it as it is (`webhook-signature`'s key is the
    /// base64 after `whsec_`); `Ledger-Signature`'s key is the whole
    /// string. Never shown again.
    secret: String,
}

/// `{"items": [endpoint, ...]}`
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct WebhookList {
    items: Vec<WebhookView>,
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
        // An address of this very host is refused, whatever its range.
        if let Host::Address(ip) = target.host {
            crate::webhooks::send::check_not_this_host(ip, allow_private)
                .map_err(|e| ApiError::InvalidBody(format!("url: {e}")))?;
        }
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
    let live = db::webhooks::list_endpoints(state.pool(), Some(std::slice::from_ref(&scope)))
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
        state.pool(),
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
        db::webhooks::list_endpoints(state.pool(), principal.visible_scope().as_deref()).await?;
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
        state.pool(),
        id,
        principal.visible_scope().as_deref(),
        Utc::now(),
    )
    .await?
    .ok_or(ApiError::NotFound)?;
    let expired = db::webhooks::expire_events_of_endpoint(
        state.pool(),
        id,
        crate::ledger::webhooks::DISABLED,
    )
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
    db::webhooks::get_endpoint(state.pool(), id, principal.visible_scope().as_deref())
        .await?
        .ok_or(ApiError::NotFound)?;
    let events = db::webhooks::events_of_endpoint(state.pool(), id, limit).await?;
    let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
    let attempts = db::webhooks::attempts_of(state.pool(), &ids).await?;
    Ok(Json(EventList {
        items: events.iter().map(|e| event_view(e, &attempts)).collect(),
    })
    .into_response())
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
    operator(&principal, "redelivering webhooks is for operators")?;
    let id = parse_id(&id, "an event id")?;
    let event = crate::ledger::webhooks::redeliver(state.pool(), id, state.webhooks.expiry)
        .await?
        .ok_or(ApiError::NotFound)?;
    tracing::info!(event.id = %id, actor = %principal.actor(), "webhook event redelivered");
    let attempts = db::webhooks::attempts_of(state.pool(), &[id]).await?;
    Ok(Json(event_view(&event, &attempts)).into_response())
}
