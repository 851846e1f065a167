//! The custodian's leases: take each authority's lease, renew it on every
//! heartbeat, and stop using it the moment a renewal fails. A newly taken
//! generation first adopts the prepared rows of the one before it.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Custodian, CustodianError};
use crate::db;

/// A lease this process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLease {
    pub generation: i64,
    /// Local deadline: when the renewal request that granted it was sent,
    /// plus the TTL. Conservative: the database's clock counts from later.
    pub valid_until: Instant,
}

/// Most prepared rows adopted per statement.
const ADOPT_BATCH: i64 = 500;

impl Custodian {
    /// The leases still valid by the local clock, by authority.
    pub fn held(&self) -> std::collections::HashMap<String, HeldLease> {
        let now = Instant::now();
        let mut leases = self.leases.lock().expect("lease lock");
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

    /// Renews held leases and tries to take the others.
    pub async fn heartbeat(&self) -> Result<(), CustodianError> {
        let ttl = self.config.lease_ttl;
        let holder = &self.config.holder;
        for authority in &self.config.authorities {
            let held = self
                .leases
                .lock()
                .expect("lease lock")
                .get(authority)
                .copied();
            let asked_at = Instant::now();
            match held {
                Some(lease) => {
                    match db::authorities::renew(
                        &self.pool,
                        authority,
                        holder,
                        lease.generation,
                        ttl,
                    )
                    .await?
                    {
                        Some(_) => {
                            self.leases.lock().expect("lease lock").insert(
                                authority.clone(),
                                HeldLease {
                                    generation: lease.generation,
                                    valid_until: asked_at + ttl,
                                },
                            );
                        }
                        None => {
                            self.leases.lock().expect("lease lock").remove(authority);
                            self.stats.leases_lost.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(
                                authority,
                                generation = lease.generation,
                                "lease lost; stopped claiming"
                            );
                        }
                    }
                }
                None => {
                    if let Some(granted) =
                        db::authorities::acquire(&self.pool, authority, holder, ttl).await?
                    {
                        self.stats.leases_acquired.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(
                            authority,
                            generation = granted.generation,
                            holder,
                            "lease acquired"
                        );
                        self.leases.lock().expect("lease lock").insert(
                            authority.clone(),
                            HeldLease {
                                generation: granted.generation,
                                valid_until: asked_at + ttl,
                            },
                        );
                        self.adopt(authority, granted.generation).await?;
                    }
                }
            }
        }
        self.retry_leftovers().await;
        Ok(())
    }

    /// Rebinds the authority's prepared rows of older generations to ours.
    async fn adopt(&self, authority: &str, generation: i64) -> Result<(), CustodianError> {
        loop {
            let rows = db::custodian::adopt_prepared(
                &self.pool,
                authority,
                &self.config.holder,
                generation,
                ADOPT_BATCH,
                &self.actor,
            )
            .await?;
            let count = rows.len();
            if count > 0 {
                self.stats
                    .adopted
                    .fetch_add(count as u64, Ordering::Relaxed);
                tracing::info!(
                    authority,
                    generation,
                    count,
                    "adopted prepared commands of an older generation"
                );
            }
            self.adopted.lock().expect("adopted lock").extend(
                rows.into_iter()
                    .filter(|r| r.state() == crate::domain::State::Prepared),
            );
            if (count as i64) < ADOPT_BATCH {
                return Ok(());
            }
        }
    }

    /// Gives every lease up (graceful shutdown).
    pub async fn release_leases(&self) {
        let leases: Vec<(String, HeldLease)> =
            self.leases.lock().expect("lease lock").drain().collect();
        for (authority, lease) in leases {
            match db::authorities::release(
                &self.pool,
                &authority,
                &self.config.holder,
                lease.generation,
            )
            .await
            {
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
