//! `/v1/holds`: near-duplicates waiting for an operator, listed, shown and
//! decided over HTTP; the decisions themselves are `ledger::holds`, which
//! the command line calls too.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{AppQuery, Auth, operator};
use super::params::parse_id;
use super::views::{HoldAnswer, HoldView, hold_view_now};
use crate::db::Principal;
use crate::ledger;

/// `{"items": [hold, ...]}`
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct HoldList<'a> {
    items: Vec<HoldView<'a>>,
}

/// Deciding holds is for operators.
const OPERATORS_ONLY: &str = "deciding holds is for operators";

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    #[param(pattern = "^(open|released|rejected)$")]
    state: Option<String>,
    /// Page size, 1-500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
}

/// `GET /v1/holds[?state=open|released|rejected&limit=N]`, newest first.
#[utoipa::path(get, path = "/v1/holds", operation_id = "listHolds", tag = "holds",
    params(ListQuery),
    responses((status = 200, body = HoldList<'static>), (status = 401, body = Problem),
              (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn list(
    State(state): State<AppState>,
    Auth(principal): Auth,
    AppQuery(q): AppQuery<ListQuery>,
) -> Result<Response, ApiError> {
    operator(&principal, OPERATORS_ONLY)?;
    if let Some(s) = q.state.as_deref()
        && !matches!(s, "open" | "released" | "rejected")
    {
        return Err(ApiError::InvalidQuery(
            "state must be open, released or rejected".into(),
        ));
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::InvalidQuery(
            "limit must be between 1 and 500".into(),
        ));
    }
    let holds = ledger::holds::list(state.pool(), q.state.as_deref(), limit).await?;
    let items: Vec<HoldView<'_>> = holds
        .iter()
        .map(|h| hold_view_now(&h.hold, Some(&h.intent)))
        .collect();
    Ok(Json(HoldList { items }).into_response())
}

/// The body of a rejection: an optional reason.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Decision {
    #[schema(max_length = 1000)]
    reason: Option<String>,
}

/// The body of a release: an optional reason, and the confirmation a
/// release of a hold whose intent was applied since it opened needs.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReleaseDecision {
    #[schema(max_length = 1000)]
    reason: Option<String>,
    /// The command that applied the hold's intent after the hold opened
    /// (the hold's `intent.applied_since`), to run the intent again
    /// knowingly. Without it such a release is refused (409
    /// `/problems/hold-intent-applied`, naming the command); the hold keeps it.
    confirm_applied: Option<Uuid>,
}

/// An optional JSON object (or `null`, or nothing) as the body `T`; its
/// reason, if any, within bounds.
fn decision<T: serde::de::DeserializeOwned + Default>(
    body: &Bytes,
    reason: impl Fn(&T) -> Option<&String>,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let invalid = |e: &dyn std::fmt::Display| {
        ApiError::InvalidBody(format!("the decision is not valid: {e}"))
    };
    if let Some(duplicate) = crate::domain::json_keys::first_duplicate(body) {
        return Err(ApiError::DuplicateKey(duplicate));
    }
    let d: T = match serde_json::from_slice::<serde_json::Value>(body).map_err(|e| invalid(&e))? {
        serde_json::Value::Null => T::default(),
        object @ serde_json::Value::Object(_) => {
            serde_json::from_value(object).map_err(|e| invalid(&e))?
        }
        _ => return Err(invalid(&"it must be a JSON object")),
    };
    if reason(&d).is_some_and(|r| r.chars().count() > 1000 || r.contains('\0')) {
        return Err(ApiError::InvalidBody(
            "the reason is 0-1000 characters, without U+0000".into(),
        ));
    }
    Ok(d)
}

/// What every decision starts with: an operator, a hold id, an optional
/// reason; and who decides, as history names them.
fn deciding<T: serde::de::DeserializeOwned + Default>(
    principal: &Principal,
    id: &str,
    body: &Bytes,
    reason: impl Fn(&T) -> Option<&String>,
) -> Result<(Uuid, T, String), ApiError> {
    operator(principal, OPERATORS_ONLY)?;
    Ok((
        parse_id(id, "a hold id")?,
        decision(body, reason)?,
        principal.actor(),
    ))
}

/// `GET /v1/holds/{id}`: a device sees its own holds (another's is 404),
/// an operator every hold; the device learns here whether it was released.
#[utoipa::path(get, path = "/v1/holds/{id}", operation_id = "getHold", tag = "holds",
    params(("id" = Uuid, Path, description = "hold id")),
    responses((status = 200, body = HoldAnswer<'static>), (status = 401, body = Problem),
              (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn get_one(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "a hold id")?;
    let hold = ledger::holds::get(state.pool(), id)
        .await?
        .ok_or(ApiError::NotFound)?;
    if principal
        .visible_scope()
        .is_some_and(|scopes| !scopes.contains(&hold.hold.scope))
    {
        return Err(ApiError::NotFound);
    }
    Ok(Json(HoldAnswer::hold(&hold)).into_response())
}

/// `POST /v1/holds/{id}/release`: records the held request as a command.
#[utoipa::path(post, path = "/v1/holds/{id}/release", operation_id = "releaseHold", tag = "holds",
    params(("id" = Uuid, Path, description = "hold id")),
    request_body(content = Option<ReleaseDecision>, description = "optional {\"reason\", \"confirm_applied\"}"),
    responses((status = 200, body = HoldAnswer<'static>), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, description = "the hold is decided already, or its intent was applied since it opened and the release did not confirm it", body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn release(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (id, d, actor) = deciding(&principal, &id, &body, |d: &ReleaseDecision| {
        d.reason.as_ref()
    })?;
    let (hold, command) = ledger::holds::release(
        state.pool(),
        state.backend(),
        &state.wake,
        id,
        d.confirm_applied,
        &actor,
        d.reason.as_deref(),
    )
    .await?;
    Ok(Json(HoldAnswer::released(&hold, &command)).into_response())
}

/// `POST /v1/holds/{id}/reject`: nothing is recorded but the decision.
#[utoipa::path(post, path = "/v1/holds/{id}/reject", operation_id = "rejectHold", tag = "holds",
    params(("id" = Uuid, Path, description = "hold id")),
    request_body(content = Option<Decision>, description = "optional {\"reason\"}"),
    responses((status = 200, body = HoldAnswer<'static>), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn reject(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (id, d, actor) = deciding(&principal, &id, &body, |d: &Decision| d.reason.as_ref())?;
    let hold = ledger::holds::reject(state.pool(), id, &actor, d.reason.as_deref()).await?;
    Ok(Json(HoldAnswer::hold(&hold)).into_response())
}
