//! The custodian's steps, each one fenced statement in a transaction of
//! its own, retried on conflicts:
//!
//! - claim and start: `pending → effect_started` (or `expired`) in one
//!   statement, the engine step `ledger_claim_start` (one authority at a
//!   time where claims name one: `ledger_claim_start_authority`);
//! - start prepared rows: `prepared → effect_started` (or `expired`),
//!   `ledger_start_prepared`, for the rows an adoption rebound to the
//!   lease's generation and, now and then, any other writer left prepared;
//! - record: `effect_started → applied | failed | ambiguous`, the engine
//!   step `ledger_record_outcomes` (`record.rs`);
//! - adopt a superseded generation's prepared rows, and close what an
//!   unknown commit left.
//!
//! Every write is a compare-and-set on state and generation, fenced by the
//! authority's row; a refused one is counted as fenced, never taken for
//! success. docs/design/isolation.md argues the isolation of each.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use uuid::Uuid;

use super::effects::EffectCall;
use super::{Custodian, CustodianError, Done, Started, StepReport};
use crate::crash::{self, CrashPoint};
use crate::db::txn::{self, TxError};
use crate::db::{self, CommandRow};
use crate::domain::{CommandState, EffectOutcome};

/// Most prepared rows adopted per statement.
const ADOPT_BATCH: i64 = 500;

/// The two steps that commit `effect_started`.
#[derive(Clone, Copy, Debug)]
enum Start<'a> {
    /// Claim and start queued commands of these authorities.
    Queued(&'a [String]),
    /// Start the prepared rows of this authority.
    Prepared(&'a str),
    /// Claim and start queued commands of this authority's provider groups,
    /// within their room, through the coordinator
    /// ([`db::limits::claim_start_limited`]; `provider_rooms_on_coordinator`).
    Limited(&'a str),
}

impl Start<'_> {
    fn label(self) -> &'static str {
        match self {
            Start::Queued(_) => "claim_start",
            Start::Prepared(_) => "start_prepared",
            Start::Limited(_) => "claim_start_limited",
        }
    }
}

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

impl Custodian {
    /// Starts up to `limit` commands: first the prepared rows due (adopted,
    /// or, at the periodic pass, any of the leased authorities), then
    /// queued commands claimed and started in one statement. Returns the
    /// commands whose `effect_started` is committed, and only those.
    pub async fn claim_and_start(
        &self,
        limit: i64,
        report: &mut StepReport,
    ) -> Result<Vec<Started>, CustodianError> {
        let every = self.prepared_pass_due();
        let mut started = self.start_prepared_of(every, limit, report).await;
        let room = limit - started.done.len() as i64;
        let claimed = self.claim_start(room, report).await;
        started.done.extend(claimed.done);
        started.also(claimed.failed);
        started.into_result()
    }

    /// Starts up to `limit` prepared rows of every leased authority bound to
    /// its lease's generation (the periodic pass, now): for tests that put
    /// rows in `prepared` as another writer would.
    pub async fn start_prepared(
        &self,
        limit: i64,
        report: &mut StepReport,
    ) -> Result<Vec<Started>, CustodianError> {
        self.start_prepared_of(true, limit, report)
            .await
            .into_result()
    }

    /// [`Custodian::start_prepared`] over every leased authority when
    /// `every`, else over those an adoption or an unknown commit left
    /// prepared rows to.
    async fn start_prepared_of(
        &self,
        every: bool,
        limit: i64,
        report: &mut StepReport,
    ) -> Partly<Started> {
        let held = self.held();
        let due: Vec<String> = {
            let mut due = self.prepared_due.lock().expect("prepared_due lock");
            let picked: Vec<String> = if every {
                held.keys().cloned().collect()
            } else {
                due.iter()
                    .filter(|a| held.contains_key(*a))
                    .cloned()
                    .collect()
            };
            for authority in &picked {
                due.remove(authority);
            }
            picked
        };
        let mut rows: Partly<CommandRow> = Partly::new();
        for authority in &due {
            let remaining = limit - rows.done.len() as i64;
            if remaining <= 0 {
                // Not reached this turn: the next one.
                self.prepared_due
                    .lock()
                    .expect("prepared_due lock")
                    .insert(authority.clone());
                continue;
            }
            let step = self
                .start(Start::Prepared(authority), remaining, report)
                .await;
            // Failed, or as many as asked (more may wait): the next turn again.
            if step
                .as_ref()
                .map_or(true, |moved| moved.len() as i64 == remaining)
            {
                self.prepared_due
                    .lock()
                    .expect("prepared_due lock")
                    .insert(authority.clone());
            }
            rows.add(step);
        }
        self.started_rows(rows, false, report).await
    }

    /// Claims and starts up to `limit` pending commands of the authorities
    /// leased now (one statement per group of [`Custodian::claim_groups`]).
    /// Returns those whose `effect_started` is committed; overdue ones are
    /// expired, never started.
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
            claimed.add(
                self.start(Start::Queued(&authorities), remaining, report)
                    .await,
            );
            // On a backend whose claim leaves the provider groups' commands
            // alone, a claim of those of its own.
            let remaining = limit - claimed.done.len() as i64;
            if let [authority] = authorities.as_slice()
                && remaining > 0
                && self.places_apart()
            {
                claimed.add(
                    self.start(Start::Limited(authority), remaining, report)
                        .await,
                );
            }
        }
        // One claim serves the commands of many traces: a link to each.
        crate::telemetry::link_all(
            &tracing::Span::current(),
            claimed.done.iter().filter_map(CommandRow::trace),
        );
        self.started_rows(claimed, true, report).await
    }

    /// What the starts committed, counted (claimed when `claimed`), their
    /// expired rows' waiters woken, and the `effect_started` rows as calls.
    async fn started_rows(
        &self,
        rows: Partly<CommandRow>,
        claimed: bool,
        report: &mut StepReport,
    ) -> Partly<Started> {
        let Partly { done, failed } = rows;
        if !done.is_empty() {
            crash::point(CrashPoint::AfterEffectStarted);
        }
        if claimed {
            report.claimed += done.len();
            self.stats
                .claimed
                .fetch_add(done.len() as u64, Ordering::Relaxed);
        }
        let started = self.started_from(done, report).await;
        report.started += started.len();
        self.stats
            .started
            .fetch_add(started.len() as u64, Ordering::Relaxed);
        Partly {
            done: started,
            failed,
        }
    }

    /// One start step, in a transaction of its own at the claim's isolation
    /// (the lease row it holds for share fences it; at SERIALIZABLE, a
    /// custodian paused with a transaction open kept its successor's claims
    /// failing: the full zombie campaign), retried on conflicts: the rows
    /// it moved, once their commit is known (after a commit whose outcome
    /// is unknown, none: they are closed without dispatching). A claim of
    /// one authority on a backend that claims per authority goes to the
    /// node holding its shards ([`db::lifecycle::claim_start_authority`]).
    async fn start(
        &self,
        step: Start<'_>,
        limit: i64,
        report: &mut StepReport,
    ) -> Result<Vec<CommandRow>, CustodianError> {
        let settings = self.transition_settings();
        let routed = match step {
            Start::Queued([authority]) if self.cluster.backend().claims_per_authority => {
                Some(authority.as_str())
            }
            _ => None,
        };
        let route = match routed {
            Some(authority) => self.cluster.route(authority).await,
            None => self.cluster.here(),
        };
        let mut retry = route.retrying(
            &self.stats.serialization_retries,
            step.label(),
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
            let holder = &self.config.holder;
            let attempt = match (step, routed) {
                (_, Some(authority)) => {
                    route
                        .claim_start_authority(&mut *tx, authority, holder, limit)
                        .await
                }
                (Start::Queued(authorities), None) => {
                    db::lifecycle::claim_start(&mut *tx, authorities, holder, limit).await
                }
                (Start::Prepared(authority), None) => {
                    db::lifecycle::start_prepared(&mut *tx, authority, holder, limit).await
                }
                (Start::Limited(authority), None) => {
                    db::limits::claim_start_limited(
                        &mut tx,
                        authority,
                        holder,
                        limit,
                        self.effects.providers(),
                    )
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
                if !rows.is_empty() {
                    crash::point(CrashPoint::InClaim);
                }
            }
            match retry.finish(tx, attempt).await {
                Ok(Some(rows)) => break Ok(rows),
                Ok(None) => continue,
                Err(e) => break Err(e),
            }
        };
        if let (Err(_), Some(authority)) = (&result, routed) {
            self.cluster.failed(authority);
        }
        match result {
            Ok(rows) => Ok(rows),
            Err(TxError::CommitUnknown(e)) => {
                tracing::warn!(error = %e, step = step.label(), "effect_started commit outcome unknown; not dispatching");
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

    /// The authorities leased now, as the claims take them until their limit
    /// is reached: all in one statement, or one per statement (each on its
    /// own shard), starting one further along at each turn so that no
    /// authority always comes last. None when nothing is leased.
    fn claim_groups(&self) -> Vec<Vec<String>> {
        let mut ids: Vec<String> = self.held().keys().cloned().collect();
        if ids.is_empty() {
            return Vec::new();
        }
        if !self.cluster.backend().claims_per_authority {
            return vec![ids];
        }
        ids.sort();
        let turn = self.claim_turn.fetch_add(1, Ordering::Relaxed);
        let first = turn % ids.len();
        ids.rotate_left(first);
        ids.into_iter().map(|id| vec![id]).collect()
    }

    /// After an unknown `effect_started` commit: rows that did become
    /// `effect_started` under our generation were never dispatched, so they
    /// are recorded `failed` (`not_dispatched`).
    pub(super) async fn close_undispatched(
        &self,
        authority: &str,
        generation: i64,
        ids: &[Uuid],
        report: &mut StepReport,
    ) {
        let rows = match db::lifecycle::reread(self.cluster.pool(), ids, authority).await {
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
        // Still prepared (adopted rows whose start did not commit): no
        // effect was attempted; the next turn starts them. (Queued rows whose
        // claim did not commit are still pending, in the queue.)
        if rows
            .iter()
            .any(|row| row.state() == CommandState::Prepared && ours(row))
        {
            self.prepared_due
                .lock()
                .expect("prepared_due lock")
                .insert(authority.to_owned());
        }
        let done: Vec<Done> = rows
            .into_iter()
            .filter(|row| row.state() == CommandState::EffectStarted && ours(row))
            .map(|row| {
                let outcome = EffectOutcome::not_dispatched(
                    "the effect_started commit was not confirmed; never dispatched",
                );
                Done {
                    authority: authority.to_owned(),
                    generation,
                    id: row.id,
                    next: self
                        .effects
                        .next_attempt(&row.kind, row.attempt(), &outcome),
                    outcome,
                    trace: row.trace(),
                }
            })
            .collect();
        self.record_outcomes(done, report).await;
    }

    /// Rebinds the authority's prepared rows of older generations to ours,
    /// a batch per transaction at the record's isolation (SERIALIZABLE
    /// unless configured otherwise), fenced on the lease just taken and
    /// retried on conflicts; the next turn starts them
    /// ([`Custodian::claim_and_start`]). An unknown commit is an error: rows
    /// it did rebind are ours and still `prepared`, so the periodic pass
    /// starts them.
    pub(super) async fn adopt(
        &self,
        authority: &str,
        generation: i64,
    ) -> Result<(), CustodianError> {
        let settings = self.transition_settings();
        loop {
            let mut retry = txn::Retrying::with_settings(
                self.cluster.pool(),
                self.cluster.backend(),
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
            if rows.iter().any(|r| r.state() == CommandState::Prepared) {
                // Prepared under our generation and committed, not started:
                // a crash here leaves them to the next generation's adoption.
                crash::point(CrashPoint::AfterPrepared);
                self.prepared_due
                    .lock()
                    .expect("prepared_due lock")
                    .insert(authority.to_owned());
            }
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
        attempt: row.attempt(),
        trace: row.trace(),
    }
}
