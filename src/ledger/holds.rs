//! Deciding holds, for the API and the command line alike. Releasing one
//! records its command (durably, before any dispatch, like every command)
//! and then wakes the custodians of its authority; rejecting one records
//! nothing else. Each decision keeps who, when and why.

use sqlx::PgPool;
use uuid::Uuid;

use super::{LedgerError, PendingWake};
use crate::db::holds::{HoldRow, Released};
use crate::db::{self, CommandRow};
use crate::domain::hold::IntentNow;

/// A hold, and what the ledger says now about its intent: an operator
/// decides on this, not on the hold as it was opened.
#[derive(Debug, Clone)]
pub struct HoldNow {
    pub hold: HoldRow,
    pub intent: IntentNow,
}

/// Hold `id` and its intent now.
pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<HoldNow>, LedgerError> {
    let Some(hold) = db::holds::get(pool, id).await? else {
        return Ok(None);
    };
    Ok(Some(now(pool, hold).await?))
}

/// Holds newest first (only those in `state` when given), each with its
/// intent now.
pub async fn list(
    pool: &PgPool,
    state: Option<&str>,
    limit: i64,
) -> Result<Vec<HoldNow>, LedgerError> {
    let mut out = Vec::new();
    for hold in db::holds::list(pool, state, limit).await? {
        out.push(now(pool, hold).await?);
    }
    Ok(out)
}

async fn now(pool: &PgPool, hold: HoldRow) -> Result<HoldNow, LedgerError> {
    let intent = db::holds::intent_now(pool, &hold).await?;
    Ok(HoldNow { hold, intent })
}

/// Releases an open hold: its command is recorded `pending` under the key
/// `hold:<id>`, the hold closes as `released`, and the authority's
/// custodians are woken. A hold decided already is
/// [`LedgerError::HoldDecided`]; one whose intent was applied after it
/// opened is [`LedgerError::HoldIntentApplied`] unless `confirmed_applied`
/// names that applied command (kept on the hold).
pub async fn release(
    pool: &PgPool,
    backend: db::Backend,
    wake: &PendingWake,
    id: Uuid,
    confirmed_applied: Option<Uuid>,
    actor: &str,
    reason: Option<&str>,
) -> Result<(HoldNow, CommandRow), LedgerError> {
    let mut conn = pool.acquire().await?;
    let released =
        db::holds::release(&mut conn, backend, id, confirmed_applied, actor, reason).await?;
    drop(conn);
    let (hold, command) = match released {
        Released::Done(done) => *done,
        Released::NotOpen => return Err(decided_or_missing(pool, id).await),
        Released::Unconfirmed(applied) => {
            return Err(LedgerError::HoldIntentApplied {
                hold_id: id,
                applied_command_id: applied,
            });
        }
    };
    tracing::info!(hold.id = %hold.id, command.id = %command.id, actor,
        confirmed_applied = ?hold.confirmed_applied, "hold released");
    wake.pending(&command.authority_id).await;
    Ok((now(pool, hold).await?, command))
}

/// Rejects an open hold: nothing runs.
pub async fn reject(
    pool: &PgPool,
    id: Uuid,
    actor: &str,
    reason: Option<&str>,
) -> Result<HoldNow, LedgerError> {
    let Some(open) = db::holds::get(pool, id).await? else {
        return Err(LedgerError::NotFound);
    };
    match db::holds::decide(
        pool,
        &open.authority_id,
        id,
        "rejected",
        None,
        None,
        actor,
        reason,
    )
    .await?
    {
        Some(hold) => {
            tracing::info!(hold.id = %hold.id, actor, "hold rejected");
            now(pool, hold).await
        }
        None => Err(decided_or_missing(pool, id).await),
    }
}

/// Why a hold could not be decided: decided already, or missing.
async fn decided_or_missing(pool: &PgPool, id: Uuid) -> LedgerError {
    match db::holds::get(pool, id).await {
        Ok(Some(h)) => LedgerError::HoldDecided {
            hold_id: h.id,
            state: h.state,
        },
        Ok(None) => LedgerError::NotFound,
        Err(e) => e.into(),
    }
}
