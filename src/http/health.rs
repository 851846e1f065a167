//! Liveness and readiness probes; no authentication.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::AppState;
use crate::db;

/// The process is alive and serving HTTP.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "operations", responses((status = 200, description = "alive")))]
pub(super) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// The database answers and every migration this binary knows is applied.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "operations",
    responses((status = 200, description = "ready"), (status = 503, description = "database unreachable or migrations not current")))]
pub(super) async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    match db::migrations_current(state.pool()).await {
        Ok(true) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Ok(false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not ready", "reason": "database migrations are not current"})),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"status": "not ready", "reason": "database unreachable"})),
            )
        }
    }
}
