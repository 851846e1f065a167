//! `GET /v1/kinds`: the kinds this ledger knows, with what callers need to
//! call them (authority, whether a key is required, a description and a
//! JSON Schema of the args), so a front end such as `command-ledger mcp`
//! builds its tools from the running service's catalog, not a copy of it.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::error::ApiError;
use super::extract::Auth;
use crate::domain::admission::KeyMode;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct KindList {
    items: Vec<KindView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct KindView {
    kind: String,
    /// The authority `POST /v1/invoke` uses when none is given.
    authority: Option<String>,
    /// `required`: `POST /v1/commands` needs an `Idempotency-Key`;
    /// `fingerprint`: the intent may stand in for one.
    key: &'static str,
    description: Option<String>,
    /// A JSON Schema of `args`. The catalog's `args_schema` when it declares
    /// one, enforced at admission (args that do not match are `400
    /// /problems/invalid-args`, nothing recorded); else one made from the
    /// kind's money and e-mail fields, which only describes.
    #[schema(value_type = Object)]
    args_schema: Value,
}

/// The kinds the catalog names, by name: what a caller needs to call each
/// (an MCP server makes each one with an authority a tool).
#[utoipa::path(get, path = "/v1/kinds", operation_id = "listKinds", tag = "commands",
    responses((status = 200, body = KindList), (status = 401, body = super::error::Problem)),
    security(("bearer" = [])))]
pub(super) async fn list(
    State(state): State<AppState>,
    Auth(_principal): Auth,
) -> Result<Json<KindList>, ApiError> {
    let items = state
        .policies
        .kinds()
        .into_iter()
        .map(|(kind, policy, described)| KindView {
            kind: kind.to_owned(),
            authority: policy.authority.clone(),
            key: match policy.key {
                KeyMode::Required => "required",
                KeyMode::Fingerprint => "fingerprint",
            },
            description: described.description,
            args_schema: policy.shown_args_schema(),
        })
        .collect();
    Ok(Json(KindList { items }))
}
