//! Recovery's thin executor: reads candidates page by page, asks the pure
//! `domain::recovery::decide`, and applies each decision with a guarded
//! statement. Run once by `command-ledger recover` (for cron after a crash)
//! and periodically inside every custodian. Never re-executes an effect.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use uuid::Uuid;

use super::effects::{EffectCall, Effects};
use crate::db::txn::{self, Isolation, Retrying, TxError};
use crate::db::{self, recovery::Candidate};
use crate::domain::recovery::{Decision, Facts, ProbeAnswer, Verdict, decide};
use crate::domain::retry::NextAttempt;
use crate::domain::{CommandState, EffectOutcome};
use crate::ledger::OutcomeWake;
use crate::ledger::probe::weigh_by_database_clock;

/// Most candidates read per page.
pub const PAGE: i64 = 200;

/// What one recovery pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub examined: usize,
    pub expired: usize,
    pub adopted: usize,
    /// Resolved by the probe as applied.
    pub applied: usize,
    /// Resolved by the probe as not applied.
    pub failed: usize,
    pub ambiguous: usize,
    /// Left `effect_started`: the probe found no effect yet, but one
    /// dispatched may still take hold until its window closes (its deadline
    /// plus the kind's probe margin); asked again on a later pass.
    pub waiting: usize,
    /// Decisions whose guarded write found the row changed meanwhile.
    pub skipped: usize,
}

/// Where a pass has got to: the claimed commands first, by id, then the
/// pending ones past their deadline, by deadline (each read through its own
/// index, so a pass costs what needs deciding, not the backlog).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Cursor {
    #[default]
    Start,
    /// Claimed commands after this id.
    Claimed(Uuid),
    /// Overdue pending commands after this deadline and id (from the first).
    Overdue(Option<(DateTime<Utc>, Uuid)>),
    Done,
}

/// A candidate and the decision about it, between the read and the write.
#[derive(Debug, Clone)]
pub struct Planned {
    pub candidate: Candidate,
    pub decision: Decision,
}

#[derive(Debug)]
pub struct Recovery {
    pool: PgPool,
    effects: Arc<Effects>,
    actor: String,
    /// Inside a custodian: only its own authorities, whose executors (and
    /// their reconcile probes) it has. `None`: every authority.
    authorities: Option<Vec<String>>,
    /// Serialization conflicts retried by the guarded writes.
    retries: AtomicU64,
    /// Wakes the waiters of the commands it makes terminal (after each
    /// commit, where the commit itself does not).
    outcomes: OutcomeWake,
    backend: db::Backend,
    /// Inside a custodian: its writes' idle limit, the lease TTL
    /// ([`txn::IDLE_IN_TRANSACTION`]). `None`: the server's.
    idle_limit: Option<String>,
}

impl Recovery {
    /// Recovery on `pool`, whose database is `backend`.
    pub fn new(pool: PgPool, backend: db::Backend, effects: Arc<Effects>, actor: String) -> Self {
        Recovery {
            outcomes: OutcomeWake::new(pool.clone(), backend),
            backend,
            pool,
            effects,
            actor,
            authorities: None,
            retries: AtomicU64::new(0),
            idle_limit: None,
        }
    }

    /// Its writes' transactions end when idle longer than `limit`
    /// ([`txn::IDLE_IN_TRANSACTION`]): a custodian's lease TTL.
    pub fn idle_in_transaction(mut self, limit: std::time::Duration) -> Self {
        self.idle_limit = Some(txn::idle_limit(limit));
        self
    }

    /// Only these authorities' commands.
    pub fn for_authorities(mut self, authorities: Vec<String>) -> Self {
        self.authorities = Some(authorities);
        self
    }

    /// Serialization conflicts retried so far by this recovery's writes.
    pub fn serialization_retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// One guarded write at SERIALIZABLE, retried on conflicts: what it
    /// read (the row's state, the authority's lease and generation) is still
    /// true when it commits, or it did not commit. Unknown or exhausted: the
    /// row is examined again on the next pass, where the guard decides
    /// afresh; nothing is re-executed.
    async fn guarded(&self, write: &Write<'_>) -> Result<bool, sqlx::Error> {
        let what = write.name();
        let mut settings = vec![(txn::ACTOR, self.actor.as_str())];
        if let Some(limit) = &self.idle_limit {
            settings.push((txn::IDLE_IN_TRANSACTION, limit.as_str()));
        }
        let mut retry = Retrying::with_settings(
            &self.pool,
            self.backend,
            &self.retries,
            what,
            Isolation::Serializable,
            &settings,
        );
        let answer = loop {
            let mut tx = match retry.next_attempt().await {
                Ok(tx) => tx,
                Err(e) => break Err(e),
            };
            let attempt = write.run(&mut tx).await;
            match retry.finish(tx, attempt).await {
                Ok(None) => continue,
                done => break done.map(|d| d.unwrap_or(false)),
            }
        };
        match answer {
            Ok(done) => Ok(done),
            Err(TxError::Failed(e)) => Err(e),
            Err(e) => {
                tracing::warn!(what, error = %e, "recovery write not confirmed; left for the next pass");
                Ok(false)
            }
        }
    }

    /// One full pass over every candidate.
    pub async fn run_once(&self) -> Result<RecoveryReport, sqlx::Error> {
        let mut report = RecoveryReport::default();
        let mut cursor = Cursor::Start;
        while cursor != Cursor::Done {
            let (planned, next) = self.plan(cursor, PAGE).await?;
            self.apply(planned, &mut report).await?;
            cursor = next;
        }
        if report != RecoveryReport::default() {
            tracing::info!(?report, "recovery pass");
        }
        Ok(report)
    }

    /// Reads the page of candidates at `cursor` and decides about each;
    /// returns the plan and the cursor of the next page.
    pub async fn plan(
        &self,
        cursor: Cursor,
        limit: i64,
    ) -> Result<(Vec<Planned>, Cursor), sqlx::Error> {
        let authorities = self.authorities.as_deref();
        let full = |rows: &[Candidate]| rows.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
        let (rows, next) = match cursor {
            Cursor::Start | Cursor::Claimed(_) => {
                let after = match cursor {
                    Cursor::Claimed(id) => Some(id),
                    _ => None,
                };
                let rows = db::recovery::claimed(&self.pool, after, limit, authorities).await?;
                let next = match rows.last() {
                    Some(last) if full(&rows) => Cursor::Claimed(last.id),
                    _ => Cursor::Overdue(None),
                };
                (rows, next)
            }
            Cursor::Overdue(after) => {
                let rows = db::recovery::overdue(&self.pool, after, limit, authorities).await?;
                let next = match rows.last() {
                    Some(last) if full(&rows) => match last.deadline_at {
                        Some(deadline) => Cursor::Overdue(Some((deadline, last.id))),
                        None => Cursor::Done,
                    },
                    _ => Cursor::Done,
                };
                (rows, next)
            }
            Cursor::Done => (Vec::new(), Cursor::Done),
        };
        let planned = rows
            .into_iter()
            .filter_map(|candidate| {
                let state: CommandState = candidate.state.parse().ok()?;
                let decision = decide(&Facts {
                    state,
                    generation: candidate.authority_generation,
                    pinned_generation: candidate.pinned_generation,
                    deadline_passed: candidate.deadline_passed,
                    current_generation: candidate.current_generation,
                    lease_live: candidate.lease_live,
                });
                Some(Planned {
                    candidate,
                    decision,
                })
            })
            .collect();
        Ok((planned, next))
    }

    /// Applies planned decisions, each guarded on what was read.
    pub async fn apply(
        &self,
        planned: Vec<Planned>,
        report: &mut RecoveryReport,
    ) -> Result<(), sqlx::Error> {
        for Planned {
            candidate: c,
            decision,
        } in planned
        {
            report.examined += 1;
            let done = match decision {
                Decision::Leave => continue,
                Decision::Expire(reason) => {
                    let ok = self
                        .guarded(&Write::Expire {
                            id: c.id,
                            authority: &c.authority_id,
                            state: &c.state,
                            generation: c.authority_generation,
                            reason,
                        })
                        .await?;
                    report.expired += usize::from(ok);
                    if ok {
                        self.outcomes.finished(&[c.id]).await;
                    }
                    ok
                }
                Decision::Adopt { to_generation } => {
                    let Some(from) = c.authority_generation else {
                        continue;
                    };
                    let ok = self
                        .guarded(&Write::Adopt {
                            id: c.id,
                            authority: &c.authority_id,
                            from,
                            to: to_generation,
                        })
                        .await?;
                    report.adopted += usize::from(ok);
                    ok
                }
                Decision::Resolve => {
                    let Some(generation) = c.authority_generation else {
                        continue;
                    };
                    let Some(outcome) = self.resolution(&c, generation).await else {
                        report.waiting += 1;
                        continue;
                    };
                    let (result, error) = outcome.columns();
                    // The probe's certain "not applied" is a failure with
                    // nothing done: retried as the kind's policy says (the
                    // engine step writes nothing where the backend does
                    // not record attempts).
                    let next = self.effects.next_attempt(&c.kind, c.attempt(), &outcome);
                    let ok = self
                        .guarded(&Write::Resolve {
                            id: c.id,
                            authority: &c.authority_id,
                            generation,
                            state: outcome.state().as_str(),
                            result: result.as_ref(),
                            error: error.as_ref(),
                            next,
                        })
                        .await?;
                    if ok {
                        self.outcomes.finished(&[c.id]).await;
                        match outcome.state() {
                            CommandState::Applied => report.applied += 1,
                            CommandState::Failed => report.failed += 1,
                            _ => report.ambiguous += 1,
                        }
                        tracing::warn!(command.id = %c.id, authority = %c.authority_id, generation, state = %outcome.state(), "recovery resolved a command whose executor vanished");
                    }
                    ok
                }
            };
            if !done {
                report.skipped += 1;
                tracing::debug!(command.id = %c.id, ?decision, "row changed since it was read; left as it is");
            }
        }
        Ok(())
    }

    /// Asks the executor's probe, if it has one; otherwise, or without a
    /// definite answer, the command is ambiguous. `None`: the probe found
    /// nothing, but the effect may still take hold (its window is open), so
    /// nothing is concluded yet.
    async fn resolution(&self, c: &Candidate, generation: i64) -> Option<EffectOutcome> {
        let call = EffectCall {
            command_id: c.id,
            kind: c.kind.clone(),
            authority: c.authority_id.clone(),
            generation,
            args: c.args.clone(),
            downstream_key: EffectCall::downstream_key_for(c.id),
            attempt: c.attempt(),
            trace: crate::domain::trace_context::TraceContext::from_headers(
                c.trace_parent.as_deref(),
                c.trace_state.as_deref(),
            ),
        };
        let asked = std::time::Instant::now();
        let registered = self.effects.get(&c.kind);
        let answer = match registered.and_then(|r| r.effect.reconcile(&call)) {
            Some(probe) => probe.await,
            None => ProbeAnswer::Unknown("no reconcile probe for this kind".to_owned()),
        };
        let lasts = registered.map(super::effects::Registered::window);
        let (verdict, _) =
            weigh_by_database_clock(answer, c.effect_started_at, lasts, c.read_at, asked);
        match verdict {
            Verdict::Applied(result) => Some(EffectOutcome::Applied(result)),
            Verdict::NotApplied => Some(EffectOutcome::Failed {
                reason: "not_applied",
                detail: json!(
                    "the executor vanished after effect_started; the reconcile probe says the effect did not run, and its deadline has passed"
                ),
            }),
            Verdict::NotYet { ask_again_at } => {
                tracing::info!(command.id = %c.id, authority = %c.authority_id, %ask_again_at,
                    "the reconcile probe found no effect yet, but the dispatched effect may still take hold until its deadline plus the kind's probe margin; left effect_started, asked again later");
                None
            }
            Verdict::Unknown(why) => Some(EffectOutcome::Ambiguous {
                reason: "executor_lost",
                detail: json!(format!(
                    "the executor vanished after effect_started; nobody can tell whether the effect ran ({why})"
                )),
            }),
        }
    }
}

/// Recovery's guarded writes, each a compare-and-set on what was read.
enum Write<'a> {
    Expire {
        id: Uuid,
        authority: &'a str,
        state: &'a str,
        generation: Option<i64>,
        reason: &'a str,
    },
    Adopt {
        id: Uuid,
        authority: &'a str,
        from: i64,
        to: i64,
    },
    Resolve {
        id: Uuid,
        authority: &'a str,
        generation: i64,
        state: &'a str,
        next: Option<NextAttempt>,
        result: Option<&'a serde_json::Value>,
        error: Option<&'a serde_json::Value>,
    },
}

impl Write<'_> {
    fn name(&self) -> &'static str {
        match self {
            Write::Expire { .. } => "expire",
            Write::Adopt { .. } => "adopt",
            Write::Resolve { .. } => "resolve",
        }
    }

    async fn run(&self, conn: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
        match *self {
            Write::Expire {
                id,
                authority,
                state,
                generation,
                reason,
            } => db::recovery::expire(conn, id, authority, state, generation, reason).await,
            Write::Adopt {
                id,
                authority,
                from,
                to,
            } => db::recovery::adopt(conn, id, authority, from, to).await,
            Write::Resolve {
                id,
                authority,
                generation,
                state,
                result,
                error,
                next,
            } => {
                db::recovery::resolve(conn, id, authority, generation, state, result, error, next)
                    .await
            }
        }
    }
}
