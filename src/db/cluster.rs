//! The database as one process reaches it: [`Cluster`] holds the pool every
//! statement goes through, what the backend can do, and, where the shards
//! live on other nodes, the routes to them ([`super::placement`]: pools to
//! the nodes, and the engine steps' copies that name each node's shards,
//! migration 0039). A caller asks it for an authority's [`Route`] and runs
//! the steps there; it never sees a node, a pool to one or a copy.

use sqlx::{PgExecutor, PgPool};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use uuid::Uuid;

use super::placement::{Placements, StepRoute};
use super::txn::{Isolation, Retrying};
use super::{Backend, CommandRow};

/// The pool, the backend and the routes of one process.
#[derive(Debug)]
pub struct Cluster {
    pool: PgPool,
    backend: Backend,
    placements: Option<Placements>,
}

impl Cluster {
    /// For a custodian: each authority's engine steps go to the node holding
    /// its shards where the backend has them there
    /// ([`Backend::steps_on_shard_nodes`]), as that node's copies of the
    /// steps when they are current there; `stale_copies` counts the
    /// authorities whose node's copies are not.
    pub fn for_steps(pool: PgPool, backend: Backend, stale_copies: Arc<AtomicU64>) -> Self {
        let placements = backend
            .steps_on_shard_nodes
            .then(|| Placements::counting_stale_copies(pool.clone(), stale_copies));
        Cluster {
            pool,
            backend,
            placements,
        }
    }

    /// For the API: a waiter's re-read goes to the node holding the
    /// command's shards ([`Backend::reads_on_shard_nodes`]).
    pub fn for_reads(pool: PgPool, backend: Backend) -> Self {
        let placements = backend
            .reads_on_shard_nodes
            .then(|| Placements::for_reads(pool.clone()));
        Cluster {
            pool,
            backend,
            placements,
        }
    }

    /// The pool every statement but a routed one goes through.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// What the database can do.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Where `authority`'s steps run: the node holding its shards, when this
    /// cluster routes steps and that node can be reached; else this pool.
    pub async fn route(&self, authority: &str) -> Route {
        match &self.placements {
            Some(placements) => Route::new(placements.route_for(authority).await, self.backend),
            None => self.here(),
        }
    }

    /// The steps as they are, through this pool.
    pub fn here(&self) -> Route {
        Route::new(StepRoute::here(&self.pool), self.backend)
    }

    /// A step of `authority` failed on its route: the next one asks where
    /// its shards are again (and runs the steps as they are for a while, if
    /// this one ran a copy).
    pub fn failed(&self, authority: &str) {
        if let Some(placements) = &self.placements {
            placements.forget(authority);
        }
    }

    /// Command `id` of `authority` as it is now: on the node holding its
    /// shards where this cluster routes reads (a hop fewer than through the
    /// coordinator), through this pool when that fails or it does not.
    pub async fn reread_command(
        &self,
        authority: &str,
        id: Uuid,
    ) -> Result<Option<CommandRow>, sqlx::Error> {
        if let Some(placements) = &self.placements {
            let route = placements.route_for(authority).await;
            match super::commands::get_in(&route.pool, authority, id).await {
                Ok(row) => return Ok(row),
                Err(e) => {
                    tracing::debug!(authority, error = %e, "re-read on the node holding the shards failed; reading through the coordinator");
                    placements.forget(authority);
                }
            }
        }
        super::commands::get_in(&self.pool, authority, id).await
    }

    /// Closes the pools to the nodes (this pool stays open: its owner's).
    pub async fn close(&self) {
        if let Some(placements) = &self.placements {
            placements.close().await;
        }
    }
}

/// Where one authority's steps run, and which (the steps, or a node's copy
/// of them). Its transactions are opened by [`Route::retrying`].
#[derive(Debug, Clone)]
pub struct Route {
    step: StepRoute,
    backend: Backend,
}

impl Route {
    fn new(step: StepRoute, backend: Backend) -> Self {
        let backend = step.backend(backend);
        Route { step, backend }
    }

    /// Transactions on this route, retried on conflicts
    /// ([`Retrying::with_settings`]).
    pub fn retrying<'a>(
        &'a self,
        retries: &'a AtomicU64,
        what: &'static str,
        isolation: Isolation,
        settings: &[(&str, &str)],
    ) -> Retrying<'a> {
        Retrying::with_settings(
            &self.step.pool,
            self.backend,
            retries,
            what,
            isolation,
            settings,
        )
    }

    /// [`super::lifecycle::claim_start_authority`] on this route.
    pub async fn claim_start_authority(
        &self,
        ex: impl PgExecutor<'_>,
        authority: &str,
        holder: &str,
        limit: i64,
    ) -> Result<Vec<CommandRow>, sqlx::Error> {
        super::lifecycle::claim_start_authority(ex, self.step.copy, authority, holder, limit).await
    }

    /// [`super::lifecycle::record_outcomes`] on this route.
    pub async fn record_outcomes(
        &self,
        ex: impl PgExecutor<'_>,
        outcomes: &[super::lifecycle::Outcome],
        authority: &str,
        generation: i64,
    ) -> Result<Vec<Uuid>, sqlx::Error> {
        super::lifecycle::record_outcomes(ex, self.step.copy, outcomes, authority, generation).await
    }
}
