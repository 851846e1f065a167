//! `GET /v1/authorities/{id}`: the generation in force, so a device can pin
//! a command to the session of the agent it is talking to.

use axum::Json;
use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::AppState;
use super::error::ApiError;
use super::extract::Auth;
use super::params::{AuthorityName, authority_id};
use crate::db;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct AuthorityStatus {
    id: String,
    generation: i64,
    /// Whether a custodian holds a live lease right now.
    leased: bool,
    lease_expires_at: Option<DateTime<Utc>>,
}

#[utoipa::path(get, path = "/v1/authorities/{id}", operation_id = "getAuthority", tag = "authorities",
    params(("id" = inline(AuthorityName), Path, description = "authority id")),
    responses((status = 200, body = AuthorityStatus), (status = 400, body = super::error::Problem),
              (status = 401, body = super::error::Problem), (status = 404, body = super::error::Problem)),
    security(("bearer" = [])))]
pub(super) async fn get_one(
    State(state): State<AppState>,
    Auth(_principal): Auth,
    Path(id): Path<String>,
) -> Result<Json<AuthorityStatus>, ApiError> {
    let id = authority_id(&id)?;
    let row = db::authorities::get(state.pool(), id.as_str())
        .await?
        .ok_or(ApiError::NotFound)?;
    let leased = row.lease_expires_at.is_some_and(|t| t > Utc::now());
    Ok(Json(AuthorityStatus {
        id: row.id,
        generation: row.generation,
        leased,
        lease_expires_at: row.lease_expires_at,
    }))
}
