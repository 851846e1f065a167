//! `POST /v1/intents/explain`: why two requests are (or are not) one
//! intent. Reads a request exactly as admission would, under the kind's
//! policy (its declared args schema included), and answers with the
//! canonical form, the fingerprint and the rules that fired, or the
//! refusal admission would give. Records nothing.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::error::{ApiError, Problem};
use super::extract::{AppJson, Auth};
use super::params::{AuthorityField, args, authority_or_catalog, invalid, kind_schema, run_id};
use crate::domain::Kind;
use crate::domain::admission::{DedupScope, KeyMode, OnFailure};
use crate::ledger::submit::Submission;

/// A request to explain: the body of `POST /v1/commands` or of
/// `POST /v1/invoke` (`tool`, `runId`), the authority defaulting to the
/// catalog's for the kind.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ExplainBody {
    #[serde(alias = "tool")]
    #[schema(schema_with = kind_schema)]
    kind: String,
    #[serde(default)]
    authority: Option<AuthorityField>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    args: Option<Value>,
    #[serde(default, alias = "runId")]
    #[schema(pattern = r"^[ -~]{1,128}$")]
    run_id: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Explanation {
    /// The request in canonical form: what the digests are computed over.
    #[schema(value_type = Object)]
    canonical: Value,
    /// The canonicalization rules that fired, as `rule@path`.
    canonical_rules: Vec<String>,
    /// The intent digest (hex): equal for every spelling of one intent, whatever the run.
    fingerprint: String,
    /// The request digest (hex): the intent plus the run id; decides replay
    /// against conflict under one key.
    request_digest: String,
    canonicalizer_version: i16,
    /// The kind's admission policy that would apply.
    policy: PolicyView,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct PolicyView {
    /// `required` or `fingerprint` (the intent may stand in for a key).
    key: &'static str,
    /// `fleet` or `principal`: where keys and fingerprints are unique.
    dedup_scope: &'static str,
    /// `release` or `replay`: what a failure with nothing done does to its intent.
    on_failure: &'static str,
    /// The kind's currency for amounts that name none, if any.
    currency: Option<String>,
}

/// `POST /v1/intents/explain`: canonicalizes without recording anything.
#[utoipa::path(post, path = "/v1/intents/explain", operation_id = "explainIntent", tag = "commands",
    request_body = ExplainBody,
    responses((status = 200, body = Explanation), (status = 400, body = Problem), (status = 401, body = Problem),
              (status = 429, body = Problem)),
    security(("bearer" = [])))]
pub(super) async fn explain(
    State(state): State<AppState>,
    Auth(_principal): Auth,
    AppJson(body): AppJson<ExplainBody>,
) -> Result<Response, ApiError> {
    let kind = Kind::parse(&body.kind).map_err(|e| invalid(&e))?;
    let policy = state.policies.get(kind.as_str());
    let authority =
        authority_or_catalog(body.authority, policy.authority.as_deref(), "kind", &kind)?;
    let sub = Submission {
        kind,
        authority,
        args: args(body.args)?,
        run_id: run_id(body.run_id)?,
        deadline: None,
        not_before: None,
        priority: None,
        trace: None,
    };
    // What admission would read, or refuse: the same check, nothing recorded.
    let c = crate::ledger::submit::read(&sub, policy)?;
    Ok(Json(Explanation {
        canonical: c.form,
        canonical_rules: c.rules,
        fingerprint: c.intent_digest.to_string(),
        request_digest: c.digest.to_string(),
        canonicalizer_version: c.version,
        policy: PolicyView {
            key: match policy.key {
                KeyMode::Required => "required",
                KeyMode::Fingerprint => "fingerprint",
            },
            dedup_scope: match policy.dedup_scope {
                DedupScope::Fleet => "fleet",
                DedupScope::Principal => "principal",
            },
            on_failure: match policy.on_failure {
                OnFailure::Release => "release",
                OnFailure::Replay => "replay",
            },
            currency: policy.canonical.currency.clone(),
        },
    })
    .into_response())
}
