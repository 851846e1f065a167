//! Wake-ups sent after a commit, never inside the transaction.
//!
//! [`PendingWake`] wakes custodians in any process when new pending rows
//! exist, without a NOTIFY inside the recording transaction (a NOTIFY takes
//! a global lock at commit and would serialise submissions): after the
//! commit, the authority is queued here, and one task sends one
//! notification per authority for everything queued meanwhile. A
//! short-lived process (the command line) sends it at once instead, before
//! it exits.
//!
//! [`OutcomeWake`] wakes the clients waiting for commands that became
//! terminal, where the commit itself does not
//! ([`db::Backend::outcome_notify_in_transaction`] is false: a distributed
//! backend, whose shards' triggers send no outcome notification): whoever
//! committed the change (the custodian's record, claim, start and adoption,
//! recovery, a cancel) sends it right after. Where the trigger sends it in
//! the commit itself, this does nothing.

use sqlx::PgPool;
use std::collections::BTreeSet;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::db;

#[derive(Debug, Clone)]
pub struct PendingWake {
    how: How,
}

#[derive(Debug, Clone)]
enum How {
    /// The API: queued for the debouncing task.
    Queued(mpsc::UnboundedSender<String>),
    /// The command line: sent before the call returns.
    Direct(PgPool),
}

impl PendingWake {
    /// The API's wake-up, debounced by a task of its own.
    pub fn spawn(pool: PgPool) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut authorities = BTreeSet::from([first]);
                while let Ok(next) = rx.try_recv() {
                    authorities.insert(next);
                }
                for authority in authorities {
                    send(&pool, &authority).await;
                }
            }
        });
        PendingWake {
            how: How::Queued(tx),
        }
    }

    /// A wake-up sent at once, for a process that may exit right after.
    pub fn direct(pool: PgPool) -> Self {
        PendingWake {
            how: How::Direct(pool),
        }
    }

    /// New pending rows exist for `authority` (their commit is done).
    pub async fn pending(&self, authority: &str) {
        match &self.how {
            How::Queued(tx) => {
                let _ = tx.send(authority.to_owned());
            }
            How::Direct(pool) => send(pool, authority).await,
        }
    }
}

async fn send(pool: &PgPool, authority: &str) {
    if let Err(e) = db::notify::pending(pool, authority).await {
        // Custodians also poll; a lost wake-up only costs latency.
        tracing::debug!(error = %e, "pending wake-up not sent");
    }
}

/// Announces terminal commands to waiters where the commit does not (see
/// the module's head).
#[derive(Debug, Clone)]
pub struct OutcomeWake {
    pool: PgPool,
    /// Whether the commit already announced them (then this sends nothing).
    backend: db::Backend,
}

impl OutcomeWake {
    pub fn new(pool: PgPool, backend: db::Backend) -> Self {
        OutcomeWake { pool, backend }
    }

    /// `ids` became terminal in a transaction that has committed. Sent
    /// before this returns, so a process that exits right after (`recover`)
    /// still sends it. A notification that is not sent (this process dies
    /// first, or the database does not answer) only costs latency: the
    /// waiters' fallback re-read finds the outcome (`http::wait`).
    pub async fn finished(&self, ids: &[Uuid]) {
        if ids.is_empty() || self.backend.outcome_notify_in_transaction {
            return;
        }
        if let Err(e) = db::notify::outcomes(&self.pool, ids).await {
            tracing::warn!(error = %e, commands = ids.len(), "outcome notification not sent; waiters will find the outcome at their next re-read");
        }
    }
}
