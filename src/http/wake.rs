//! Wakes custodians in any process when new pending rows exist, without a
//! NOTIFY inside the submit transaction (a NOTIFY takes a global lock at
//! commit and would serialise submissions): after the commit, the authority
//! is queued here, and one task sends one `pg_notify` per authority for
//! everything queued meanwhile.

use sqlx::PgPool;
use std::collections::BTreeSet;
use tokio::sync::mpsc;

use crate::db;

#[derive(Debug, Clone)]
pub struct PendingWake {
    tx: mpsc::UnboundedSender<String>,
}

impl PendingWake {
    pub fn spawn(pool: PgPool) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut authorities = BTreeSet::from([first]);
                while let Ok(next) = rx.try_recv() {
                    authorities.insert(next);
                }
                for authority in authorities {
                    if let Err(e) = db::notify::pending(&pool, &authority).await {
                        // Custodians also poll; a lost wake-up only costs latency.
                        tracing::debug!(error = %e, "pending wake-up not sent");
                    }
                }
            }
        });
        PendingWake { tx }
    }

    pub fn pending(&self, authority: &str) {
        let _ = self.tx.send(authority.to_owned());
    }
}
