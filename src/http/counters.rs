//! `GET /v1/state`: what this API process has seen since it started, beside
//! the ledger's totals: requests go up, executions do not.

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

use super::AppState;
use super::error::ApiError;
use super::extract::Auth;
use crate::db::{self, Role};
use crate::domain::Disposition;

/// Submissions seen by this process, by what became of them.
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub new: AtomicU64,
    pub replay: AtomicU64,
    pub coalesced: AtomicU64,
    pub held: AtomicU64,
    pub conflict: AtomicU64,
    pub refused: AtomicU64,
}

impl Counters {
    pub(super) fn count(&self, d: Disposition) {
        let counter = match d {
            Disposition::New => &self.new,
            Disposition::Replay => &self.replay,
            Disposition::Coalesced => &self.coalesced,
            Disposition::Held => &self.held,
            Disposition::Conflict => &self.conflict,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn refused(&self, e: &ApiError) {
        let counter = match e {
            ApiError::KeyConflict { .. } => &self.conflict,
            _ => &self.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Operators only.
#[utoipa::path(get, path = "/v1/state", operation_id = "getState", tag = "operations",
    responses((status = 200, description = "counters since start and ledger totals", body = Object),
              (status = 401, body = super::error::Problem), (status = 403, body = super::error::Problem)),
    security(("bearer" = [])))]
pub(super) async fn get(
    State(state): State<AppState>,
    Auth(principal): Auth,
) -> Result<Json<Value>, ApiError> {
    if principal.role != Role::Operator {
        return Err(ApiError::Forbidden(
            "the ledger's counters are for operators",
        ));
    }
    let c = &state.counters;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let by_state: Map<String, Value> = db::commands::counts_by_state(&state.pool)
        .await?
        .into_iter()
        .map(|(s, n)| (s, json!(n)))
        .collect();
    Ok(Json(json!({
        "since_start": {
            "requests": load(&c.requests),
            "new": load(&c.new),
            "replay": load(&c.replay),
            "coalesced": load(&c.coalesced),
            "held": load(&c.held),
            "conflict": load(&c.conflict),
            "refused": load(&c.refused),
        },
        "ledger": {
            "commands_by_state": by_state,
            "executions_started": db::commands::effects_started(&state.pool).await?,
            "holds_open": db::holds::count_open(&state.pool).await?,
        }
    })))
}
