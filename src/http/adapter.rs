//! The admission layer's own API (`/api/*`), as an adapter over the ledger,
//! for agents and demos written against it: `POST /api/invoke` is
//! `POST /v1/invoke` (routed with it, in submit.rs); `GET /api/state` counts
//! requests against executions in the current counting epoch;
//! `POST /api/release {"id"}` releases a hold; `POST /api/reset` starts a
//! new counting epoch, only in the embedded demo, and deletes nothing
//! anywhere.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

use super::AppState;
use super::counters::Counters;
use super::error::{ApiError, Problem};
use super::extract::{AppJson, Auth, operator};
use super::views::HoldAnswer;
use crate::db;
use crate::ledger;

/// A counting epoch: `/api/state` counts from its start.
#[derive(Debug)]
pub struct Epoch {
    number: u64,
    started_at: DateTime<Utc>,
    /// The process's counters when it started.
    base: [u64; 7],
}

impl Epoch {
    /// Epoch 0 starts with the process.
    pub fn first() -> Arc<Mutex<Epoch>> {
        Arc::new(Mutex::new(Epoch {
            number: 0,
            started_at: Utc::now(),
            base: [0; 7],
        }))
    }
}

fn snapshot(c: &Counters) -> [u64; 7] {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    [
        load(&c.requests),
        load(&c.new),
        load(&c.coalesced),
        load(&c.replay),
        load(&c.held),
        load(&c.conflict),
        load(&c.refused),
    ]
}

/// What `GET /api/state` answers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct EpochState {
    /// Which counting epoch (0 from the start of this API process; each
    /// `POST /api/reset` starts the next).
    epoch: u64,
    since: DateTime<Utc>,
    /// Requests this API process answered in the epoch (invoke and submit).
    requests: u64,
    /// Effects the ledger started in the epoch (every process).
    executions: i64,
    /// Of the requests: each disposition.
    executed: u64,
    coalesced: u64,
    replay: u64,
    held: u64,
    conflict: u64,
    refused: u64,
}

/// `GET /api/state`: requests against executions, in the current epoch. Operators only.
#[utoipa::path(get, path = "/api/state", operation_id = "apiState", tag = "admission layer",
    responses((status = 200, body = EpochState), (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn get_state(
    State(state): State<AppState>,
    Auth(principal): Auth,
) -> Result<Response, ApiError> {
    operator(&principal, "the ledger's counters are for operators")?;
    let (number, since, base) = {
        let e = state
            .epoch
            .lock()
            .expect("the epoch lock is never poisoned");
        (e.number, e.started_at, e.base)
    };
    let now = snapshot(&state.counters);
    let d = |i: usize| now[i].saturating_sub(base[i]);
    let executions = db::commands::effects_started_since(state.pool(), since).await?;
    Ok(Json(EpochState {
        epoch: number,
        since,
        requests: d(0),
        executions,
        executed: d(1),
        coalesced: d(2),
        replay: d(3),
        held: d(4),
        conflict: d(5),
        refused: d(6),
    })
    .into_response())
}

/// `POST /api/reset`: a new counting epoch for `/api/state`. Deletes nothing.
#[utoipa::path(post, path = "/api/reset", operation_id = "apiReset", tag = "admission layer",
    responses((status = 200, body = EpochState), (status = 401, body = Problem),
              (status = 403, description = "not an operator, or not the embedded demo", body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn reset(
    State(state): State<AppState>,
    Auth(principal): Auth,
) -> Result<Response, ApiError> {
    if !state.api_reset {
        return Err(ApiError::Forbidden(
            "POST /api/reset exists only in the embedded demo (serve with its private cluster and demo sink); \
             it starts a new counting epoch for /api/state and deletes nothing",
        ));
    }
    operator(&principal, "resetting the counters is for operators")?;
    {
        let mut e = state
            .epoch
            .lock()
            .expect("the epoch lock is never poisoned");
        *e = Epoch {
            number: e.number + 1,
            started_at: Utc::now(),
            base: snapshot(&state.counters),
        };
    }
    tracing::info!(actor = %principal.actor(), "a new counting epoch for /api/state");
    get_state(State(state), Auth(principal)).await
}

/// The body of `POST /api/release`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReleaseBody {
    /// The hold to release.
    id: Uuid,
    #[schema(max_length = 1000)]
    #[serde(default)]
    reason: Option<String>,
    /// As `POST /v1/holds/{id}/release`'s: the command that applied the
    /// intent since the hold opened, to run it again knowingly.
    #[serde(default)]
    confirm_applied: Option<Uuid>,
}

/// `POST /api/release {"id"}`: `POST /v1/holds/{id}/release`, the id in the body.
#[utoipa::path(post, path = "/api/release", operation_id = "apiRelease", tag = "admission layer",
    request_body = ReleaseBody,
    responses((status = 200, body = HoldAnswer<'static>), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn release(
    State(state): State<AppState>,
    Auth(principal): Auth,
    AppJson(body): AppJson<ReleaseBody>,
) -> Result<Response, ApiError> {
    operator(&principal, "deciding holds is for operators")?;
    if body
        .reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > 1000 || r.contains('\0'))
    {
        return Err(ApiError::InvalidBody(
            "the reason is 0-1000 characters, without U+0000".into(),
        ));
    }
    let (hold, command) = ledger::holds::release(
        state.pool(),
        state.backend(),
        &state.wake,
        body.id,
        body.confirm_applied,
        &principal.actor(),
        body.reason.as_deref(),
    )
    .await?;
    Ok(Json(HoldAnswer::released(&hold, &command)).into_response())
}
