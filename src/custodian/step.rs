//! The fenced transitions, one small step each: claim (`pending →
//! prepared`), start (`prepared → effect_started`, committed before any
//! effect), record (`→ applied | failed | ambiguous`), adopt a superseded
//! generation's prepared rows, and close what an unknown commit left. Every
//! write is a compare-and-set on state and generation; a refused one is
//! counted as fenced, never taken for success.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use uuid::Uuid;

use super::effects::{self, EffectCall, Effects};
use super::{Custodian, CustodianError, Done, Started, Stats, StepReport};
use crate::crash::{self, CrashPoint};
use crate::db::txn::{self, TxError};
use crate::db::{self, CommandRow};
use crate::domain::{CommandState, EffectOutcome};

/// Most prepared rows adopted per statement.
const ADOPT_BATCH: i64 = 500;

/// What a step taken group by group (an authority, or an authority and a
/// generation, per transaction) committed, and the first error of a group
/// that failed. One group's failure never drops what another committed: a
/// command whose `effect_started` committed but was never dispatched would
/// sit under a live lease that recovery leaves alone (the rebalance trial
/// saw one authority's claim fail while its shard moved, and another
/// authority's command, started in the same turn, stranded).
struct Partly<T> {
    done: Vec<T>,
    failed: Option<CustodianError>,
}

impl<T> Partly<T> {
    fn new() -> Self {
        Partly {
            done: Vec::new(),
            failed: None,
        }
    }

    /// Keeps a group's rows, or its error (the first one; later ones are
    /// logged).
    fn add(&mut self, group: Result<Vec<T>, CustodianError>) {
        match group {
            Ok(rows) => self.done.extend(rows),
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: CustodianError) {
        match self.failed {
            None => self.failed = Some(e),
            Some(_) => tracing::warn!(error = %e, "another group of the step failed too"),
        }
    }

    /// Keeps another step's error, if it had one.
    fn also(&mut self, failed: Option<CustodianError>) {
        if let Some(e) = failed {
            self.fail(e);
        }
    }

    /// The error when nothing was done; otherwise what was done, the error
    /// logged (the failed groups are tried again at the next turn).
    fn into_result(self) -> Result<Vec<T>, CustodianError> {
        match self.failed {
            Some(e) if self.done.is_empty() => Err(e),
            Some(e) => {
                tracing::warn!(error = %e, done = self.done.len(), "a step failed for some authorities; going on with what the others committed");
                Ok(self.done)
            }
            None => Ok(self.done),
        }
    }
}

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
    /// Claims up to `limit` commands and starts those it may: returns the
    /// commands whose `effect_started` is committed, and only those.
    pub async fn claim_and_start(
        &self,
        limit: i64,
        report: &mut StepReport,
    ) -> Result<Vec<Started>, CustodianError> {
        // The engine claims and starts pending commands in one statement; the
        // pass for stale prepared rows (now and then) takes the trigger path,
        // which is told that the pass is due (asking again would say no).
        let look_for_stale = self.stale_pass_due();
        let engine = self.engine_steps().await? && !crash::armed_at(CrashPoint::AfterPrepared);
        let mut prepared: Vec<CommandRow> =
            std::mem::take(&mut *self.adopted.lock().expect("adopted lock"));
        if !look_for_stale && engine {
            let mut started = self.start_groups(&prepared, report).await;
            let room = limit - started.done.len() as i64;
            let claimed = self.claim_start(room, report).await;
            started.done.extend(claimed.done);
            started.also(claimed.failed);
            return started.into_result();
        }
        let claimed = self.claim_looking(limit, look_for_stale, report).await;
        prepared.extend(claimed.done);
        let mut started = self.start_groups(&prepared, report).await;
        started.also(claimed.failed);
        started.into_result()
    }

    /// Claims and starts up to `limit` pending commands of the authorities
    /// leased now, in one transaction (the engine step, migrations 0030 and
    /// 0033; where claims name one authority, one transaction each), at the
    /// claim's isolation: the lease row it holds for share fences it, as
    /// it fences the claim. (At SERIALIZABLE, a custodian paused with a
    /// transaction open kept its successor's claims failing: the full zombie
    /// campaign.) Returns those whose `effect_started` is committed; overdue
    /// ones are expired, never started.
    #[tracing::instrument(name = "claim_start", skip(self, report), fields(holder = %self.config.holder))]
    async fn claim_start(&self, limit: i64, report: &mut StepReport) -> Partly<Started> {
        let mut claimed: Partly<CommandRow> = Partly::new();
        if limit <= 0 {
            return Partly::new();
        }
        for authorities in self.claim_groups() {
            let remaining = limit - claimed.done.len() as i64;
            if remaining <= 0 {
                break;
            }
            claimed.add(self.claim_start_in(&authorities, remaining, report).await);
        }
        let rows = claimed.done;
        if !rows.is_empty() {
            crash::point(CrashPoint::AfterEffectStarted);
        }
        report.claimed += rows.len();
        self.stats
            .claimed
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        let started = self.started_from(rows, report).await;
        report.started += started.len();
        self.stats
            .started
            .fetch_add(started.len() as u64, Ordering::Relaxed);
        Partly {
            done: started,
            failed: claimed.failed,
        }
    }

    /// One claim-and-start over `authorities`, in a transaction of its own,
    /// retried on conflicts: the rows it moved, once their commit is known
    /// (after a commit whose outcome is unknown, none: they are closed
    /// without dispatching). On a backend that claims per authority the
    /// group is one authority, and the step is the one delegated to its
    /// shard ([`db::lifecycle::claim_start_authority`]).
    async fn claim_start_in(
        &self,
        authorities: &[String],
        limit: i64,
        report: &mut StepReport,
    ) -> Result<Vec<CommandRow>, CustodianError> {
        let settings = self.transition_settings().await?;
        // One authority's step goes to the node holding its shards.
        let routed = match authorities {
            [authority] if self.backend.claims_per_authority => Some(authority.as_str()),
            _ => None,
        };
        let route = match routed {
            Some(authority) => self.steps_route(authority).await,
            None => db::placement::StepRoute::here(&self.pool),
        };
        let mut retry = txn::Retrying::with_settings(
            &route.pool,
            route.backend(self.backend),
            &self.stats.serialization_retries,
            "claim_start",
            self.config.claim_isolation,
            &settings,
        );
        // What the statement moved, kept apart from the commit's outcome: an
        // unknown commit closes them without dispatching.
        let mut moved: Vec<(String, i64, Uuid)> = Vec::new();
        let result = loop {
            let mut tx = match retry.next_attempt().await {
                Ok(tx) => tx,
                Err(e) => break Err(e),
            };
            let attempt = match routed {
                Some(authority) => {
                    db::lifecycle::claim_start_authority(
                        &mut *tx,
                        route.copy,
                        authority,
                        &self.config.holder,
                        limit,
                    )
                    .await
                }
                None => {
                    db::lifecycle::claim_start(&mut *tx, authorities, &self.config.holder, limit)
                        .await
                }
            };
            if let Ok(rows) = &attempt {
                moved = rows
                    .iter()
                    .filter_map(|row| {
                        let generation = row.authority_generation?;
                        (row.state() == CommandState::EffectStarted)
                            .then(|| (row.authority_id.clone(), generation, row.id))
                    })
                    .collect();
            }
            match retry.finish(tx, attempt).await {
                Ok(Some(rows)) => break Ok(rows),
                Ok(None) => continue,
                Err(e) => break Err(e),
            }
        };
        if let (Err(_), Some(authority)) = (&result, routed) {
            self.step_failed(authority);
        }
        match result {
            Ok(rows) => Ok(rows),
            Err(TxError::CommitUnknown(e)) => {
                tracing::warn!(error = %e, "claim and start commit outcome unknown; not dispatching");
                let mut groups: BTreeMap<(String, i64), Vec<Uuid>> = BTreeMap::new();
                for (authority, generation, id) in moved {
                    groups.entry((authority, generation)).or_default().push(id);
                }
                for ((authority, generation), ids) in groups {
                    self.close_undispatched(&authority, generation, &ids, report)
                        .await;
                }
                Ok(Vec::new())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The rows a start committed: the expired ones counted and their
    /// waiters woken, the `effect_started` ones as calls under their
    /// authority and generation.
    async fn started_from(&self, rows: Vec<CommandRow>, report: &mut StepReport) -> Vec<Started> {
        let expired: Vec<Uuid> = rows
            .iter()
            .filter(|row| row.state() == CommandState::Expired)
            .map(|row| row.id)
            .collect();
        self.outcomes.finished(&expired).await;
        let mut started = Vec::with_capacity(rows.len());
        for row in rows {
            match (row.state(), row.authority_generation) {
                (CommandState::EffectStarted, Some(generation)) => started.push(Started {
                    authority: row.authority_id.clone(),
                    generation,
                    call: call_for(&row, generation),
                }),
                (CommandState::Expired, _) => {
                    report.expired += 1;
                    self.stats.expired.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(command.id = %row.id, authority = %row.authority_id, error = ?row.error, "expired before any effect");
                }
                (state, _) => {
                    tracing::error!(command.id = %row.id, %state, "a start returned an unexpected row");
                }
            }
        }
        started
    }

    /// Claims up to `limit` pending commands of the authorities leased now:
    /// returns those now `prepared` (overdue ones are expired, never started).
    pub async fn claim(
        &self,
        limit: i64,
        report: &mut StepReport,
    ) -> Result<Vec<CommandRow>, CustodianError> {
        let look_for_stale = self.stale_pass_due();
        self.claim_looking(limit, look_for_stale, report)
            .await
            .into_result()
    }

    /// The authorities leased now, as the claims take them until their limit
    /// is reached: all in one statement, or one per statement (each on its
    /// own shard), starting one further along at each turn so that no
    /// authority always comes last. None when nothing is leased.
    fn claim_groups(&self) -> Vec<Vec<String>> {
        let mut ids: Vec<String> = self.held().keys().cloned().collect();
        if ids.is_empty() {
            return Vec::new();
        }
        if !self.backend.claims_per_authority {
            return vec![ids];
        }
        ids.sort();
        let turn = self.claim_turn.fetch_add(1, Ordering::Relaxed);
        let first = turn % ids.len();
        ids.rotate_left(first);
        ids.into_iter().map(|id| vec![id]).collect()
    }

    /// [`Custodian::claim`], looking for stale prepared rows when `look_for_stale`.
    #[tracing::instrument(name = "claim", skip(self, report), fields(holder = %self.config.holder))]
    async fn claim_looking(
        &self,
        limit: i64,
        look_for_stale: bool,
        report: &mut StepReport,
    ) -> Partly<CommandRow> {
        let mut groups = Partly::new();
        if limit <= 0 {
            return groups;
        }
        for authorities in self.claim_groups() {
            let remaining = limit - groups.done.len() as i64;
            if remaining <= 0 {
                break;
            }
            groups.add(self.claim_in(&authorities, remaining, look_for_stale).await);
        }
        let claimed = groups.done;
        if !claimed.is_empty() {
            crash::point(CrashPoint::AfterPrepared);
        }
        report.claimed += claimed.len();
        self.stats
            .claimed
            .fetch_add(claimed.len() as u64, Ordering::Relaxed);
        let mut prepared = Vec::with_capacity(claimed.len());
        let expired: Vec<Uuid> = claimed
            .iter()
            .filter(|row| row.state() == CommandState::Expired)
            .map(|row| row.id)
            .collect();
        self.outcomes.finished(&expired).await;
        for row in claimed {
            match row.state() {
                CommandState::Prepared => prepared.push(row),
                CommandState::Expired => {
                    report.expired += 1;
                    self.stats.expired.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(command.id = %row.id, authority = %row.authority_id, error = ?row.error, "expired before any effect");
                }
                state => {
                    tracing::error!(command.id = %row.id, %state, "claim returned an unexpected row");
                }
            }
        }
        Partly {
            done: prepared,
            failed: groups.failed,
        }
    }

    /// One claim statement over `authorities`, in a transaction of its own
    /// (READ COMMITTED unless configured otherwise), retried on conflicts.
    async fn claim_in(
        &self,
        authorities: &[String],
        limit: i64,
        look_for_stale: bool,
    ) -> Result<Vec<CommandRow>, CustodianError> {
        let settings = self.transition_settings().await?;
        let mut retry = txn::Retrying::with_settings(
            &self.pool,
            self.backend,
            &self.stats.serialization_retries,
            "claim",
            self.config.claim_isolation,
            &settings,
        );
        loop {
            let mut tx = retry.next_attempt().await?;
            let attempt = db::lifecycle::claim(
                &mut *tx,
                authorities,
                &self.config.holder,
                limit,
                self.config.lease_ttl,
                look_for_stale,
            )
            .await;
            if let Some(rows) = retry.finish(tx, attempt).await? {
                return Ok(rows);
            }
        }
    }

    /// Starts prepared commands, one fenced transaction per (authority,
    /// generation). The rows of a group whose start failed are started again
    /// at the next turn; the error is returned only when nothing started.
    pub async fn start_prepared(
        &self,
        prepared: &[CommandRow],
        report: &mut StepReport,
    ) -> Result<Vec<Started>, CustodianError> {
        self.start_groups(prepared, report).await.into_result()
    }

    /// [`Custodian::start_prepared`], with every group's error kept.
    async fn start_groups(
        &self,
        prepared: &[CommandRow],
        report: &mut StepReport,
    ) -> Partly<Started> {
        let mut groups: BTreeMap<(String, i64), Vec<&CommandRow>> = BTreeMap::new();
        for row in prepared {
            if let Some(generation) = row.authority_generation {
                groups
                    .entry((row.authority_id.clone(), generation))
                    .or_default()
                    .push(row);
            }
        }
        let mut started = Partly::new();
        for ((authority, generation), rows) in groups {
            let ids: Vec<Uuid> = rows.iter().map(|row| row.id).collect();
            let group = self.start(&authority, generation, &ids, report).await;
            if group.is_err() {
                // Not started (the start is one transaction, and an unknown
                // commit is handled inside it): still prepared under this
                // generation, unless fenced since, which the next start sees.
                self.adopted
                    .lock()
                    .expect("adopted lock")
                    .extend(rows.into_iter().cloned());
            }
            started.add(group);
        }
        started
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
        let settings = self.transition_settings().await?;
        let mut retry = txn::Retrying::with_settings(
            &self.pool,
            self.backend,
            &self.stats.serialization_retries,
            "start",
            self.config.isolation,
            &settings,
        );
        let result = loop {
            let mut tx = match retry.next_attempt().await {
                Ok(tx) => tx,
                Err(e) => break Err(e),
            };
            let attempt = db::lifecycle::start(&mut *tx, ids, authority, holder, generation).await;
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
        // Each row is of `authority` at `generation`: the start's own fence.
        let started = self.started_from(rows, report).await;
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
        let rows = match db::lifecycle::reread(&self.pool, ids, authority).await {
            Ok(rows) => rows,
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
        let ours = |row: &CommandRow| row.authority_generation == Some(generation);
        // Still prepared: the start did not commit for them (on a distributed
        // backend, a serialization failure at the worker's commit reads as unknown).
        // No effect was attempted; the next turn starts them.
        let again: Vec<CommandRow> = rows
            .iter()
            .filter(|row| row.state() == CommandState::Prepared && ours(row))
            .cloned()
            .collect();
        self.adopted.lock().expect("adopted lock").extend(again);
        let done: Vec<Done> = rows
            .into_iter()
            .filter(|row| row.state() == CommandState::EffectStarted && ours(row))
            .map(|row| Done {
                authority: authority.to_owned(),
                generation,
                id: row.id,
                outcome: EffectOutcome::not_dispatched(
                    "the effect_started commit was not confirmed; never dispatched",
                ),
            })
            .collect();
        self.record_outcomes(done, report).await;
    }

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

    /// Records outcomes, one SERIALIZABLE transaction per (authority,
    /// generation). A refused write (fenced) is counted and logged, never
    /// taken for success.
    pub async fn record_outcomes(&self, done: Vec<Done>, report: &mut StepReport) {
        let mut groups: BTreeMap<(String, i64), Vec<(Uuid, EffectOutcome)>> = BTreeMap::new();
        for d in done {
            groups
                .entry((d.authority, d.generation))
                .or_default()
                .push((d.id, d.outcome));
        }
        for ((authority, generation), outcomes) in groups {
            crash::point(CrashPoint::AfterEffect);
            let recorded = match self
                .record_group_outcomes(&authority, generation, &outcomes)
                .await
            {
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
            self.outcomes.finished(&recorded).await;
            for (id, outcome) in &outcomes {
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
            }
        }
    }

    /// One fenced SERIALIZABLE transaction for one (authority, generation);
    /// returns the ids it recorded. After a commit whose outcome is unknown,
    /// the rows are re-read: those already in the intended state count as
    /// recorded.
    #[tracing::instrument(name = "record", skip(self, outcomes), fields(commands = outcomes.len()))]
    async fn record_group_outcomes(
        &self,
        authority: &str,
        generation: i64,
        outcomes: &[(Uuid, EffectOutcome)],
    ) -> Result<Vec<Uuid>, CustodianError> {
        let settings = self.transition_settings().await?;
        // The engine step goes to the node holding the authority's shards.
        let engine = self.engine_steps().await?;
        let route = if engine {
            self.steps_route(authority).await
        } else {
            db::placement::StepRoute::here(&self.pool)
        };
        let mut retry = txn::Retrying::with_settings(
            &route.pool,
            route.backend(self.backend),
            &self.stats.serialization_retries,
            "record",
            self.config.isolation,
            &settings,
        );
        self.record_in(
            &mut retry, engine, route.copy, authority, generation, outcomes,
        )
        .await
        .inspect_err(|_| self.step_failed(authority))
    }

    /// [`Custodian::record_group_outcomes`]'s transaction, retried by `retry`.
    async fn record_in(
        &self,
        retry: &mut txn::Retrying<'_>,
        engine: bool,
        copy: Option<i64>,
        authority: &str,
        generation: i64,
        outcomes: &[(Uuid, EffectOutcome)],
    ) -> Result<Vec<Uuid>, CustodianError> {
        loop {
            let mut tx = retry.next_attempt().await?;
            let attempt = if engine {
                db::lifecycle::engine_record_outcomes(
                    &mut *tx, copy, outcomes, authority, generation,
                )
                .await
            } else {
                db::lifecycle::record_outcomes(&mut *tx, outcomes, authority, generation).await
            };
            match retry.finish(tx, attempt).await {
                Ok(Some(ids)) => return Ok(ids),
                Ok(None) => {}
                Err(TxError::CommitUnknown(e)) => {
                    tracing::warn!(authority, generation, error = %e, "outcome commit unknown; re-reading");
                    let ids: Vec<Uuid> = outcomes.iter().map(|(id, _)| *id).collect();
                    let rows = db::lifecycle::reread(&self.pool, &ids, authority).await?;
                    let done: Vec<Uuid> = rows
                        .into_iter()
                        .filter(|row| {
                            outcomes
                                .iter()
                                .any(|(o, outcome)| *o == row.id && outcome.state() == row.state())
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

    /// Rebinds the authority's prepared rows of older generations to ours,
    /// a batch per SERIALIZABLE transaction (the start's and record's
    /// isolation), fenced on the lease just taken and retried on conflicts.
    /// An unknown commit is an error: rows it did rebind are ours and still
    /// `prepared`, so the claim's pass for stale prepared rows starts them.
    pub(super) async fn adopt(
        &self,
        authority: &str,
        generation: i64,
    ) -> Result<(), CustodianError> {
        let settings = self.transition_settings().await?;
        loop {
            let mut retry = txn::Retrying::with_settings(
                &self.pool,
                self.backend,
                &self.stats.serialization_retries,
                "adopt",
                self.config.isolation,
                &settings,
            );
            let rows = loop {
                let mut tx = retry.next_attempt().await?;
                let attempt = db::lifecycle::adopt_prepared(
                    &mut *tx,
                    authority,
                    &self.config.holder,
                    generation,
                    ADOPT_BATCH,
                )
                .await;
                if let Some(rows) = retry.finish(tx, attempt).await? {
                    break rows;
                }
            };
            // Pinned to an older generation: expired, not adopted.
            let expired: Vec<Uuid> = rows
                .iter()
                .filter(|r| r.state() == CommandState::Expired)
                .map(|r| r.id)
                .collect();
            self.outcomes.finished(&expired).await;
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
                    .filter(|r| r.state() == CommandState::Prepared),
            );
            if (count as i64) < ADOPT_BATCH {
                return Ok(());
            }
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
