//! Resolving what is ambiguous, for operators: ask the kind's reconcile
//! probe again now (one command, or every unresolved ambiguous command of an
//! authority), or record what the provider said, with evidence. The command
//! stays `ambiguous` (terminal); the resolution is an append-only record
//! beside it (migration 0018). Nothing is ever retried from here.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::AppState;
use super::commands::{CommandView, view};
use super::error::{ApiError, Problem};
use super::extract::{AppJson, Auth};
use crate::db::resolutions::{NewResolution, ResolutionRow, ResolveError};
use crate::db::{self, CommandRow, Principal, Role};
use crate::domain::recovery::ProbeAnswer;
use crate::domain::{AuthorityId, State as CommandState};

/// Most commands one authority-wide probe asks about.
const PROBE_BATCH: i64 = 100;

/// A recorded resolution as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct ResolutionView {
    /// `applied`: the effect ran; `not_applied`: it never ran.
    outcome: String,
    evidence: String,
    /// The provider's reference for the effect, if given.
    reference: Option<String>,
    /// `operator` (recorded by hand) or `probe` (the reconcile probe answered).
    source: String,
    actor: String,
    at: DateTime<Utc>,
    /// SHA-256 (hex) chaining the resolution to the command's ambiguous
    /// history entry; `verify` recomputes it.
    hash: String,
}

pub(super) fn resolution_view(r: &ResolutionRow) -> ResolutionView {
    ResolutionView {
        outcome: r.outcome.clone(),
        evidence: r.evidence.clone(),
        reference: r.reference.clone(),
        source: r.source.clone(),
        actor: r.actor.clone(),
        at: r.at,
        hash: hex::encode(&r.hash),
    }
}

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

impl ResolutionBody {
    /// Checks the body (untrusted input).
    fn check(&self) -> Result<(), ApiError> {
        let invalid = |m: &str| Err(ApiError::InvalidBody(m.to_owned()));
        if !matches!(self.outcome.as_str(), "applied" | "not_applied") {
            return invalid("outcome must be \"applied\" or \"not_applied\"");
        }
        let evidence = self.evidence.trim();
        if evidence.is_empty() || self.evidence.chars().count() > 2000 {
            return invalid("evidence must be 1-2000 characters, not only spaces");
        }
        if self.evidence.contains('\0') {
            return invalid("evidence must not contain U+0000");
        }
        if let Some(r) = &self.reference
            && (r.trim().is_empty() || r.chars().count() > 200 || r.chars().any(char::is_control))
        {
            return invalid("reference must be 1-200 characters without control characters");
        }
        Ok(())
    }
}

/// A command with its resolution.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Resolved<'a> {
    command: CommandView<'a>,
    resolution: ResolutionView,
}

fn operator(principal: &Principal) -> Result<(), ApiError> {
    if principal.role == Role::Operator {
        Ok(())
    } else {
        Err(ApiError::Forbidden(
            "resolving ambiguous commands is for operators",
        ))
    }
}

fn parse_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw)
        .map_err(|_| ApiError::InvalidId(format!("{raw:?} is not a command id (UUID)")))
}

/// The command, which must be ambiguous and not yet resolved.
async fn unresolved_ambiguous(state: &AppState, id: Uuid) -> Result<CommandRow, ApiError> {
    let row = db::commands::get(&state.pool, id, None)
        .await?
        .ok_or(ApiError::NotFound)?;
    if row.state() != CommandState::Ambiguous {
        return Err(ApiError::NotAmbiguous {
            command_id: id,
            state: row.state(),
        });
    }
    if db::resolutions::get(&state.pool, &row.authority_id, id)
        .await?
        .is_some()
    {
        return Err(ApiError::AlreadyResolved { command_id: id });
    }
    Ok(row)
}

fn resolve_error(id: Uuid, row: &CommandRow, e: ResolveError) -> ApiError {
    match e {
        ResolveError::NotAmbiguous => ApiError::NotAmbiguous {
            command_id: id,
            state: row.state(),
        },
        ResolveError::AlreadyResolved => ApiError::AlreadyResolved { command_id: id },
        ResolveError::Db(e) => e.into(),
    }
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
    operator(&principal)?;
    let id = parse_id(&id)?;
    body.check()?;
    let row = unresolved_ambiguous(&state, id).await?;
    let actor = principal.actor();
    let resolution = db::resolutions::record(
        &state.pool,
        &NewResolution {
            command_id: id,
            authority_id: &row.authority_id,
            outcome: &body.outcome,
            evidence: body.evidence.trim(),
            reference: body.reference.as_deref().map(str::trim),
            source: "operator",
            actor: &actor,
        },
    )
    .await
    .map_err(|e| resolve_error(id, &row, e))?;
    tracing::info!(command.id = %id, actor = %actor, outcome = %resolution.outcome, "ambiguous command resolved");
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
    /// Recorded when the answer was definite; null otherwise.
    resolution: Option<ResolutionView>,
}

/// Asks the kind's reconcile probe about `row` and records a definite answer.
async fn probe_one(
    state: &AppState,
    row: &CommandRow,
    actor: &str,
) -> Result<ProbeResult, ApiError> {
    let probe = state.probes.as_ref().and_then(|p| p.probe(row));
    let answer = match probe {
        Some(probe) => probe.await,
        None => ProbeAnswer::Unknown("no reconcile probe for this kind in this process".to_owned()),
    };
    let (outcome, evidence, detail) = match answer {
        ProbeAnswer::Applied(result) => {
            let result = result.to_string();
            let shown: String = result.chars().take(1500).collect();
            (
                "applied",
                format!("the reconcile probe says the effect ran; it returned {shown}"),
                Some(result),
            )
        }
        ProbeAnswer::NotApplied => (
            "not_applied",
            "the reconcile probe says the effect never ran".to_owned(),
            None,
        ),
        ProbeAnswer::Unknown(why) => {
            return Ok(ProbeResult {
                command_id: row.id,
                answer: "unknown",
                detail: Some(why),
                resolution: None,
            });
        }
    };
    let resolution = db::resolutions::record(
        &state.pool,
        &NewResolution {
            command_id: row.id,
            authority_id: &row.authority_id,
            outcome,
            evidence: &evidence,
            reference: None,
            source: "probe",
            actor,
        },
    )
    .await
    .map_err(|e| resolve_error(row.id, row, e))?;
    tracing::info!(command.id = %row.id, actor, outcome, "ambiguous command resolved by its reconcile probe");
    Ok(ProbeResult {
        command_id: row.id,
        answer: outcome,
        detail,
        resolution: Some(resolution_view(&resolution)),
    })
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
    operator(&principal)?;
    let id = parse_id(&id)?;
    let row = unresolved_ambiguous(&state, id).await?;
    Ok(Json(probe_one(&state, &row, &principal.actor()).await?).into_response())
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
    params(("id" = inline(super::submit::AuthorityName), Path, description = "authority id")),
    responses((status = 200, body = ProbeAll), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 403, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn probe_authority(
    State(state): State<AppState>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    operator(&principal)?;
    let authority = AuthorityId::parse(&id).map_err(|e| ApiError::InvalidId(e.to_string()))?;
    let mut rows =
        db::resolutions::unresolved(&state.pool, authority.as_str(), PROBE_BATCH + 1).await?;
    let more = rows.len() as i64 > PROBE_BATCH;
    rows.truncate(usize::try_from(PROBE_BATCH).expect("small"));
    let actor = principal.actor();
    let mut results = Vec::with_capacity(rows.len());
    for row in &rows {
        match probe_one(&state, row, &actor).await {
            Ok(r) => results.push(r),
            // Resolved meanwhile by someone else: nothing to say about it.
            Err(ApiError::AlreadyResolved { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Json(ProbeAll {
        authority: authority.as_str().to_owned(),
        results,
        more,
    })
    .into_response())
}
