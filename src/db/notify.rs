//! The two notification channels, in one place: sending a wake-up on the
//! pending channel, and listening on either with one reconnect rule.
//!
//! - [`PENDING_CHANNEL`]: API processes notify it (payload: the authority id)
//!   after a submission commits; custodians listen to claim at once.
//! - [`OUTCOME_CHANNEL`]: the `commands_record_changes` trigger (migration
//!   0008) notifies it (payload: the command id) when a command becomes
//!   terminal; API processes listen to wake waiting clients. On Citus the
//!   shards' triggers cannot (docs/SCALING.md), so there whoever made the
//!   command terminal sends it with [`outcomes`] right after its commit
//!   (`crate::ledger::OutcomeWake`).
//!
//! The reconnect rule: when the connection fails, the listener says so (a
//! [`Heard::Gap`]: notifications may have been lost, so re-read), waits
//! [`RECONNECT_DELAY`], connects again and says so again (anything may have
//! happened while it was away). Nothing here is a correctness matter: both
//! sides also poll or re-read, so a lost notification only costs latency.

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use std::time::Duration;
use uuid::Uuid;

/// New pending rows exist for the authority in the payload.
pub const PENDING_CHANNEL: &str = "command_ledger_pending";

/// The command in the payload became terminal. The name is also written in
/// the trigger of migrations 0002 and 0008; a test listens to it.
pub const OUTCOME_CHANNEL: &str = "command_ledger_outcome";

/// How long a failed listener waits before it connects again.
pub const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// Wakes the custodians of `authority` (sent outside any transaction: a
/// NOTIFY inside one takes a global lock at commit).
pub async fn pending(pool: &PgPool, authority: &str) -> Result<(), sqlx::Error> {
    sqlx::query("select pg_notify($1, $2)")
        .bind(PENDING_CHANNEL)
        .bind(authority)
        .execute(pool)
        .await?;
    Ok(())
}

/// Wakes the waiters of `ids`, which became terminal in a transaction that
/// has committed: one statement, outside any transaction, on the
/// coordinator where the API processes listen. For Citus, whose shards send
/// no outcome notification; on one node the trigger already did, in the
/// same commit.
pub async fn outcomes(pool: &PgPool, ids: &[Uuid]) -> Result<(), sqlx::Error> {
    if ids.is_empty() {
        return Ok(());
    }
    sqlx::query("select pg_notify($1, id::text) from unnest($2::uuid[]) as id")
        .bind(OUTCOME_CHANNEL)
        .bind(ids)
        .execute(pool)
        .await?;
    Ok(())
}

/// What a listener heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A notification, with its payload.
    Notified(String),
    /// The listener (re)connected, or lost its connection: notifications
    /// may have been missed, so whoever relies on them re-reads.
    Gap,
}

/// A LISTEN on one channel that reconnects by the rule above.
#[derive(Debug)]
pub struct Listener {
    pool: PgPool,
    channel: &'static str,
    connection: Option<PgListener>,
    /// The last attempt failed: wait before the next.
    failed: bool,
}

impl Listener {
    /// Connects lazily, on the first [`Listener::recv`].
    pub fn new(pool: PgPool, channel: &'static str) -> Self {
        Listener {
            pool,
            channel,
            connection: None,
            failed: false,
        }
    }

    /// The next thing heard; `None` once the pool is closed. Cancel-safe:
    /// dropped mid-way, the next call picks up where this one was.
    pub async fn recv(&mut self) -> Option<Heard> {
        loop {
            if self.pool.is_closed() {
                return None;
            }
            let Some(listener) = self.connection.as_mut() else {
                if self.failed {
                    tokio::time::sleep(RECONNECT_DELAY).await;
                }
                match connect(&self.pool, self.channel).await {
                    Ok(l) => {
                        self.connection = Some(l);
                        self.failed = false;
                        return Some(Heard::Gap);
                    }
                    Err(e) => {
                        self.failed = true;
                        if !self.pool.is_closed() {
                            tracing::warn!(channel = self.channel, error = %e, "notification listener cannot connect; retrying");
                        }
                        continue;
                    }
                }
            };
            match listener.try_recv().await {
                Ok(Some(n)) => return Some(Heard::Notified(n.payload().to_owned())),
                // The connection was lost; the next call re-establishes it.
                Ok(None) => return Some(Heard::Gap),
                Err(e) => {
                    if self.pool.is_closed() {
                        return None;
                    }
                    tracing::warn!(channel = self.channel, error = %e, "notification listener failed; reconnecting");
                    self.connection = None;
                    self.failed = true;
                    return Some(Heard::Gap);
                }
            }
        }
    }
}

async fn connect(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}
