//! SERIALIZABLE transactions with bounded, jittered retries of serialization
//! failures and deadlocks (40001, 40P01), every retry counted; and the one
//! case that must never be retried blindly: a commit whose outcome is unknown.

use sqlx::{PgPool, Postgres, Transaction};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Attempts before a serialization failure is given up on.
pub const MAX_ATTEMPTS: u32 = 8;

#[derive(Debug, thiserror::Error)]
pub enum TxError {
    /// The transaction certainly did not commit.
    #[error("transaction failed: {0}")]
    Failed(#[source] sqlx::Error),
    /// Still conflicting after every attempt; it did not commit.
    #[error("transaction kept failing to serialize after {MAX_ATTEMPTS} attempts")]
    Exhausted,
    /// The COMMIT was sent and no answer came back: it may or may not have
    /// committed. The caller must re-read before acting.
    #[error("commit outcome unknown: {0}")]
    CommitUnknown(#[source] sqlx::Error),
}

/// The isolation of the custodian's start and record transactions.
///
/// Always `Serializable` in the service. `ReadCommitted` exists only so
/// `ledger-bench` can measure what SERIALIZABLE costs (W5): it weakens the
/// fence (a lease taken over while the transaction runs is not seen), and no
/// command-line option selects it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    #[default]
    Serializable,
    /// The benchmark's comparison only.
    ReadCommitted,
}

impl Isolation {
    fn begin(self) -> &'static str {
        match self {
            Isolation::Serializable => "begin isolation level serializable",
            Isolation::ReadCommitted => "begin isolation level read committed",
        }
    }
}

fn is_retryable(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "40001" || code == "40P01")
}

fn jitter(attempt: u32) -> Duration {
    let base_ms = 2u64 << attempt.min(6);
    let random = getrandom::u64().unwrap_or(0x9e37_79b9_7f4a_7c15);
    Duration::from_millis(base_ms / 2 + random % base_ms)
}

/// One transaction at the custodian's isolation (SERIALIZABLE), retried on
/// conflicts:
///
/// ```ignore
/// let mut retry = Retrying::new(pool, &stats.serialization_retries, "start", Isolation::Serializable);
/// let rows = loop {
///     let mut tx = retry.begin().await?;
///     let result = db::lifecycle::start(&mut *tx, ...).await;
///     if let Some(rows) = retry.finish(tx, result).await? { break rows; }
/// };
/// ```
#[derive(Debug)]
pub struct Retrying<'a> {
    pool: &'a PgPool,
    retries: &'a AtomicU64,
    what: &'static str,
    attempt: u32,
    isolation: Isolation,
}

impl<'a> Retrying<'a> {
    pub fn new(
        pool: &'a PgPool,
        retries: &'a AtomicU64,
        what: &'static str,
        isolation: Isolation,
    ) -> Self {
        Retrying {
            pool,
            retries,
            what,
            attempt: 0,
            isolation,
        }
    }

    pub async fn begin(&mut self) -> Result<Transaction<'static, Postgres>, TxError> {
        if self.attempt >= MAX_ATTEMPTS {
            tracing::warn!(
                what = self.what,
                "giving up after {MAX_ATTEMPTS} serialization conflicts"
            );
            return Err(TxError::Exhausted);
        }
        self.attempt += 1;
        self.pool
            .begin_with(self.isolation.begin())
            .await
            .map_err(TxError::Failed)
    }

    /// Commits when the work succeeded. `Ok(None)`: a conflict, begin again.
    pub async fn finish<T>(
        &mut self,
        tx: Transaction<'static, Postgres>,
        result: Result<T, sqlx::Error>,
    ) -> Result<Option<T>, TxError> {
        let value = match result {
            Ok(v) => v,
            Err(e) if is_retryable(&e) => {
                drop(tx);
                self.conflict(&e).await;
                return Ok(None);
            }
            Err(e) => return Err(TxError::Failed(e)),
        };
        match tx.commit().await {
            Ok(()) => Ok(Some(value)),
            Err(e) if is_retryable(&e) => {
                self.conflict(&e).await;
                Ok(None)
            }
            Err(e) if e.as_database_error().is_some() => Err(TxError::Failed(e)),
            Err(e) => Err(TxError::CommitUnknown(e)),
        }
    }

    async fn conflict(&self, e: &sqlx::Error) {
        self.retries.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(what = self.what, attempt = self.attempt, error = %e, "serialization conflict; retrying");
        tokio::time::sleep(jitter(self.attempt)).await;
    }
}
