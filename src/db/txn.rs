//! SERIALIZABLE transactions with bounded, jittered retries of serialization
//! failures and deadlocks (40001, 40P01), every retry counted; and the one
//! case that must never be retried blindly: a commit whose outcome is unknown.
//!
//! Every transaction of the service opens acting for someone: `BEGIN` and a
//! `SET LOCAL` of the settings the history triggers read (who, and on a
//! cancel why), before any statement ([`Opening`]). On one node they go in
//! one round trip. On Citus the `SET LOCAL`s follow in a message of their
//! own (`db::Backend::set_local_in_begin`): Citus sends a `SET`'s whole
//! message again to each worker the transaction reaches. A statement never
//! sets them itself: on Citus a `SET LOCAL` reaches the workers where the
//! triggers run (`citus.propagate_set_commands = 'local'`, set on the
//! database by `migrate`), and a statement that calls `set_config` is not
//! one the coordinator can send to a single shard.

use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Backend;

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

/// The isolation of a transaction.
///
/// The custodian's start and record, cancel and recovery's writes are always
/// `Serializable` in the service; `ledger-bench` can run start and record at
/// `ReadCommitted` to measure what SERIALIZABLE costs (W5), which weakens the
/// fence (a lease taken over while the transaction runs is not seen), and no
/// command-line option selects that. `ReadCommitted` is the claim's (one
/// compare-and-set statement with its own row locks, measured in W5) and the
/// inserts' of pending rows (the unique indexes decide).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    #[default]
    Serializable,
    /// Claims and inserts; start and record only in the benchmark's comparison.
    ReadCommitted,
}

/// The setting naming who acts: read by `ledger_actor()` for history entries
/// (migration 0016), else `sql:<role>`.
pub const ACTOR: &str = "command_ledger.actor";

/// Per-command actors of a multi-row insert, `{"<command id>": actor}`
/// (migration 0013), for a transaction that records several callers' rows.
pub const ACTORS: &str = "command_ledger.actors";

/// Why the change was made, recorded in history (`cancel requested`).
pub const REASON: &str = "command_ledger.reason";

/// Plan a prepared statement once for every value of its parameters
/// (`plan_cache_mode = force_generic_plan`), for the custodian's claim,
/// adopt, start and record on one node: a custom plan for one authority
/// follows that authority's statistics, and an authority
/// that was small or absent at the last ANALYZE and has a backlog now is
/// planned as a scan of all its commands per claimed row (seen: claims of
/// 128 rows taking 2 to 5 s behind a backlog of 10^4, ten times fewer
/// commands applied per second). The generic plan reaches each command by
/// its key whatever the authority's size.
pub const GENERIC_PLANS: (&str, &str) = ("plan_cache_mode", "force_generic_plan");

/// How long a transaction may sit idle between its statements before the
/// server ends its session (`idle_in_transaction_session_timeout`), for the
/// custodian's transactions: set to its lease TTL by
/// [`idle_limit`]. A custodian paused with a transaction open (a stopped
/// process, a stalled host) holds the authority row `for share` and the rows
/// it claimed; its successor's lease take waits on that lock. Past the TTL the
/// lease it acted under has lapsed anyway, so the server ends the session and
/// the locks go with it (the paused process finds its commit's outcome
/// unknown and dispatches nothing).
pub const IDLE_IN_TRANSACTION: &str = "idle_in_transaction_session_timeout";

/// The value of [`IDLE_IN_TRANSACTION`] for `limit`, in milliseconds (at
/// least one: zero would switch the limit off).
pub fn idle_limit(limit: Duration) -> String {
    format!("{}ms", limit.as_millis().max(1))
}

/// How a transaction opens at an isolation with settings set for it alone
/// (`SET LOCAL`): the `BEGIN` message, and on a backend that keeps them
/// apart ([`Backend::set_local_in_begin`] false) the settings' message sent
/// right after it.
#[derive(Debug, Clone)]
pub struct Opening {
    begin: String,
    settings: Option<String>,
}

impl Opening {
    pub fn new(backend: Backend, isolation: Isolation, settings: &[(&str, &str)]) -> Self {
        // The names are this module's constants; values are quoted.
        let set = settings
            .iter()
            .map(|(name, value)| format!("set local {name} = {}", super::roles::literal(value)))
            .collect::<Vec<_>>()
            .join("; ");
        let begin = isolation.begin();
        match (set.is_empty(), backend.set_local_in_begin) {
            (true, _) => Opening {
                begin: begin.to_owned(),
                settings: None,
            },
            (false, true) => Opening {
                begin: format!("{begin}; {set}"),
                settings: None,
            },
            (false, false) => Opening {
                begin: begin.to_owned(),
                settings: Some(set),
            },
        }
    }

    /// Opens the transaction on `pool`.
    pub async fn on(&self, pool: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let mut tx = pool
            .begin_with(sqlx::AssertSqlSafe(self.begin.clone()))
            .await?;
        self.set(&mut tx).await?;
        Ok(tx)
    }

    /// Opens the transaction on `conn`.
    pub async fn in_connection<'c>(
        &self,
        conn: &'c mut PgConnection,
    ) -> Result<Transaction<'c, Postgres>, sqlx::Error> {
        let mut tx =
            sqlx::Connection::begin_with(conn, sqlx::AssertSqlSafe(self.begin.clone())).await?;
        self.set(&mut tx).await?;
        Ok(tx)
    }

    async fn set(&self, tx: &mut PgConnection) -> Result<(), sqlx::Error> {
        if let Some(settings) = &self.settings {
            sqlx::raw_sql(sqlx::AssertSqlSafe(settings.clone()))
                .execute(tx)
                .await?;
        }
        Ok(())
    }
}

/// Opens a transaction on `pool` at `isolation`, acting as `actor`. For the
/// statements that run once, without retries.
pub async fn begin_as(
    pool: &PgPool,
    backend: Backend,
    isolation: Isolation,
    actor: &str,
) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    Opening::new(backend, isolation, &[(ACTOR, actor)])
        .on(pool)
        .await
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

/// A Citus coordinator's answer when a worker's COMMIT failed: a
/// serialization failure found at the worker's commit, but as well a
/// connection lost with the COMMIT in flight, which Citus cannot tell apart
/// ("we will often not know whether the commit has succeeded",
/// `FinishRemoteTransactionCommit` in its remote_transaction.c). So the
/// outcome is unknown, never a failure to act on.
fn is_citus_commit_failure(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|d| {
        d.message()
            .starts_with("could not commit transaction for shard")
    })
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
/// let mut retry = Retrying::new(pool, backend, &stats.serialization_retries, "start", Isolation::Serializable, actor);
/// let rows = loop {
///     let mut tx = retry.next_attempt().await?;
///     let result = db::lifecycle::start_prepared(&mut *tx, ...).await;
///     if let Some(rows) = retry.finish(tx, result).await? { break rows; }
/// };
/// ```
#[derive(Debug)]
pub struct Retrying<'a> {
    pool: &'a PgPool,
    retries: &'a AtomicU64,
    what: &'static str,
    attempt: u32,
    /// `BEGIN` and the `SET LOCAL`s.
    opening: Opening,
}

impl<'a> Retrying<'a> {
    pub fn new(
        pool: &'a PgPool,
        backend: Backend,
        retries: &'a AtomicU64,
        what: &'static str,
        isolation: Isolation,
        actor: &str,
    ) -> Self {
        Retrying::with_settings(pool, backend, retries, what, isolation, &[(ACTOR, actor)])
    }

    /// [`Retrying::new`] with settings besides (or instead of) the actor.
    pub fn with_settings(
        pool: &'a PgPool,
        backend: Backend,
        retries: &'a AtomicU64,
        what: &'static str,
        isolation: Isolation,
        settings: &[(&str, &str)],
    ) -> Self {
        Retrying {
            pool,
            retries,
            what,
            attempt: 0,
            opening: Opening::new(backend, isolation, settings),
        }
    }

    /// Opens the next attempt's transaction (the isolation and settings
    /// given), or gives up after [`MAX_ATTEMPTS`] serialization conflicts.
    pub async fn next_attempt(&mut self) -> Result<Transaction<'static, Postgres>, TxError> {
        if self.attempt >= MAX_ATTEMPTS {
            tracing::warn!(
                what = self.what,
                "giving up after {MAX_ATTEMPTS} serialization conflicts"
            );
            return Err(TxError::Exhausted);
        }
        self.attempt += 1;
        self.opening.on(self.pool).await.map_err(TxError::Failed)
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
            Err(e) if is_citus_commit_failure(&e) => Err(TxError::CommitUnknown(e)),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn opening(backend: Backend, settings: &[(&str, &str)]) -> (String, Option<String>) {
        let o = Opening::new(backend, Isolation::Serializable, settings);
        (o.begin, o.settings)
    }

    #[test]
    fn one_node_opens_and_sets_in_one_message() {
        assert_eq!(
            opening(
                Backend::ONE_NODE,
                &[(ACTOR, "device:kiosk"), (REASON, "it's late")]
            ),
            (
                "begin isolation level serializable; set local command_ledger.actor = \
                 'device:kiosk'; set local command_ledger.reason = 'it''s late'"
                    .to_owned(),
                None
            )
        );
    }

    #[test]
    fn citus_sets_in_a_message_of_its_own_that_holds_no_begin() {
        let (begin, settings) =
            opening(Backend::CITUS, &[(ACTOR, "device:kiosk"), (REASON, "late")]);
        assert_eq!(begin, "begin isolation level serializable");
        let settings = settings.expect("the settings follow");
        assert!(!settings.to_lowercase().contains("begin"), "{settings}");
        assert_eq!(
            settings,
            "set local command_ledger.actor = 'device:kiosk'; set local command_ledger.reason = 'late'"
        );
    }

    #[test]
    fn an_idle_limit_is_whole_milliseconds_and_never_off() {
        assert_eq!(idle_limit(Duration::from_secs(10)), "10000ms");
        assert_eq!(idle_limit(Duration::from_micros(1500)), "1ms");
        assert_eq!(idle_limit(Duration::ZERO), "1ms");
    }

    #[test]
    fn without_settings_there_is_only_the_begin() {
        for backend in [Backend::ONE_NODE, Backend::CITUS] {
            assert_eq!(
                opening(backend, &[]),
                ("begin isolation level serializable".to_owned(), None)
            );
        }
    }
}
