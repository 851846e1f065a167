//! Wakes custodians in any process when new pending rows exist, without a
//! NOTIFY inside the recording transaction (a NOTIFY takes a global lock at
//! commit and would serialise submissions): after the commit, the authority
//! is queued here, and one task sends one notification per authority for
//! everything queued meanwhile. A short-lived process (the command line)
//! sends it at once instead, before it exits.

use sqlx::PgPool;
use std::collections::BTreeSet;
use tokio::sync::mpsc;

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
