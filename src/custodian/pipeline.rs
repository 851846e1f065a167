//! The custodian's one driver: claim and start a batch, dispatch each effect
//! in a task of its own, record outcomes as they come. `run` turns it for
//! as long as the process lives; `run_once` turns it once and drains, which
//! is how the tests drive the very code `command-ledger custodian` runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use uuid::Uuid;

use super::record::timed_effect;
use super::{Custodian, CustodianError, Done, Started, StepReport};
use crate::db::notify::{self, PENDING_CHANNEL};
use crate::domain::EffectOutcome;

/// Commands started but not recorded, per effect slot: claiming goes on
/// while earlier outcomes are being written, up to this many batches' worth.
const UNRECORDED_PER_EFFECT: usize = 16;

/// Most outcomes recorded by one call to `record_outcomes` from the queue.
const RECORD_BATCH: usize = 512;

/// An effect's outcome on its way to the recorder, with the record slot it
/// holds until it is written.
type Answered = (Done, OwnedSemaphorePermit);

/// The bounds and book-keeping of effects in flight, for one `run` or one
/// `run_once`.
#[derive(Debug)]
struct Pipeline {
    max_in_flight: usize,
    /// One per effect running; freed as soon as the effect answers.
    effect_slots: Arc<Semaphore>,
    /// One per command started and not recorded yet.
    record_slots: Arc<Semaphore>,
    /// Signalled when a slot frees: the loop may claim again.
    capacity: Arc<Notify>,
    /// Effects dispatched and not answered yet. An effect that answers
    /// after the shutdown has recorded it ambiguous finds itself gone.
    running: Arc<Mutex<HashMap<Uuid, (String, i64)>>>,
}

impl Pipeline {
    fn new(max_in_flight: usize) -> Self {
        let max_in_flight = max_in_flight.max(1);
        Pipeline {
            max_in_flight,
            effect_slots: Arc::new(Semaphore::new(max_in_flight)),
            record_slots: Arc::new(Semaphore::new(
                max_in_flight.saturating_mul(UNRECORDED_PER_EFFECT),
            )),
            capacity: Arc::new(Notify::new()),
            running: Arc::default(),
        }
    }

    /// How many commands may be claimed now, at most `batch`.
    fn room(&self, batch: usize) -> usize {
        self.effect_slots
            .available_permits()
            .min(self.record_slots.available_permits())
            .min(batch)
    }
}

impl Custodian {
    /// One whole step, through the same pipeline `run` uses: renew or take
    /// leases, retry what an outage left, claim and start one batch,
    /// dispatch its effects, wait for every one of them, and record their
    /// outcomes. Tests drive the custodian with this.
    pub async fn run_once(&self) -> Result<StepReport, CustodianError> {
        self.tend().await?;
        let pipeline = Pipeline::new(self.config.max_in_flight);
        let (done_tx, done_rx) = mpsc::unbounded_channel::<Answered>();
        let mut report = StepReport::default();
        let one_turn = async {
            let turned = self
                .turn(&pipeline, &done_tx, self.config.batch_size, &mut report)
                .await;
            // No grace limit: every effect runs to its own deadline.
            self.drain(&pipeline, done_tx, None, &mut report).await;
            turned
        };
        let recording = self.recorder(done_rx, Arc::clone(&pipeline.capacity));
        let (turned, recorded) = tokio::join!(one_turn, recording);
        turned?;
        report.add(&recorded);
        Ok(report)
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
        self.write_providers().await?;
        let pipeline = Pipeline::new(self.config.max_in_flight);
        let (done_tx, done_rx) = mpsc::unbounded_channel::<Answered>();
        let recorder = {
            let custodian = Arc::clone(&self);
            let capacity = Arc::clone(&pipeline.capacity);
            tokio::spawn(async move { custodian.recorder(done_rx, capacity).await })
        };

        // Woken by submissions (and, after a gap in listening, once more).
        let mut listener = notify::Listener::new(self.cluster.pool().clone(), PENDING_CHANNEL);
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
            .clamp(1, pipeline.max_in_flight);
        // When the next scheduled command falls due, if one was waiting when
        // a claim last found nothing.
        let mut due: Option<tokio::time::Instant> = None;
        loop {
            // With less than half a batch of room, wait for more: many small
            // claims cost more than fewer full ones.
            let room = pipeline.room(batch);
            let mut more = false;
            // Short of room: the next freed slot is what to wait for. With
            // room, a claim that found less than it asked for emptied the
            // queue, and a freed slot is no news (on a distributed backend each needless
            // claim is a distributed transaction, three per command when
            // every freed slot woke one, competing with the records).
            let short = room == 0 || room < batch.div_ceil(2);
            if !short {
                let mut report = StepReport::default();
                match self
                    .turn(&pipeline, &done_tx, room as i64, &mut report)
                    .await
                {
                    Ok(()) => {
                        more = report.claimed >= room;
                        // Nothing was claimable (or, under limits per
                        // provider, less than asked): sleep no later than
                        // the next scheduled command's time or a limit's
                        // next room (asked only then, so a busy queue
                        // pays nothing for it).
                        let limited = !self.effects.providers().is_empty();
                        if report.claimed == 0 || (limited && !more) {
                            due = self.next_due(limited).await;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claim failed; retrying after the next wake-up");
                    }
                }
            }
            let due_sleep = async move {
                match due {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending::<()>().await,
                }
            };

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
                    if let Err(e) = self.tend().await {
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
                () = due_sleep => due = None,
                () = pipeline.capacity.notified(), if short => {}
            }
        }

        tracing::info!("custodian stopping: no new claims; draining effects in flight");
        let mut report = StepReport::default();
        self.drain(
            &pipeline,
            done_tx,
            Some(self.config.shutdown_grace),
            &mut report,
        )
        .await;
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
        // What an unconfirmed commit or an outage left (outcomes not yet
        // written, starts not yet closed): one more try while the leases
        // are still ours, so recovery need not guess about them later.
        self.retry_leftovers().await;
        self.release_leases().await;
        Ok(())
    }

    /// What the heartbeat does: renew or take leases, then retry what a
    /// database outage left behind (also when a lease's heartbeat failed:
    /// the outcomes of the others' commands are still to be recorded).
    async fn tend(&self) -> Result<(), CustodianError> {
        let leases = self.heartbeat().await;
        self.retry_leftovers().await;
        self.reconcile_places().await;
        leases
    }

    /// One turn: claim and start up to `limit` commands, and dispatch every
    /// one whose `effect_started` is committed.
    /// When the next scheduled command of this custodian's authorities
    /// falls due (and, when `limited`, a provider group whose commands wait
    /// there may have room again), as an instant of the runtime's clock;
    /// `None` when none waits or the question failed (the poll still finds
    /// it then).
    async fn next_due(&self, limited: bool) -> Option<tokio::time::Instant> {
        let pool = self.cluster.pool();
        let authorities = &self.config.authorities;
        let due = crate::db::lifecycle::next_due(pool, authorities).await;
        let due = match (due, limited) {
            (Ok(due), true) => crate::db::limits::next_room(pool, authorities)
                .await
                .map(|room| due.into_iter().chain(room).min()),
            (due, _) => due,
        };
        match due {
            Ok(Some(at)) => {
                let ahead = (at - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO);
                Some(tokio::time::Instant::now() + ahead)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(error = %e, "next scheduled command not found");
                None
            }
        }
    }

    async fn turn(
        &self,
        pipeline: &Pipeline,
        done_tx: &mpsc::UnboundedSender<Answered>,
        limit: i64,
        report: &mut StepReport,
    ) -> Result<(), CustodianError> {
        let started = self.claim_and_start(limit, report).await?;
        for s in started {
            self.dispatch(s, pipeline, done_tx).await;
        }
        Ok(())
    }

    /// Waits for the effects in flight (at most `grace`, when given), then
    /// closes the queue to the recorder: what is still unanswered is
    /// recorded ambiguous, since nobody can know.
    async fn drain(
        &self,
        pipeline: &Pipeline,
        done_tx: mpsc::UnboundedSender<Answered>,
        grace: Option<Duration>,
        report: &mut StepReport,
    ) {
        let all = u32::try_from(pipeline.max_in_flight).unwrap_or(u32::MAX);
        let answered = pipeline.effect_slots.acquire_many(all);
        match grace {
            Some(grace) => {
                let _ = tokio::time::timeout(grace, answered).await;
            }
            None => {
                let _ = answered.await;
            }
        }
        // Dispatched and still unanswered: nobody can know, so ambiguous.
        // Dropping the sender under the lock closes the queue to them.
        let left: Vec<Done> = {
            let mut running = pipeline.running.lock().expect("running lock");
            drop(done_tx);
            running
                .drain()
                .map(|(id, (authority, generation))| Done {
                    authority,
                    generation,
                    id,
                    trace: None,
                    next: None,
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
            self.record_outcomes(left, report).await;
        }
    }

    /// Runs one started command's effect in a task of its own, holding an
    /// effect slot until it answers and a record slot until its outcome is
    /// recorded.
    async fn dispatch(
        &self,
        s: Started,
        pipeline: &Pipeline,
        done_tx: &mpsc::UnboundedSender<Answered>,
    ) {
        let effect_slot = Arc::clone(&pipeline.effect_slots)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let record_slot = Arc::clone(&pipeline.record_slots)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let id = s.call.command_id;
        pipeline
            .running
            .lock()
            .expect("running lock")
            .insert(id, (s.authority.clone(), s.generation));
        let effects = Arc::clone(&self.effects);
        let stats = Arc::clone(&self.stats);
        let done_tx = done_tx.downgrade();
        let running = Arc::clone(&pipeline.running);
        let capacity = Arc::clone(&pipeline.capacity);
        tokio::spawn(async move {
            let outcome = timed_effect(&effects, &s.call, &stats).await;
            let done = Done {
                authority: s.authority,
                generation: s.generation,
                id,
                next: effects.next_attempt(&s.call.kind, s.call.attempt, &outcome),
                outcome,
                trace: s.call.trace,
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
    /// waiting, until every sender is gone and the queue is empty. Returns
    /// what it recorded.
    async fn recorder(
        &self,
        mut rx: mpsc::UnboundedReceiver<Answered>,
        capacity: Arc<Notify>,
    ) -> StepReport {
        let mut recorded = StepReport::default();
        while let Some(first) = rx.recv().await {
            let mut batch = vec![first];
            while batch.len() < RECORD_BATCH {
                match rx.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            let (done, slots): (Vec<Done>, Vec<_>) = batch.into_iter().unzip();
            self.record_outcomes(done, &mut recorded).await;
            drop(slots);
            capacity.notify_one();
        }
        recorded
    }
}
