//! The record step and the effects: running started commands' effects
//! ([`timed_effect`], [`Custodian::execute`]), recording their outcomes
//! through the engine step `ledger_record_outcomes`, one fenced transaction
//! per (authority, generation), and retrying what a database outage left
//! unrecorded.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use uuid::Uuid;

use super::effects::{self, EffectCall, Effects};
use super::{Custodian, CustodianError, Done, Started, Stats, StepReport};
use crate::crash::{self, CrashPoint};
use crate::db;
use crate::db::lifecycle::Outcome;
use crate::db::txn::{self, TxError};
use crate::domain::trace_context::TraceContext;
use crate::domain::{CommandState, EffectOutcome};

/// Runs one effect and records how long it took, by kind and outcome.
pub(super) async fn timed_effect(
    effects: &Effects,
    call: &EffectCall,
    stats: &Stats,
) -> EffectOutcome {
    use tracing::Instrument as _;
    let span = tracing::info_span!(
        "effect",
        command.id = %call.command_id,
        kind = %call.kind,
        authority = %call.authority,
        generation = call.generation,
    );
    crate::telemetry::join(&span, call.trace.as_ref());
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

impl Custodian {
    /// Retries what a database outage left behind: batches whose start
    /// commit is unknown, and outcomes not yet recorded.
    pub(super) async fn retry_leftovers(&self) {
        let limbo: Vec<_> = std::mem::take(&mut *self.limbo.lock().expect("limbo lock"));
        let unrecorded: Vec<Done> =
            std::mem::take(&mut *self.unrecorded.lock().expect("unrecorded lock"));
        let mut report = StepReport::default();
        for (authority, generation, ids) in limbo {
            self.close_undispatched(&authority, generation, &ids, &mut report)
                .await;
        }
        if !unrecorded.is_empty() {
            self.record_outcomes(unrecorded, &mut report).await;
        }
    }

    /// Records outcomes, one transaction per (authority, generation), each
    /// the engine step `ledger_record_outcomes` at the record's isolation
    /// (SERIALIZABLE unless configured otherwise). A refused write (fenced)
    /// is counted and logged, never taken for success.
    pub async fn record_outcomes(&self, done: Vec<Done>, report: &mut StepReport) {
        let mut groups: BTreeMap<(String, i64), Vec<Outcome>> = BTreeMap::new();
        let mut traces: HashMap<Uuid, TraceContext> = HashMap::new();
        for d in done {
            if let Some(trace) = d.trace {
                traces.insert(d.id, trace);
            }
            groups
                .entry((d.authority, d.generation))
                .or_default()
                .push(Outcome {
                    id: d.id,
                    outcome: d.outcome,
                    next: d.next,
                });
        }
        for ((authority, generation), outcomes) in groups {
            crash::point(CrashPoint::AfterEffect);
            let linked: Vec<TraceContext> = outcomes
                .iter()
                .filter_map(|o| traces.get(&o.id).cloned())
                .collect();
            let recorded = match self
                .record_group_outcomes(&authority, generation, &outcomes, linked)
                .await
            {
                Ok(recorded) => recorded,
                Err(e) => {
                    // Known outcomes are never dropped: kept and retried on
                    // the next heartbeat (recovery leaves rows of a live
                    // lease alone, so this is the only way they finish).
                    tracing::warn!(authority, generation, error = %e, count = outcomes.len(), "recording outcomes failed; will retry");
                    self.unrecorded.lock().expect("unrecorded lock").extend(
                        outcomes.into_iter().map(|o| Done {
                            authority: authority.clone(),
                            generation,
                            id: o.id,
                            outcome: o.outcome,
                            next: o.next,
                            trace: traces.get(&o.id).cloned(),
                        }),
                    );
                    continue;
                }
            };
            crash::point(CrashPoint::AfterOutcome);
            self.outcomes.finished(&recorded).await;
            if self.places_apart() && !recorded.is_empty() {
                // Their places freed; a failure leaves them to the
                // heartbeat's reconciliation.
                if let Err(e) =
                    db::limits::release(self.cluster.pool(), &authority, &recorded).await
                {
                    tracing::warn!(authority, error = %e, "provider places not freed; the heartbeat's reconciliation will");
                }
            }
            for Outcome { id, outcome, next } in &outcomes {
                if !recorded.contains(id) {
                    report.fenced += 1;
                    self.stats.fenced.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(command.id = %id, authority, generation, outcome = ?outcome, "outcome refused: the authority moved on or the row changed; recovery decides");
                    continue;
                }
                let (counter, tally) = match outcome.state() {
                    CommandState::Applied => (&self.stats.applied, &mut report.applied),
                    CommandState::Failed => (&self.stats.failed, &mut report.failed),
                    _ => (&self.stats.ambiguous, &mut report.ambiguous),
                };
                counter.fetch_add(1, Ordering::Relaxed);
                *tally += 1;
                tracing::info!(command.id = %id, authority, generation, state = %outcome.state(), "outcome recorded");
                if let Some(next) = next {
                    tracing::info!(command.id = %id, authority, wait_s = next.wait.as_secs_f64(), "failed with nothing done; the next attempt is scheduled unless the chain's deadline comes first");
                }
            }
        }
    }

    /// One fenced transaction for one (authority, generation);
    /// returns the ids it recorded. After a commit whose outcome is unknown,
    /// the rows are re-read: those already in the intended state count as
    /// recorded.
    #[tracing::instrument(name = "record", skip(self, outcomes, traces), fields(commands = outcomes.len()))]
    async fn record_group_outcomes(
        &self,
        authority: &str,
        generation: i64,
        outcomes: &[Outcome],
        traces: Vec<TraceContext>,
    ) -> Result<Vec<Uuid>, CustodianError> {
        // One record serves the commands of many traces: a link to each.
        crate::telemetry::link_all(&tracing::Span::current(), traces);
        let settings = self.transition_settings();
        // The step goes to the node holding the authority's shards.
        let route = self.cluster.route(authority).await;
        let mut retry = route.retrying(
            &self.stats.serialization_retries,
            "record",
            self.config.isolation,
            &settings,
        );
        self.record_in(&mut retry, &route, authority, generation, outcomes)
            .await
            .inspect_err(|_| self.cluster.failed(authority))
    }

    /// [`Custodian::record_group_outcomes`]'s transaction, retried by `retry`.
    async fn record_in(
        &self,
        retry: &mut txn::Retrying<'_>,
        route: &db::Route,
        authority: &str,
        generation: i64,
        outcomes: &[Outcome],
    ) -> Result<Vec<Uuid>, CustodianError> {
        loop {
            let mut tx = retry.next_attempt().await?;
            let attempt = route
                .record_outcomes(&mut *tx, outcomes, authority, generation)
                .await;
            match retry.finish(tx, attempt).await {
                Ok(Some(ids)) => return Ok(ids),
                Ok(None) => {}
                Err(TxError::CommitUnknown(e)) => {
                    tracing::warn!(authority, generation, error = %e, "outcome commit unknown; re-reading");
                    let ids: Vec<Uuid> = outcomes.iter().map(|o| o.id).collect();
                    let rows = db::lifecycle::reread(self.cluster.pool(), &ids, authority).await?;
                    let done: Vec<Uuid> = rows
                        .into_iter()
                        .filter(|row| {
                            outcomes
                                .iter()
                                .any(|o| o.id == row.id && o.outcome.state() == row.state())
                        })
                        .map(|row| row.id)
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

    /// Runs the effects of started commands concurrently, each under its
    /// deadline, and returns their outcomes unrecorded: for tests that act
    /// between an effect and its record. The pipeline runs each effect the
    /// same way ([`timed_effect`]), in a task of its own.
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
                    next: effects.next_attempt(&s.call.kind, s.call.attempt, &outcome),
                    outcome,
                    trace: s.call.trace,
                }
            }));
        }
        let mut done = Vec::with_capacity(tasks.len());
        for t in tasks {
            done.push(t.await.expect("effect tasks do not panic"));
        }
        done
    }
}
