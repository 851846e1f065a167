//! Deciding holds, for the API and the command line alike. Releasing one
//! records its command (durably, before any dispatch, like every command)
//! and then wakes the custodians of its authority; rejecting one records
//! nothing else. Each decision keeps who, when and why.

use sqlx::PgPool;
use uuid::Uuid;

use super::{LedgerError, PendingWake};
use crate::db::holds::HoldRow;
use crate::db::{self, CommandRow};

/// Releases an open hold: its command is recorded `pending` under the key
/// `hold:<id>`, the hold closes as `released`, and the authority's
/// custodians are woken. A hold decided already is [`LedgerError::HoldDecided`].
pub async fn release(
    pool: &PgPool,
    backend: db::Backend,
    wake: &PendingWake,
    id: Uuid,
    actor: &str,
    reason: Option<&str>,
) -> Result<(HoldRow, CommandRow), LedgerError> {
    let mut conn = pool.acquire().await?;
    let Some((hold, command)) = db::holds::release(&mut conn, backend, id, actor, reason).await?
    else {
        drop(conn);
        return Err(decided_or_missing(pool, id).await);
    };
    tracing::info!(hold.id = %hold.id, command.id = %command.id, actor, "hold released");
    wake.pending(&command.authority_id).await;
    Ok((hold, command))
}

/// Rejects an open hold: nothing runs.
pub async fn reject(
    pool: &PgPool,
    id: Uuid,
    actor: &str,
    reason: Option<&str>,
) -> Result<HoldRow, LedgerError> {
    let Some(open) = db::holds::get(pool, id).await? else {
        return Err(LedgerError::NotFound);
    };
    match db::holds::decide(
        pool,
        &open.authority_id,
        id,
        "rejected",
        None,
        actor,
        reason,
    )
    .await?
    {
        Some(hold) => {
            tracing::info!(hold.id = %hold.id, actor, "hold rejected");
            Ok(hold)
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
