//! The custodian: holds leases on its authorities and drives their commands
//! `pending → prepared → effect_started → applied | failed | ambiguous`.
//!
//! The one rule everything here serves: no effect starts before its row is
//! durably `effect_started` under a generation the custodian holds, and after
//! that the only answers are applied, failed or ambiguous. `run_once` is one
//! whole step (leases, claim, start, effects, outcomes) for tests; `run` is
//! the long-lived loop with wake-ups, bounded concurrency and a drain.

mod config;
pub mod effects;
mod executors;
pub mod http_executor;
mod leases;
pub mod recovery;

use sqlx::PgPool;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, Semaphore, mpsc};
use uuid::Uuid;

use crate::crash::{self, CrashPoint};
use crate::db::notify::{self, PENDING_CHANNEL};
pub use crate::db::txn::{Isolation, TxError};
use crate::db::{self, CommandRow, txn};
use crate::domain::{EffectOutcome, State};
/// The custodian's counters live with the metrics that expose them.
pub use crate::metrics::CustodianStats as Stats;
pub use config::{CustodianConfig, default_holder, defaults};
pub use effects::{Effect, EffectCall, Effects};
pub use leases::HeldLease;

/// Commands started but not recorded, per effect slot: claiming goes on
/// while earlier outcomes are being written, up to this many batches' worth.
const UNRECORDED_PER_EFFECT: usize = 16;

/// Runs one effect and records how long it took, by kind and outcome.
async fn timed_effect(effects: &Effects, call: &EffectCall, stats: &Stats) -> EffectOutcome {
    use tracing::Instrument as _;
    let span = tracing::info_span!(
        "effect",
        command.id = %call.command_id,
        kind = %call.kind,
        authority = %call.authority,
        generation = call.generation,
    );
    let began = std::time::Instant::now();
    let outcome = effects::run_effect(effects, call).instrument(span).await;
    let label = match &outcome {
        EffectOutcome::Applied(_) => "applied",
        EffectOutcome::Failed { .. } => "failed",
        EffectOutcome::Ambiguous { .. } => "ambiguous",
    };
    stats
        .effect_latency
        .observe(&call.kind, label, began.elapsed());
    outcome
}

/// What one `run_once` did.
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
}

#[derive(Debug)]
pub struct Custodian {
    pool: PgPool,
    config: CustodianConfig,
    effects: Arc<Effects>,
    leases: Mutex<HashMap<String, HeldLease>>,
    /// Prepared rows adopted from an older generation, to start next.
    adopted: Mutex<Vec<CommandRow>>,
    /// Batches whose `effect_started` commit had an unknown outcome and
    /// could not be re-read yet: never dispatched, to be closed as such.
    limbo: Mutex<Vec<(String, i64, Vec<Uuid>)>>,
    /// Outcomes known but not yet recorded (the database was unreachable).
    unrecorded: Mutex<Vec<Done>>,
    stats: Arc<Stats>,
    actor: String,
    recovery: recovery::Recovery,
}

impl Custodian {
    pub fn new(pool: PgPool, config: CustodianConfig, effects: Effects) -> Self {
        let actor = format!("custodian:{}", config.holder);
        let effects = Arc::new(effects);
        // Its own authorities only: it has their executors and probes.
        let recovery = recovery::Recovery::new(
            pool.clone(),
            Arc::clone(&effects),
            format!("recovery:{}", config.holder),
        )
        .for_authorities(config.authorities.clone());
        Custodian {
            pool,
            config,
            recovery,
            effects,
            leases: Mutex::new(HashMap::new()),
            adopted: Mutex::new(Vec::new()),
            limbo: Mutex::new(Vec::new()),
            unrecorded: Mutex::new(Vec::new()),
            stats: Arc::new(Stats::default()),
            actor,
        }
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// One whole step: renew or take leases, claim, start, run the effects,
    /// record their outcomes. Tests drive the custodian with this.
    pub async fn run_once(&self) -> Result<StepReport, CustodianError> {
        self.heartbeat().await?;
        let mut report = StepReport::default();
        let started = self
            .claim_and_start(self.config.batch_size, &mut report)
            .await?;
        let done = self.execute(started).await;
        self.record(done, &mut report).await;
        Ok(report)
    }

    /// Runs the effects of started commands concurrently, each under its deadline.
    pub async fn execute(&self, started: Vec<Started>) -> Vec<Done> {
        let mut tasks = Vec::with_capacity(started.len());
        for s in started {
            let effects = Arc::clone(&self.effects);
            let stats = Arc::clone(&self.stats);
            tasks.push(tokio::spawn(async move {
                let outcome = timed_effect(&effects, &s.call, &stats).await;
                Done {
                    authority: s.authority,
                    generation: s.generation,
                    id: s.call.command_id,
                    outcome,
                }
            }));
        }
        let mut done = Vec::with_capacity(tasks.len());
        for t in tasks {
            done.push(t.await.expect("effect tasks do not panic"));
        }
        done
    }

    /// Claims up to `limit` commands and starts those it may: returns the
    /// commands whose `effect_started` is committed, and only those.
    pub async fn claim_and_start(
        &self,
        limit: i64,
        report: &mut StepReport,
    ) -> Result<Vec<Started>, CustodianError> {
        let mut prepared: Vec<CommandRow> =
            std::mem::take(&mut *self.adopted.lock().expect("adopted lock"));
        prepared.extend(self.claim(limit, report).await?);
        self.start_prepared(&prepared, report).await
    }

    /// Claims up to `limit` pending commands of the authorities leased now:
    /// returns those now `prepared` (overdue ones are expired, never started).
    #[tracing::instrument(name = "claim", skip(self, report), fields(holder = %self.config.holder))]
    pub async fn claim(
        &self,
        limit: i64,
        report: &mut StepReport,
    ) -> Result<Vec<CommandRow>, CustodianError> {
        let held = self.held();
        if held.is_empty() || limit <= 0 {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = held.keys().cloned().collect();
        let claimed = db::custodian::claim(
            &self.pool,
            &ids,
            &self.config.holder,
            limit,
            self.config.lease_ttl,
            &self.actor,
        )
        .await?;
        if !claimed.is_empty() {
            crash::point(CrashPoint::AfterPrepared);
        }
        report.claimed += claimed.len();
        self.stats
            .claimed
            .fetch_add(claimed.len() as u64, Ordering::Relaxed);
        let mut prepared = Vec::with_capacity(claimed.len());
        for row in claimed {
            match row.state() {
                State::Prepared => prepared.push(row),
                State::Expired => {
                    report.expired += 1;
                    self.stats.expired.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(command.id = %row.id, authority = %row.authority_id, error = ?row.error, "expired before any effect");
                }
                state => {
                    tracing::error!(command.id = %row.id, %state, "claim returned an unexpected row");
                }
            }
        }
        Ok(prepared)
    }

    /// Starts prepared commands, one fenced transaction per (authority, generation).
    pub async fn start_prepared(
        &self,
        prepared: &[CommandRow],
        report: &mut StepReport,
    ) -> Result<Vec<Started>, CustodianError> {
        let mut groups: BTreeMap<(String, i64), Vec<Uuid>> = BTreeMap::new();
        for row in prepared {
            if let Some(generation) = row.authority_generation {
                groups
                    .entry((row.authority_id.clone(), generation))
                    .or_default()
                    .push(row.id);
            }
        }
        let mut started = Vec::new();
        for ((authority, generation), ids) in groups {
            started.extend(self.start(&authority, generation, &ids, report).await?);
        }
        Ok(started)
    }

    /// Commits `effect_started` for prepared commands (SERIALIZABLE, fenced
    /// on the lease). Only rows whose commit is certain are returned.
    #[tracing::instrument(name = "start", skip(self, ids, report), fields(commands = ids.len()))]
    async fn start(
        &self,
        authority: &str,
        generation: i64,
        ids: &[Uuid],
        report: &mut StepReport,
    ) -> Result<Vec<Started>, CustodianError> {
        let holder = &self.config.holder;
        let actor = &self.actor;
        let mut retry = txn::Retrying::new(
            &self.pool,
            &self.stats.serialization_retries,
            "start",
            self.config.isolation,
        );
        let result = loop {
            let mut tx = match retry.begin().await {
                Ok(tx) => tx,
                Err(e) => break Err(e),
            };
            let attempt =
                db::custodian::start(&mut *tx, ids, authority, holder, generation, actor).await;
            match retry.finish(tx, attempt).await {
                Ok(Some(rows)) => break Ok(rows),
                Ok(None) => continue,
                Err(e) => break Err(e),
            }
        };
        let rows = match result {
            Ok(rows) => rows,
            Err(TxError::CommitUnknown(e)) => {
                // Never dispatch on uncertainty. Whatever did commit was not
                // dispatched, so it can be closed as failed, not ambiguous.
                tracing::warn!(authority, generation, error = %e, "effect_started commit outcome unknown; not dispatching");
                self.close_undispatched(authority, generation, ids, report)
                    .await;
                return Ok(Vec::new());
            }
            Err(e) => return Err(e.into()),
        };
        if !rows.is_empty() {
            crash::point(CrashPoint::AfterEffectStarted);
        }
        let mut started = Vec::with_capacity(rows.len());
        for row in rows {
            if row.state() == State::Expired {
                report.expired += 1;
                self.stats.expired.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            started.push(Started {
                authority: authority.to_owned(),
                generation,
                call: call_for(&row, generation),
            });
        }
        if started.len() < ids.len() {
            tracing::info!(
                authority,
                generation,
                asked = ids.len(),
                started = started.len(),
                "some prepared commands were not started (cancelled, expired or fenced)"
            );
        }
        report.started += started.len();
        self.stats
            .started
            .fetch_add(started.len() as u64, Ordering::Relaxed);
        Ok(started)
    }

    /// After an unknown `effect_started` commit: rows that did become
    /// `effect_started` under our generation were never dispatched, so they
    /// are recorded `failed` (`not_dispatched`).
    async fn close_undispatched(
        &self,
        authority: &str,
        generation: i64,
        ids: &[Uuid],
        report: &mut StepReport,
    ) {
        let states = match db::custodian::states(&self.pool, ids).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot re-read after an unknown commit; will retry");
                self.limbo.lock().expect("limbo lock").push((
                    authority.to_owned(),
                    generation,
                    ids.to_vec(),
                ));
                return;
            }
        };
        let done: Vec<Done> = states
            .into_iter()
            .filter(|(_, state, g)| {
                state == State::EffectStarted.as_str() && *g == Some(generation)
            })
            .map(|(id, _, _)| Done {
                authority: authority.to_owned(),
                generation,
                id,
                outcome: EffectOutcome::not_dispatched(
                    "the effect_started commit was not confirmed; never dispatched",
                ),
            })
            .collect();
        self.record(done, report).await;
    }

    /// Retries what a database outage left behind: batches whose start
    /// commit is unknown, and outcomes not yet recorded.
    async fn retry_leftovers(&self) {
        let limbo: Vec<_> = std::mem::take(&mut *self.limbo.lock().expect("limbo lock"));
        let unrecorded: Vec<Done> =
            std::mem::take(&mut *self.unrecorded.lock().expect("unrecorded lock"));
        let mut report = StepReport::default();
        for (authority, generation, ids) in limbo {
            self.close_undispatched(&authority, generation, &ids, &mut report)
                .await;
        }
        if !unrecorded.is_empty() {
            self.record(unrecorded, &mut report).await;
        }
    }

    /// Records outcomes, one SERIALIZABLE transaction per (authority,
    /// generation). A refused write (fenced) is counted and logged, never
    /// taken for success.
    pub async fn record(&self, done: Vec<Done>, report: &mut StepReport) {
        let mut groups: BTreeMap<(String, i64), Vec<(Uuid, EffectOutcome)>> = BTreeMap::new();
        for d in done {
            groups
                .entry((d.authority, d.generation))
                .or_default()
                .push((d.id, d.outcome));
        }
        for ((authority, generation), outcomes) in groups {
            crash::point(CrashPoint::AfterEffect);
            let recorded = match self.record_group(&authority, generation, &outcomes).await {
                Ok(recorded) => recorded,
                Err(e) => {
                    // Known outcomes are never dropped: kept and retried on
                    // the next heartbeat (recovery leaves rows of a live
                    // lease alone, so this is the only way they finish).
                    tracing::warn!(authority, generation, error = %e, count = outcomes.len(), "recording outcomes failed; will retry");
                    self.unrecorded.lock().expect("unrecorded lock").extend(
                        outcomes.into_iter().map(|(id, outcome)| Done {
                            authority: authority.clone(),
                            generation,
                            id,
                            outcome,
                        }),
                    );
                    continue;
                }
            };
            crash::point(CrashPoint::AfterOutcome);
            for (id, outcome) in &outcomes {
                if !recorded.contains(id) {
                    report.fenced += 1;
                    self.stats.fenced.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(command.id = %id, authority, generation, outcome = ?outcome, "outcome refused: the authority moved on or the row changed; recovery decides");
                    continue;
                }
                let (counter, tally) = match outcome.state() {
                    State::Applied => (&self.stats.applied, &mut report.applied),
                    State::Failed => (&self.stats.failed, &mut report.failed),
                    _ => (&self.stats.ambiguous, &mut report.ambiguous),
                };
                counter.fetch_add(1, Ordering::Relaxed);
                *tally += 1;
                tracing::info!(command.id = %id, authority, generation, state = %outcome.state(), "outcome recorded");
            }
        }
    }

    /// One fenced SERIALIZABLE transaction for one (authority, generation);
    /// returns the ids it recorded. After a commit whose outcome is unknown,
    /// the rows are re-read: those already in the intended state count as
    /// recorded.
    #[tracing::instrument(name = "record", skip(self, outcomes), fields(commands = outcomes.len()))]
    async fn record_group(
        &self,
        authority: &str,
        generation: i64,
        outcomes: &[(Uuid, EffectOutcome)],
    ) -> Result<Vec<Uuid>, CustodianError> {
        let mut retry = txn::Retrying::new(
            &self.pool,
            &self.stats.serialization_retries,
            "record",
            self.config.isolation,
        );
        loop {
            let mut tx = retry.begin().await?;
            let attempt =
                db::custodian::record(&mut *tx, outcomes, authority, generation, &self.actor).await;
            match retry.finish(tx, attempt).await {
                Ok(Some(ids)) => return Ok(ids),
                Ok(None) => {}
                Err(TxError::CommitUnknown(e)) => {
                    tracing::warn!(authority, generation, error = %e, "outcome commit unknown; re-reading");
                    let ids: Vec<Uuid> = outcomes.iter().map(|(id, _)| *id).collect();
                    let states = db::custodian::states(&self.pool, &ids).await?;
                    let done: Vec<Uuid> = states
                        .into_iter()
                        .filter(|(id, state, _)| {
                            outcomes
                                .iter()
                                .any(|(o, outcome)| o == id && outcome.state().as_str() == state)
                        })
                        .map(|(id, _, _)| id)
                        .collect();
                    if done.len() == outcomes.len() {
                        return Ok(done);
                    }
                    // Some did not commit: write them again (still guarded).
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The long-lived loop, until `shutdown` completes: wake on
    /// notifications (with a polling fallback), keep at most
    /// `max_in_flight` effects running, record outcomes as they come, and on
    /// shutdown stop claiming, drain within the grace period, record what is
    /// known, release leases.
    ///
    /// Two bounds govern claiming: effects running at once
    /// (`max_in_flight`), and commands started whose outcome is not recorded
    /// yet (`UNRECORDED_PER_EFFECT` times that). An effect's slot frees as
    /// soon as it answers, so the next batch is claimed and started while
    /// the last one's outcomes are being written.
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), CustodianError> {
        let max_in_flight = self.config.max_in_flight.max(1);
        let effect_slots = Arc::new(Semaphore::new(max_in_flight));
        let record_slots = Arc::new(Semaphore::new(
            max_in_flight.saturating_mul(UNRECORDED_PER_EFFECT),
        ));
        let capacity = Arc::new(Notify::new());
        // Effects dispatched and not answered yet. An effect that answers
        // after the shutdown has recorded it ambiguous finds itself gone.
        let running: Arc<Mutex<HashMap<Uuid, (String, i64)>>> = Arc::default();
        let (done_tx, done_rx) =
            mpsc::unbounded_channel::<(Done, tokio::sync::OwnedSemaphorePermit)>();
        let recorder = tokio::spawn(Arc::clone(&self).recorder(done_rx, Arc::clone(&capacity)));

        // Woken by submissions (and, after a gap in listening, once more).
        let mut listener = notify::Listener::new(self.pool.clone(), PENDING_CHANNEL);
        let mut heartbeat = tokio::time::interval(self.config.heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut poll = tokio::time::interval(self.config.poll_interval);
        let mut recover = tokio::time::interval(self.config.recovery_interval);
        recover.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        tracing::info!(holder = %self.config.holder, authorities = ?self.config.authorities, "custodian running");

        // One claim per turn of the loop, then the select: shutdown, the
        // lease heartbeat and recovery come first (`biased`), so a backlog
        // that keeps every claim full can starve none of them.
        let batch = usize::try_from(self.config.batch_size)
            .unwrap_or(1)
            .clamp(1, max_in_flight);
        loop {
            // With less than half a batch of room, wait for more: many small
            // claims cost more than fewer full ones.
            let room = effect_slots
                .available_permits()
                .min(record_slots.available_permits())
                .min(batch);
            let mut more = false;
            if room > 0 && room >= batch.div_ceil(2) {
                let mut report = StepReport::default();
                match self.claim_and_start(room as i64, &mut report).await {
                    Ok(started) => {
                        more = report.claimed >= room;
                        for s in started {
                            self.dispatch(
                                s,
                                &effect_slots,
                                &record_slots,
                                &running,
                                &done_tx,
                                &capacity,
                            )
                            .await;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claim failed; retrying after the next wake-up");
                    }
                }
            }

            let listen = async {
                if listener.recv().await.is_none() {
                    // The pool is closed: only the shutdown is left to wait for.
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                _ = heartbeat.tick() => {
                    if let Err(e) = self.heartbeat().await {
                        tracing::warn!(error = %e, "lease heartbeat failed");
                    }
                }
                _ = recover.tick() => {
                    if let Err(e) = self.recovery.run_once().await {
                        tracing::warn!(error = %e, "recovery pass failed");
                    }
                }
                () = std::future::ready(()), if more => {}
                () = listen => {}
                _ = poll.tick() => {}
                () = capacity.notified() => {}
            }
        }

        tracing::info!("custodian stopping: no new claims; draining effects in flight");
        let all = u32::try_from(max_in_flight).unwrap_or(u32::MAX);
        let _ =
            tokio::time::timeout(self.config.shutdown_grace, effect_slots.acquire_many(all)).await;
        // Dispatched and still unanswered: nobody can know, so ambiguous.
        // Dropping the sender under the lock closes the queue to them.
        let left: Vec<Done> = {
            let mut running = running.lock().expect("running lock");
            drop(done_tx);
            running
                .drain()
                .map(|(id, (authority, generation))| Done {
                    authority,
                    generation,
                    id,
                    outcome: EffectOutcome::Ambiguous {
                        reason: "shutdown",
                        detail: serde_json::json!(
                            "the custodian stopped while the effect was in flight"
                        ),
                    },
                })
                .collect()
        };
        if !left.is_empty() {
            tracing::warn!(
                count = left.len(),
                "effects still in flight after the grace period: recording ambiguous"
            );
            let mut report = StepReport::default();
            self.record(left, &mut report).await;
        }
        // The outcomes already known are recorded before the leases go.
        let mut recorder = recorder;
        if tokio::time::timeout(self.config.shutdown_grace, &mut recorder)
            .await
            .is_err()
        {
            tracing::warn!(
                "outcomes not recorded within the grace period; recovery will resolve their commands"
            );
            recorder.abort();
        }
        self.release_leases().await;
        Ok(())
    }

    /// Runs one started command's effect in a task of its own, holding an
    /// effect slot until it answers and a record slot until its outcome is
    /// recorded.
    async fn dispatch(
        &self,
        s: Started,
        effect_slots: &Arc<Semaphore>,
        record_slots: &Arc<Semaphore>,
        running: &Arc<Mutex<HashMap<Uuid, (String, i64)>>>,
        done_tx: &mpsc::UnboundedSender<(Done, tokio::sync::OwnedSemaphorePermit)>,
        capacity: &Arc<Notify>,
    ) {
        let effect_slot = Arc::clone(effect_slots)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let record_slot = Arc::clone(record_slots)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let id = s.call.command_id;
        running
            .lock()
            .expect("running lock")
            .insert(id, (s.authority.clone(), s.generation));
        let effects = Arc::clone(&self.effects);
        let stats = Arc::clone(&self.stats);
        let done_tx = done_tx.downgrade();
        let running = Arc::clone(running);
        let capacity = Arc::clone(capacity);
        tokio::spawn(async move {
            let outcome = timed_effect(&effects, &s.call, &stats).await;
            let done = Done {
                authority: s.authority,
                generation: s.generation,
                id,
                outcome,
            };
            // Under the lock, so a shutdown either sees this effect running
            // or finds its outcome queued.
            let tx = {
                let mut running = running.lock().expect("running lock");
                running.remove(&id).and_then(|_| done_tx.upgrade())
            };
            match tx {
                Some(tx) => {
                    let _ = tx.send((done, record_slot));
                }
                None => tracing::warn!(
                    command.id = %id,
                    outcome = ?done.outcome,
                    "the effect answered after the shutdown recorded it ambiguous"
                ),
            }
            drop(effect_slot);
            capacity.notify_one();
        });
    }

    /// Records outcomes as they arrive, batching whatever is already
    /// waiting, until every sender is gone and the queue is empty.
    async fn recorder(
        self: Arc<Self>,
        mut rx: mpsc::UnboundedReceiver<(Done, tokio::sync::OwnedSemaphorePermit)>,
        capacity: Arc<Notify>,
    ) {
        const MAX_BATCH: usize = 512;
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            let (done, slots): (Vec<Done>, Vec<_>) = batch.into_iter().unzip();
            let mut report = StepReport::default();
            self.record(done, &mut report).await;
            drop(slots);
            capacity.notify_one();
        }
    }
}

/// The call for a started row.
fn call_for(row: &CommandRow, generation: i64) -> EffectCall {
    EffectCall {
        command_id: row.id,
        kind: row.kind.clone(),
        authority: row.authority_id.clone(),
        generation,
        args: row.args.clone(),
        downstream_key: EffectCall::downstream_key_for(row.id),
    }
}
