//! Waiting for outcomes, woken by the database: one LISTEN connection per API
//! process (channel `command_ledger_outcome`) fans out to every waiter of
//! the command in the payload. Each waiter re-reads the row when woken;
//! terminal rows never change, so every concurrent waiter gets the same
//! outcome.
//!
//! On one node a trigger sends the notification in the commit that makes a
//! command terminal. On Citus the shards' triggers cannot (docs/SCALING.md),
//! so whoever committed sends it on the coordinator right after
//! (`crate::ledger::OutcomeWake`): a process that dies between the two
//! loses it. There the listener therefore also wakes every waiter each
//! [`CITUS_FALLBACK`], and each re-reads its command by authority and id
//! (one shard).

use sqlx::PgPool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use uuid::Uuid;

use crate::db::notify::{self, Heard, OUTCOME_CHANNEL};

/// How often waiters re-read on Citus even without a notification: what a
/// lost one (its sender died between commit and NOTIFY, or SQL typed by
/// hand finished the command) costs at most. Such a death costs that
/// custodian's other commands far more (its lease, 10 s by default, must
/// lapse before recovery settles them), so a few seconds are in proportion;
/// and each tick is one read per waiter, which at 200 ms (the interval when
/// polling was the only way, p50 191 ms) made a thousand idle waiters
/// 5,000 reads a second.
pub const CITUS_FALLBACK: Duration = Duration::from_secs(5);

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

    /// Runs the process's one listener until the pool closes; on Citus it
    /// also wakes every waiter each [`CITUS_FALLBACK`].
    pub fn spawn_listener(&self, pool: PgPool) -> tokio::task::JoinHandle<()> {
        let waiters = self.clone();
        tokio::spawn(async move {
            let mut listener = notify::Listener::new(pool.clone(), OUTCOME_CHANNEL);
            // Asked once the listener has connected (the database is up then).
            let mut citus = None;
            let mut fallback = tokio::time::interval(CITUS_FALLBACK);
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
                        Some(Heard::Gap) => {
                            if citus.is_none() {
                                citus = crate::db::is_citus(&pool).await.ok();
                            }
                            waiters.wake_all();
                        }
                    },
                    // The console's streams refresh on their own clock.
                    _ = fallback.tick(), if citus == Some(true) => waiters.wake_waiting(),
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
