//! Resolving what is ambiguous, for operators, over HTTP: ask the kind's
//! reconcile probe again now (one command, or every unresolved ambiguous
//! command of an authority), or record what the provider said, with
//! evidence. The use cases are `ledger::resolutions`, which the command
//! line calls too; the command stays `ambiguous` and nothing is retried.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{AppJson, Auth, operator};
use super::params::{AuthorityName, authority_id, parse_id};
use super::views::{CommandView, ResolutionView, resolution_view, view};
use crate::ledger::resolutions::{self, Finding, Probed};

/// Resolving is for operators.
const OPERATORS_ONLY: &str = "resolving ambiguous commands is for operators";

/// What an operator learned: `{"outcome", "evidence", "reference"?}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResolutionBody {
    /// `applied` (the provider says the effect ran) or `not_applied` (it never ran).
    #[schema(pattern = "^(applied|not_applied)$")]
    outcome: String,
    /// What says so, 1-2000 characters (for example "provider support ticket 4411: refund done").
    #[schema(min_length = 1, max_length = 2000)]
    evidence: String,
    /// The provider's reference for the effect, 1-200 characters (for example "rf_123").
    #[schema(min_length = 1, max_length = 200)]
    reference: Option<String>,
}

/// A command with its resolution.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Resolved<'a> {
    command: CommandView<'a>,
    resolution: ResolutionView,
}

/// `POST /v1/commands/{id}/resolution`: records what the provider said
/// about an ambiguous command. Operators only; once per command.
#[utoipa::path(post, path = "/v1/commands/{id}/resolution", operation_id = "resolveCommand", tag = "operations",
    params(("id" = Uuid, Path, description = "command id")),
    request_body = ResolutionBody,
    responses((status = 201, body = Resolved<'static>), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, description = "the command is not ambiguous, or is resolved already", body = Problem),
              (status = 415, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn resolve(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
    AppJson(body): AppJson<ResolutionBody>,
) -> Result<Response, ApiError> {
    operator(&principal, OPERATORS_ONLY)?;
    let id = parse_id(&id, "a command id")?;
    let finding = Finding {
        outcome: &body.outcome,
        evidence: &body.evidence,
        reference: body.reference.as_deref(),
    };
    let (row, resolution) = resolutions::resolve(
        state.pool(),
        state.backend(),
        id,
        &finding,
        &principal.actor(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(Resolved {
            command: view(&row, None),
            resolution: resolution_view(&resolution),
        }),
    )
        .into_response())
}

/// What one probe said.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ProbeResult {
    command_id: Uuid,
    /// `applied`, `not_applied` or `unknown`.
    answer: &'static str,
    /// Why the answer is unknown, or what the probe returned.
    detail: Option<String>,
    /// Set when the probe found no effect while the effect could still take
    /// hold (before its deadline plus the kind's probe margin, counted from
    /// `effect_started`): nothing was recorded; ask again after this time.
    ask_again_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Recorded when the answer was definite; null otherwise.
    resolution: Option<ResolutionView>,
}

impl From<Probed> for ProbeResult {
    fn from(p: Probed) -> Self {
        ProbeResult {
            command_id: p.command_id,
            answer: p.answer,
            detail: p.detail,
            ask_again_at: p.ask_again_at,
            resolution: p.resolution.as_ref().map(resolution_view),
        }
    }
}

/// `POST /v1/commands/{id}/probe`: asks the kind's reconcile probe now
/// whether the effect of an ambiguous command ran; a definite answer is
/// recorded as its resolution. The probe only reads; nothing is retried.
#[utoipa::path(post, path = "/v1/commands/{id}/probe", operation_id = "probeCommand", tag = "operations",
    params(("id" = Uuid, Path, description = "command id")),
    responses((status = 200, body = ProbeResult), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem), (status = 404, body = Problem),
              (status = 409, description = "the command is not ambiguous, or is resolved already", body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn probe(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    operator(&principal, OPERATORS_ONLY)?;
    let id = parse_id(&id, "a command id")?;
    let probed = resolutions::probe(
        state.pool(),
        state.backend(),
        state.probes.as_deref(),
        id,
        &principal.actor(),
    )
    .await?;
    Ok(Json(ProbeResult::from(probed)).into_response())
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ProbeAll {
    authority: String,
    /// One per unresolved ambiguous command asked about (oldest first, at most 100).
    results: Vec<ProbeResult>,
    /// More unresolved ambiguous commands remain: call again.
    more: bool,
}

/// `POST /v1/authorities/{id}/probe-ambiguous`: the probe, now, for every
/// unresolved ambiguous command of the authority (up to 100 per call).
#[utoipa::path(post, path = "/v1/authorities/{id}/probe-ambiguous", operation_id = "probeAuthorityAmbiguous", tag = "operations",
    params(("id" = inline(AuthorityName), Path, description = "authority id")),
    responses((status = 200, body = ProbeAll), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn probe_authority(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    operator(&principal, OPERATORS_ONLY)?;
    let authority = authority_id(&id)?;
    let (results, more) = resolutions::probe_authority(
        state.pool(),
        state.backend(),
        state.probes.as_deref(),
        &authority,
        &principal.actor(),
    )
    .await?;
    Ok(Json(ProbeAll {
        authority: authority.as_str().to_owned(),
        results: results.into_iter().map(ProbeResult::from).collect(),
        more,
    })
    .into_response())
}
