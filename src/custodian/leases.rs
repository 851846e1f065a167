//! The custodian's leases, and only them: take each authority's lease, renew
//! it on every heartbeat, and stop using it the moment a renewal fails or
//! its time runs out by the local clock. What a newly taken generation does
//! first (adopt the prepared rows of the one before) is the custodian's.

use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Stats;
use crate::db;

/// A lease this process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLease {
    pub generation: i64,
    /// Local deadline: when the renewal request that granted it was sent,
    /// plus the TTL. Conservative: the database's clock counts from later.
    pub valid_until: Instant,
}

/// The leases this process holds, by authority.
#[derive(Debug, Default)]
pub(super) struct Leases {
    held: Mutex<HashMap<String, HeldLease>>,
}

impl Leases {
    /// The leases still valid by the local clock; lapsed ones are dropped.
    pub(super) fn valid(&self) -> HashMap<String, HeldLease> {
        let now = Instant::now();
        let mut leases = self.held.lock().expect("lease lock");
        leases.retain(|authority, lease| {
            let valid = lease.valid_until > now;
            if !valid {
                tracing::warn!(
                    authority,
                    generation = lease.generation,
                    "lease lapsed locally; no more claims under it"
                );
            }
            valid
        });
        leases.clone()
    }

    /// Renews the lease on `authority` when held, else tries to take it.
    /// Returns the generation when it was taken now.
    pub(super) async fn beat(
        &self,
        pool: &PgPool,
        authority: &str,
        holder: &str,
        ttl: Duration,
        stats: &Stats,
    ) -> Result<Option<i64>, sqlx::Error> {
        let held = self
            .held
            .lock()
            .expect("lease lock")
            .get(authority)
            .copied();
        let asked_at = Instant::now();
        match held {
            Some(lease) => {
                match db::authorities::renew(pool, authority, holder, lease.generation, ttl).await?
                {
                    Some(_) => {
                        self.held.lock().expect("lease lock").insert(
                            authority.to_owned(),
                            HeldLease {
                                generation: lease.generation,
                                valid_until: asked_at + ttl,
                            },
                        );
                    }
                    None => {
                        self.held.lock().expect("lease lock").remove(authority);
                        stats.leases_lost.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            authority,
                            generation = lease.generation,
                            "lease lost; stopped claiming"
                        );
                    }
                }
                Ok(None)
            }
            None => {
                let Some(granted) = db::authorities::acquire(pool, authority, holder, ttl).await?
                else {
                    return Ok(None);
                };
                stats.leases_acquired.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    authority,
                    generation = granted.generation,
                    holder,
                    "lease acquired"
                );
                self.held.lock().expect("lease lock").insert(
                    authority.to_owned(),
                    HeldLease {
                        generation: granted.generation,
                        valid_until: asked_at + ttl,
                    },
                );
                Ok(Some(granted.generation))
            }
        }
    }

    /// Gives every lease up (graceful shutdown).
    pub(super) async fn release_all(&self, pool: &PgPool, holder: &str) {
        let leases: Vec<(String, HeldLease)> =
            self.held.lock().expect("lease lock").drain().collect();
        for (authority, lease) in leases {
            match db::authorities::release(pool, &authority, holder, lease.generation).await {
                Ok(true) => {
                    tracing::info!(authority, generation = lease.generation, "lease released");
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(authority, error = %e, "releasing the lease failed; it will lapse");
                }
            }
        }
    }
}
