//! `GET /v1/state`: the ledger's counters (cluster-wide, durable: requests
//! by outcome from every API process, executions from the history) beside
//! what this API process has seen since it started: requests go up,
//! executions do not. The counting itself is `counters.rs`.

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

use super::AppState;
use super::counters::REQUEST_COUNTERS;
use super::error::{ApiError, Problem};
use super::extract::{Auth, operator};
use crate::db;

/// Operators only.
#[utoipa::path(get, path = "/v1/state", operation_id = "getState", tag = "operations",
    responses((status = 200, description = "the ledger's counters (every API process, durable) and this process's since it started", body = Object),
              (status = 401, body = Problem), (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn get(
    State(state): State<AppState>,
    Auth(principal): Auth,
) -> Result<Json<Value>, ApiError> {
    operator(&principal, "the ledger's counters are for operators")?;
    let c = &state.counters;
    // This process's own counts first, so a reader sees its own requests.
    if let Err(e) = c.flush(state.pool()).await {
        tracing::warn!(error = %e, "request counts not added to the ledger before a read");
    }
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let by_state: Map<String, Value> = db::commands::counts_by_state(state.pool())
        .await?
        .into_iter()
        .map(|(s, n)| (s, json!(n)))
        .collect();
    let totals = db::counts::totals(state.pool()).await?;
    let total = |name: &str| totals.get(name).copied().unwrap_or(0);
    let requests: Map<String, Value> = REQUEST_COUNTERS
        .iter()
        .map(|name| ((*name).to_owned(), json!(total(name))))
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
            "executions_started": total("executions"),
            "outcomes": {
                "applied": total("applied"),
                "failed": total("failed"),
                "ambiguous": total("ambiguous"),
            },
            "requests": requests,
            "holds_open": db::holds::count_open(state.pool()).await?,
        }
    })))
}
