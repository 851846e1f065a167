//! Cancelling a command, for the API and the command line alike: it wins
//! only while no effect was attempted (`pending`, `prepared`), and a second
//! cancel of a cancelled command changes nothing and succeeds. The change
//! is one SERIALIZABLE compare-and-set (`db::commands::cancel`), audited
//! with who asked and "cancel requested"; waiters then learn the outcome.

use sqlx::PgPool;
use std::sync::atomic::AtomicU64;
use uuid::Uuid;

use super::{LedgerError, OutcomeWake};
use crate::db::{self, CancelOutcome, CommandRow};

/// What a cancel found.
#[derive(Debug, Clone, PartialEq)]
pub enum Cancelled {
    /// Cancelled by this call.
    Now(CommandRow),
    /// Cancelled before: nothing changed.
    Already(CommandRow),
}

impl Cancelled {
    /// The command, cancelled.
    pub fn row(&self) -> &CommandRow {
        match self {
            Cancelled::Now(row) | Cancelled::Already(row) => row,
        }
    }
}

/// Cancels command `id` of `scope` (`None`: any scope, for operators) on
/// behalf of `actor`; conflicts with a custodian are retried (counted in
/// `retries`). A command past `prepared` is [`LedgerError::CancelTooLate`];
/// one that does not exist, or not in `scope`, [`LedgerError::NotFound`].
pub async fn cancel(
    pool: &PgPool,
    backend: db::Backend,
    outcomes: &OutcomeWake,
    retries: &AtomicU64,
    id: Uuid,
    scope: Option<&[Uuid]>,
    actor: &str,
) -> Result<Cancelled, LedgerError> {
    match db::commands::cancel(pool, backend, retries, id, scope, actor).await? {
        CancelOutcome::Cancelled(row) => {
            tracing::info!(command.id = %row.id, actor, "command cancelled");
            outcomes.finished(&[row.id]).await;
            Ok(Cancelled::Now(row))
        }
        CancelOutcome::AlreadyCancelled(row) => Ok(Cancelled::Already(row)),
        CancelOutcome::TooLate(row) => Err(LedgerError::CancelTooLate {
            command_id: row.id,
            state: row.state(),
        }),
        CancelOutcome::NotFound => Err(LedgerError::NotFound),
    }
}
