//! Resolving what is ambiguous, for the API and the command line alike:
//! record what the provider said, with evidence, or ask the kind's
//! reconcile probe again now (one command, or the unresolved ambiguous
//! commands of an authority) and record a definite answer. The command
//! stays `ambiguous` (terminal); the resolution is an append-only record
//! beside it (migration 0018), once per command. Nothing is ever retried.
//! A probe's "not found" is recorded only once the effect can no longer
//! take hold (`domain::recovery::weigh`); before that the answer is
//! `unknown`, with when to ask again.

use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::LedgerError;
use super::probe::{Prober, weigh_by_database_clock};
use crate::db::resolutions::{NewResolution, ResolutionRow, ResolveError};
use crate::db::{self, CommandRow};
use crate::domain::recovery::{ProbeAnswer, Verdict};
use crate::domain::{AuthorityId, CommandState};

/// Most commands one authority-wide probe asks about.
pub const PROBE_BATCH: i64 = 100;

/// What an operator learned about an effect: `applied` (it ran) or
/// `not_applied` (it never ran), what says so, and the provider's
/// reference if there is one. Untrusted input: [`resolve`] checks it.
#[derive(Debug, Clone, Copy)]
pub struct Finding<'a> {
    pub outcome: &'a str,
    pub evidence: &'a str,
    pub reference: Option<&'a str>,
}

impl Finding<'_> {
    fn check(&self) -> Result<(), LedgerError> {
        let invalid = |m: &str| Err(LedgerError::InvalidResolution(m.to_owned()));
        if !matches!(self.outcome, "applied" | "not_applied") {
            return invalid("outcome must be \"applied\" or \"not_applied\"");
        }
        if self.evidence.trim().is_empty() || self.evidence.chars().count() > 2000 {
            return invalid("evidence must be 1-2000 characters, not only spaces");
        }
        if self.evidence.contains('\0') {
            return invalid("evidence must not contain U+0000");
        }
        if let Some(r) = self.reference
            && (r.trim().is_empty() || r.chars().count() > 200 || r.chars().any(char::is_control))
        {
            return invalid("reference must be 1-200 characters without control characters");
        }
        Ok(())
    }
}

/// Records `finding` as the resolution of ambiguous command `id`, on
/// behalf of `actor`. Returns the command (unchanged, ambiguous) and the
/// resolution.
pub async fn resolve(
    pool: &PgPool,
    backend: db::Backend,
    id: Uuid,
    finding: &Finding<'_>,
    actor: &str,
) -> Result<(CommandRow, ResolutionRow), LedgerError> {
    finding.check()?;
    let row = unresolved_ambiguous(pool, id).await?;
    let resolution = db::resolutions::append(
        pool,
        backend,
        &NewResolution {
            command_id: id,
            authority_id: &row.authority_id,
            outcome: finding.outcome,
            evidence: finding.evidence.trim(),
            reference: finding.reference.map(str::trim),
            source: "operator",
            actor,
        },
    )
    .await
    .map_err(|e| refused(&row, e))?;
    tracing::info!(command.id = %id, actor, outcome = %resolution.outcome, "ambiguous command resolved");
    Ok((row, resolution))
}

/// What one probe said about one command.
#[derive(Debug, Clone)]
pub struct Probed {
    pub command_id: Uuid,
    /// `applied`, `not_applied` or `unknown`.
    pub answer: &'static str,
    /// Why the answer is unknown, or what the probe returned.
    pub detail: Option<String>,
    /// When a "not found" will count: the effect may take hold until then.
    pub ask_again_at: Option<DateTime<Utc>>,
    /// Recorded when the answer was definite.
    pub resolution: Option<ResolutionRow>,
}

/// Asks the reconcile probe of ambiguous command `id`'s kind whether its
/// effect ran, through `prober` (`None`: this process has no probes), and
/// records a definite answer as its resolution. The probe only reads.
pub async fn probe(
    pool: &PgPool,
    backend: db::Backend,
    prober: Option<&dyn Prober>,
    id: Uuid,
    actor: &str,
) -> Result<Probed, LedgerError> {
    let row = unresolved_ambiguous(pool, id).await?;
    probe_one(pool, backend, prober, &row, actor).await
}

/// [`probe`] for the unresolved ambiguous commands of `authority`, oldest
/// first, at most [`PROBE_BATCH`]; `true` beside them when more remain.
/// One resolved meanwhile by someone else is left out.
pub async fn probe_authority(
    pool: &PgPool,
    backend: db::Backend,
    prober: Option<&dyn Prober>,
    authority: &AuthorityId,
    actor: &str,
) -> Result<(Vec<Probed>, bool), LedgerError> {
    let mut rows = db::resolutions::unresolved(pool, authority.as_str(), PROBE_BATCH + 1).await?;
    let more = rows.len() as i64 > PROBE_BATCH;
    rows.truncate(usize::try_from(PROBE_BATCH).expect("small"));
    let mut results = Vec::with_capacity(rows.len());
    for row in &rows {
        match probe_one(pool, backend, prober, row, actor).await {
            Ok(r) => results.push(r),
            Err(LedgerError::AlreadyResolved { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((results, more))
}

/// The command, which must be ambiguous and not yet resolved.
async fn unresolved_ambiguous(pool: &PgPool, id: Uuid) -> Result<CommandRow, LedgerError> {
    let row = db::commands::get(pool, id, None)
        .await?
        .ok_or(LedgerError::NotFound)?;
    if row.state() != CommandState::Ambiguous {
        return Err(LedgerError::NotAmbiguous {
            command_id: id,
            state: row.state(),
        });
    }
    if db::resolutions::get(pool, &row.authority_id, id)
        .await?
        .is_some()
    {
        return Err(LedgerError::AlreadyResolved { command_id: id });
    }
    Ok(row)
}

/// Why the database refused a resolution of `row`.
fn refused(row: &CommandRow, e: ResolveError) -> LedgerError {
    match e {
        ResolveError::NotAmbiguous => LedgerError::NotAmbiguous {
            command_id: row.id,
            state: row.state(),
        },
        ResolveError::AlreadyResolved => LedgerError::AlreadyResolved { command_id: row.id },
        ResolveError::Db(e) => e.into(),
    }
}

/// Asks the probe about `row` and records a definite answer.
async fn probe_one(
    pool: &PgPool,
    backend: db::Backend,
    prober: Option<&dyn Prober>,
    row: &CommandRow,
    actor: &str,
) -> Result<Probed, LedgerError> {
    let (started_at, read_at) =
        db::resolutions::effect_started_at(pool, &row.authority_id, row.id).await?;
    let asked = std::time::Instant::now();
    let answer = match prober.and_then(|p| p.probe(row)) {
        Some(probe) => probe.await,
        None => ProbeAnswer::Unknown("no reconcile probe for this kind in this process".to_owned()),
    };
    let lasts = prober.and_then(|p| p.window(&row.kind));
    let (verdict, window) = weigh_by_database_clock(answer, started_at, lasts, read_at, asked);
    let (outcome, evidence, detail) = match verdict {
        Verdict::NotYet { ask_again_at } => {
            return Ok(Probed {
                command_id: row.id,
                answer: "unknown",
                detail: Some(format!(
                    "the probe found no effect yet, but the effect dispatched at {} may still take hold until {} (the kind's timeout plus its probe_margin); nothing was recorded: ask again after then",
                    window
                        .started_at
                        .to_rfc3339_opts(SecondsFormat::Millis, true),
                    ask_again_at.to_rfc3339_opts(SecondsFormat::Millis, true),
                )),
                ask_again_at: Some(ask_again_at),
                resolution: None,
            });
        }
        Verdict::Applied(result) => {
            let result = result.to_string();
            let shown: String = result.chars().take(1500).collect();
            (
                "applied",
                format!("the reconcile probe says the effect ran; it returned {shown}"),
                Some(result),
            )
        }
        Verdict::NotApplied => (
            "not_applied",
            "the reconcile probe says the effect never ran, and its deadline has passed".to_owned(),
            None,
        ),
        Verdict::Unknown(why) => {
            return Ok(Probed {
                command_id: row.id,
                answer: "unknown",
                detail: Some(why),
                ask_again_at: None,
                resolution: None,
            });
        }
    };
    let resolution = db::resolutions::append(
        pool,
        backend,
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
    .map_err(|e| refused(row, e))?;
    tracing::info!(command.id = %row.id, actor, outcome, "ambiguous command resolved by its reconcile probe");
    Ok(Probed {
        command_id: row.id,
        answer: outcome,
        detail,
        ask_again_at: None,
        resolution: Some(resolution),
    })
}
