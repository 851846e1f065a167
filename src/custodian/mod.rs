//! The custodian: holds leases on its authorities and drives their commands
//! `pending → prepared → effect_started → applied | failed | ambiguous`.
//!
//! The one rule everything here serves: no effect starts before its row is
//! durably `effect_started` under a generation the custodian holds, and after
//! that the only answers are applied, failed or ambiguous.
//!
//! - `config.rs`: the settings and their one copy of the defaults.
//! - `leases.rs`: the leases held, renewed and lost.
//! - `step.rs`: the fenced start steps (claim and start, start prepared
//!   rows, adopt) and what an unknown commit left; `record.rs`: the effects
//!   and the record step. Tests may call each step on its own.
//! - `pipeline.rs`: the one driver. `run` is the long-lived loop (wake-ups,
//!   bounded concurrency, a drain); `run_once` is one turn of the same loop.
//! - `effects.rs`, `http_executor.rs`, `executors.rs`: what an effect is, the
//!   HTTP executor, and the executors a catalog describes.
//! - `recovery.rs`: the rescue pass (`command-ledger recover`, and periodic).

mod config;
pub mod effects;
mod executors;
pub mod http_executor;
mod leases;
mod pipeline;
mod record;
pub mod recovery;
mod step;

use sqlx::PgPool;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

pub use crate::db::txn::{Isolation, TxError};
use crate::domain::EffectOutcome;
/// The custodian's counters live with the metrics that expose them.
pub use crate::metrics::CustodianStats as Stats;
pub use config::{CustodianConfig, default_holder, defaults};
pub use effects::{Effect, EffectCall, Effects};
pub use leases::HeldLease;

/// What one `run_once` (or one step a test drives) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepReport {
    pub claimed: usize,
    pub expired: usize,
    pub started: usize,
    pub applied: usize,
    pub failed: usize,
    pub ambiguous: usize,
    /// Transitions refused by fencing: the work is someone else's now.
    pub fenced: usize,
}

impl StepReport {
    /// Adds what `other` counted.
    pub fn add(&mut self, other: &StepReport) {
        self.claimed += other.claimed;
        self.expired += other.expired;
        self.started += other.started;
        self.applied += other.applied;
        self.failed += other.failed;
        self.ambiguous += other.ambiguous;
        self.fenced += other.fenced;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CustodianError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Tx(#[from] TxError),
}

/// A command whose `effect_started` is committed: its effect may run now.
#[derive(Debug, Clone)]
pub struct Started {
    pub authority: String,
    pub generation: i64,
    pub call: EffectCall,
}

/// An effect's outcome, waiting to be recorded.
#[derive(Debug, Clone)]
pub struct Done {
    pub authority: String,
    pub generation: i64,
    pub id: Uuid,
    pub outcome: EffectOutcome,
    /// The attempt to schedule after it, when it failed with nothing done
    /// and its kind's retry policy allows another (`Effects::next_attempt`).
    pub next: Option<crate::domain::retry::NextAttempt>,
    /// The command's trace context, which the record's span links to.
    pub trace: Option<crate::domain::trace_context::TraceContext>,
}

/// One custodian process's state. Everything durable is in the database;
/// what is here is what this process holds or owes.
#[derive(Debug)]
pub struct Custodian {
    /// The database: the pool every statement goes through, what it can do
    /// (whether a claim names one authority, whether the transitions use
    /// generic plans), and where each authority's steps run.
    cluster: crate::db::Cluster,
    /// Fixed at start.
    config: CustodianConfig,
    /// The executors, by kind; shared with the effect tasks and recovery.
    effects: Arc<Effects>,
    /// The leases held now (renewed by the heartbeat).
    leases: leases::Leases,
    /// Authorities with prepared rows of the lease's generation to start
    /// next (adopted from an older generation, or left by a start whose
    /// commit was unknown).
    prepared_due: Mutex<BTreeSet<String>>,
    /// Batches whose `effect_started` commit had an unknown outcome and
    /// could not be re-read yet: never dispatched, to be closed as such.
    limbo: Mutex<Vec<(String, i64, Vec<Uuid>)>>,
    /// Outcomes known but not yet recorded (the database was unreachable).
    unrecorded: Mutex<Vec<Done>>,
    /// Counters since start, for `/metrics` and the benchmark.
    stats: Arc<Stats>,
    /// Who the history names for this custodian's transitions.
    actor: String,
    /// Wakes the waiters of the commands it makes terminal (after each
    /// commit, where the commit itself does not).
    outcomes: crate::ledger::OutcomeWake,
    /// The periodic recovery pass, limited to this custodian's authorities.
    recovery: recovery::Recovery,
    /// When a turn last started the prepared rows of every leased authority
    /// (`None`: never).
    last_prepared_pass: Mutex<Option<std::time::Instant>>,
    /// Where the next per-authority claim round starts, so that a
    /// round that reaches its limit early does not always favour the same
    /// authorities.
    claim_turn: std::sync::atomic::AtomicUsize,
    /// Its transactions' idle limit: the lease TTL
    /// ([`crate::db::txn::IDLE_IN_TRANSACTION`]).
    idle_limit: String,
}

impl Custodian {
    /// A custodian on `pool`, whose database is `backend`.
    pub fn new(
        pool: PgPool,
        backend: crate::db::Backend,
        config: CustodianConfig,
        effects: Effects,
    ) -> Self {
        let actor = format!("custodian:{}", config.holder);
        let idle_limit = crate::db::txn::idle_limit(config.lease_ttl);
        let effects = Arc::new(effects);
        // Its own authorities only: it has their executors and probes.
        let recovery = recovery::Recovery::new(
            pool.clone(),
            backend,
            Arc::clone(&effects),
            format!("recovery:{}", config.holder),
        )
        .idle_in_transaction(config.lease_ttl)
        .for_authorities(config.authorities.clone());
        let stats = Arc::new(Stats::default());
        Custodian {
            outcomes: crate::ledger::OutcomeWake::new(pool.clone(), backend),
            cluster: crate::db::Cluster::for_steps(
                pool,
                backend,
                Arc::clone(&stats.stale_step_copies),
            ),
            config,
            recovery,
            effects,
            leases: leases::Leases::default(),
            prepared_due: Mutex::new(BTreeSet::new()),
            limbo: Mutex::new(Vec::new()),
            unrecorded: Mutex::new(Vec::new()),
            stats,
            actor,
            last_prepared_pass: Mutex::new(None),
            claim_turn: std::sync::atomic::AtomicUsize::new(0),
            idle_limit,
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The `SET LOCAL`s of the claim, adopt, start and record transactions: who
    /// acts, how long they may sit idle (the lease TTL:
    /// [`crate::db::txn::IDLE_IN_TRANSACTION`]) and, where the backend allows
    /// it, one plan for every authority ([`crate::db::Backend::generic_plans`]).
    fn transition_settings(&self) -> Vec<(&'static str, &str)> {
        let mut settings = vec![
            (crate::db::txn::ACTOR, self.actor.as_str()),
            (
                crate::db::txn::IDLE_IN_TRANSACTION,
                self.idle_limit.as_str(),
            ),
        ];
        if self.cluster.backend().generic_plans {
            settings.push(crate::db::txn::GENERIC_PLANS);
        }
        settings
    }

    /// The leases still valid by the local clock, by authority.
    pub fn held(&self) -> HashMap<String, HeldLease> {
        self.leases.valid()
    }

    /// Renews held leases and tries to take the others; a generation taken
    /// now first adopts the prepared rows of the ones before it. One
    /// authority's failure (its shard switching over, say) does not keep the
    /// others' leases from being renewed: every authority is tended, and the
    /// first error is returned after.
    pub async fn heartbeat(&self) -> Result<(), CustodianError> {
        let mut failed = None;
        for authority in &self.config.authorities {
            if let Err(e) = self.tend_lease(authority).await {
                match failed {
                    None => failed = Some(e),
                    Some(_) => tracing::warn!(authority, error = %e, "lease heartbeat failed"),
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Whether this custodian's provider groups hold their places apart from
    /// the claims, on the coordinator (a distributed backend, migration 0049).
    pub(crate) fn places_apart(&self) -> bool {
        self.cluster.backend().provider_rooms_on_coordinator && !self.effects.providers().is_empty()
    }

    /// Where the groups' places are kept apart: those of this custodian's
    /// authorities set right ([`crate::db::limits::reconcile`]). A failure
    /// is logged, and the next heartbeat tries again.
    pub(crate) async fn reconcile_places(&self) {
        if !self.places_apart() {
            return;
        }
        match crate::db::limits::reconcile(self.cluster.pool(), &self.config.authorities).await {
            Ok((0, 0)) => {}
            Ok((freed, held)) => tracing::warn!(
                freed,
                held,
                "provider places set right: some were held by commands no longer in flight, or missing for commands in flight"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "provider places not reconciled; the next heartbeat tries again");
            }
        }
    }

    /// Renews or takes `authority`'s lease, adopting on a take.
    async fn tend_lease(&self, authority: &str) -> Result<(), CustodianError> {
        let taken = self
            .leases
            .beat(
                self.cluster.pool(),
                authority,
                &self.config.holder,
                self.config.lease_ttl,
                &self.stats,
            )
            .await?;
        if let Some(generation) = taken {
            self.adopt(authority, generation).await?;
        }
        Ok(())
    }

    /// Whether this turn should start the prepared rows of every leased
    /// authority, not only those an adoption left: the first time, then once
    /// per half lease TTL, not on every turn: that pass walks the in-flight
    /// table.
    pub(crate) fn prepared_pass_due(&self) -> bool {
        let mut last = self.last_prepared_pass.lock().expect("prepared pass lock");
        let now = std::time::Instant::now();
        let due = last.is_none_or(|at| now.duration_since(at) >= self.config.lease_ttl / 2);
        if due {
            *last = Some(now);
        }
        due
    }

    /// Writes its catalog's limits per provider for every custodian to draw
    /// from (`db::limits::write`): the last custodian started sets them.
    /// Refused on a backend that holds none (a distributed one, today), when the catalog names
    /// any: a limit that protects a provider is not dropped in silence.
    pub async fn write_providers(&self) -> Result<(), CustodianError> {
        let providers = self.effects.providers();
        let mut moved = crate::db::limits::write(self.cluster.pool(), providers).await?;
        if self.cluster.backend().provider_rooms_on_coordinator {
            // Each authority's shards hold its kinds' groups: those of the
            // authorities this custodian serves, from its catalog.
            for authority in &self.config.authorities {
                moved +=
                    crate::db::limits::regroup_authority(self.cluster.pool(), authority, providers)
                        .await?;
            }
        }
        if !providers.is_empty() {
            let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
            tracing::info!(providers = ?names, queued_commands_regrouped = moved, "limits per provider written");
        } else if moved > 0 {
            tracing::info!(
                queued_commands_regrouped = moved,
                "no limits per provider: the groups held before were removed"
            );
        }
        Ok(())
    }

    /// Gives every lease up and closes the pools to the nodes (graceful
    /// shutdown).
    pub async fn release_leases(&self) {
        self.leases
            .release_all(self.cluster.pool(), &self.config.holder)
            .await;
        self.cluster.close().await;
    }
}
