//! Waiting for outcomes, woken by the database: one LISTEN connection per API
//! process (channel `command_ledger_outcome`) fans out to every waiter of
//! the command in the payload. Each waiter re-reads the row when woken;
//! terminal rows never change, so every concurrent waiter gets the same
//! outcome. An answer that waits for an outcome does so through [`settle`].
//!
//! On one node a trigger sends the notification in the commit that makes a
//! command terminal. On a distributed backend the shards' triggers cannot
//! (`db::Backend::outcome_notify_in_transaction`, docs/SCALING.md), so
//! whoever committed sends it on the coordinator right after
//! (`crate::ledger::OutcomeWake`): a process that dies between the two
//! loses it. There the listener therefore also wakes every waiter each
//! [`REREAD_FALLBACK`], and each re-reads its command by authority and id
//! (one shard).

use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

use super::error::ApiError;
use crate::db::Backend;
use crate::db::commands::CommandRow;
use crate::db::notify::{self, Heard, OUTCOME_CHANNEL};

/// How often waiters re-read without a notification where the commit does
/// not send it (a distributed backend): what a
/// lost one (its sender died between commit and NOTIFY, or SQL typed by
/// hand finished the command) costs at most. Such a death costs that
/// custodian's other commands far more (its lease, 10 s by default, must
/// lapse before recovery settles them), so a few seconds are in proportion;
/// and each tick is one read per waiter, which at 200 ms (the interval when
/// polling was the only way, p50 191 ms) made a thousand idle waiters
/// 5,000 reads a second.
pub const REREAD_FALLBACK: Duration = Duration::from_secs(5);

/// The registry of waiters, by command id.
#[derive(Debug, Clone, Default)]
pub struct Waiters {
    slots: Arc<Mutex<HashMap<Uuid, watch::Sender<u64>>>>,
    /// Bumped at every notification (and gap): "some command finished",
    /// for the console's live stream (`GET /v1/events`).
    finished: Arc<watch::Sender<u64>>,
}

/// One waiter's interest in one command; dropping it (the client went away)
/// unregisters it.
#[derive(Debug)]
pub struct Subscription {
    waiters: Waiters,
    id: Uuid,
    rx: watch::Receiver<u64>,
}

impl Waiters {
    /// Register before reading the row, so a change between the read and the
    /// wait is not missed.
    pub fn subscribe(&self, id: Uuid) -> Subscription {
        let mut slots = self.slots.lock().expect("waiters lock");
        let rx = slots
            .entry(id)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        Subscription {
            waiters: self.clone(),
            id,
            rx,
        }
    }

    /// Changes whenever some command became terminal (or notifications
    /// may have been missed).
    pub fn finished(&self) -> watch::Receiver<u64> {
        self.finished.subscribe()
    }

    fn wake(&self, id: Uuid) {
        self.finished.send_modify(|v| *v += 1);
        if let Some(tx) = self.slots.lock().expect("waiters lock").get(&id) {
            tx.send_modify(|v| *v += 1);
        }
    }

    /// After the listener lost its connection, notifications may be lost:
    /// every waiter re-reads.
    fn wake_all(&self) {
        self.finished.send_modify(|v| *v += 1);
        self.wake_waiting();
    }

    /// Every waiter re-reads (the console's stream is left to its own refresh).
    fn wake_waiting(&self) {
        for tx in self.slots.lock().expect("waiters lock").values() {
            tx.send_modify(|v| *v += 1);
        }
    }

    /// Runs the process's one listener until the pool closes; where the
    /// commit sends no notification it also wakes every waiter each
    /// [`REREAD_FALLBACK`].
    pub fn spawn_listener(&self, pool: PgPool, backend: Backend) -> tokio::task::JoinHandle<()> {
        let waiters = self.clone();
        tokio::spawn(async move {
            let mut listener = notify::Listener::new(pool, OUTCOME_CHANNEL);
            let fallback_on = !backend.outcome_notify_in_transaction;
            let mut fallback = tokio::time::interval(REREAD_FALLBACK);
            fallback.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    heard = listener.recv() => match heard {
                        None => return,
                        Some(Heard::Notified(payload)) => match Uuid::parse_str(&payload) {
                            Ok(id) => waiters.wake(id),
                            Err(_) => {
                                tracing::warn!(payload, "unexpected outcome notification");
                            }
                        },
                        // Anything that finished while we were not listening.
                        Some(Heard::Gap) => waiters.wake_all(),
                    },
                    // The console's streams refresh on their own clock.
                    _ = fallback.tick(), if fallback_on => waiters.wake_waiting(),
                }
            }
        })
    }
}

impl Subscription {
    /// Resolves at the next wake-up for this command.
    pub async fn changed(&mut self) {
        // The sender lives as long as any subscription, so this cannot fail.
        let _ = self.rx.changed().await;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut slots = self.waiters.slots.lock().expect("waiters lock");
        // Our receiver is still alive here: the last one out sees a count of 1.
        if slots
            .get(&self.id)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            slots.remove(&self.id);
        }
    }
}

/// Waits up to `wait` for `row` (one the caller may see) to become
/// terminal, for an answer that waits (`Prefer: wait`, `?wait=`). Registers
/// interest before re-reading, so an outcome between the read and the wait
/// is not missed; wakes on notifications (and where the commit sends none,
/// every [`REREAD_FALLBACK`]). Re-reads by authority and id, so that on a
/// distributed backend it asks one shard. Returns the row as it is when the wait ends, and the
/// wait applied.
///
/// With [`Follow::Chain`] (what a key, an intent and an invocation
/// answer), a failure the ledger retries is not the end: the answer is the
/// chain's last attempt (`db::attempts::later_attempt`), and the wait goes on
/// for it.
pub(super) async fn settle(
    state: &super::AppState,
    row: CommandRow,
    wait: Option<Duration>,
    follow: Follow,
) -> Result<(CommandRow, Option<Duration>), ApiError> {
    let row = follow.apply(state, row).await?;
    let Some(wait) = wait.filter(|w| !w.is_zero()) else {
        return Ok((row, None));
    };
    if row.state().is_terminal() {
        return Ok((row, Some(wait)));
    }
    let deadline = tokio::time::Instant::now() + wait;
    let mut row = row;
    let mut subscription = state.waiters.subscribe(row.id);
    loop {
        let current = reread(state, &row.authority_id, row.id)
            .await?
            .ok_or(ApiError::NotFound)?;
        if current.state().is_terminal() {
            let next = follow.apply(state, current).await?;
            if next.id == row.id {
                return Ok((next, Some(wait)));
            }
            // Retried: wait on for the next attempt (registered before
            // it is read again).
            subscription = state.waiters.subscribe(next.id);
            row = next;
            continue;
        }
        tokio::select! {
            () = subscription.changed() => {}
            () = tokio::time::sleep_until(deadline) => {
                let last = reread(state, &row.authority_id, row.id).await?.ok_or(ApiError::NotFound)?;
                return Ok((last, Some(wait)));
            }
        }
    }
}

/// What an answer that waits stops at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Follow {
    /// The command asked for (`GET /v1/commands/{id}`).
    Row,
    /// Its attempt chain's last attempt (a submission, an invocation).
    Chain,
}

impl Follow {
    async fn apply(self, state: &super::AppState, row: CommandRow) -> Result<CommandRow, ApiError> {
        match self {
            Follow::Row => Ok(row),
            Follow::Chain => Ok(crate::db::attempts::later_attempt(state.pool(), &row)
                .await?
                .unwrap_or(row)),
        }
    }
}

/// Command `id` of `authority` as it is now. Where the shards live on other
/// nodes, read on the node holding them (a hop fewer than through the
/// coordinator: 0.1 ms against 0.45 ms with `pgbench`,
/// docs/SCALING.md, Waiting), and through the coordinator when that
/// read fails (the route is then asked again): [`crate::db::Cluster::reread_command`].
async fn reread(
    state: &super::AppState,
    authority: &str,
    id: Uuid,
) -> Result<Option<CommandRow>, sqlx::Error> {
    state.db.reread_command(authority, id).await
}
