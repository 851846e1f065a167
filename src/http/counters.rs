//! What this API process counts of the submissions it answers (requests
//! by outcome), in memory, and adds to the ledger's durable counts
//! (`ledger_counts`, migration 0017) every [`FLUSH_INTERVAL`], and before
//! a read of the counters (`GET /v1/state`): a crash loses at most the last
//! interval of request counts, never a command.

use sqlx::PgPool;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::error::ApiError;
use crate::db;
use crate::domain::Disposition;

/// How often a process adds its request counts to the ledger's.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// How often a process offers to fold finished minutes (one process does).
const COMPACT_INTERVAL: Duration = Duration::from_secs(60);

/// The request counters, in the order of [`Counters::all`], as named in
/// `ledger_counts.counter`.
pub const REQUEST_COUNTERS: [&str; 7] = [
    "requests",
    "new",
    "replay",
    "coalesced",
    "held",
    "conflict",
    "refused",
];

/// Submissions seen by this process, by what became of them; and, per
/// counter, what is not yet added to the ledger's counts.
#[derive(Debug)]
pub struct Counters {
    pub requests: AtomicU64,
    pub new: AtomicU64,
    pub replay: AtomicU64,
    pub coalesced: AtomicU64,
    pub held: AtomicU64,
    pub conflict: AtomicU64,
    pub refused: AtomicU64,
    /// Counted here, not yet in `ledger_counts` (by [`REQUEST_COUNTERS`]).
    unflushed: [AtomicU64; 7],
    /// This process's `ledger_counts.source`: `api:<uuid>`, new at each start.
    source: String,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            requests: AtomicU64::default(),
            new: AtomicU64::default(),
            replay: AtomicU64::default(),
            coalesced: AtomicU64::default(),
            held: AtomicU64::default(),
            conflict: AtomicU64::default(),
            refused: AtomicU64::default(),
            unflushed: Default::default(),
            source: format!("api:{}", uuid::Uuid::now_v7()),
        }
    }
}

impl Counters {
    fn all(&self) -> [&AtomicU64; 7] {
        [
            &self.requests,
            &self.new,
            &self.replay,
            &self.coalesced,
            &self.held,
            &self.conflict,
            &self.refused,
        ]
    }

    fn bump(&self, counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
        let i = self
            .all()
            .iter()
            .position(|c| std::ptr::eq(*c, counter))
            .expect("one of this process's counters");
        self.unflushed[i].fetch_add(n, Ordering::Relaxed);
    }

    /// `n` more submissions received (a batch's items count one each).
    pub(super) fn requests(&self, n: u64) {
        self.bump(&self.requests, n);
    }

    pub(super) fn count(&self, d: Disposition) {
        let counter = match d {
            Disposition::New => &self.new,
            Disposition::Replay => &self.replay,
            Disposition::Coalesced => &self.coalesced,
            Disposition::Held => &self.held,
            Disposition::Conflict => &self.conflict,
        };
        self.bump(counter, 1);
    }

    pub(super) fn refused(&self, e: &ApiError) {
        let counter = match e {
            ApiError::KeyConflict { .. } => &self.conflict,
            _ => &self.refused,
        };
        self.bump(counter, 1);
    }

    /// Adds what this process counted since the last flush to the ledger's
    /// counts. On failure the counts are kept for the next attempt.
    pub async fn flush(&self, pool: &PgPool) -> Result<(), sqlx::Error> {
        let taken: Vec<u64> = self
            .unflushed
            .iter()
            .map(|c| c.swap(0, Ordering::Relaxed))
            .collect();
        if taken.iter().all(|n| *n == 0) {
            return Ok(());
        }
        let deltas: Vec<(&str, i64)> = REQUEST_COUNTERS
            .iter()
            .zip(&taken)
            .map(|(c, n)| (*c, i64::try_from(*n).unwrap_or(i64::MAX)))
            .collect();
        let added = db::counts::add(pool, &self.source, &deltas).await;
        if added.is_err() {
            for (c, n) in self.unflushed.iter().zip(taken) {
                c.fetch_add(n, Ordering::Relaxed);
            }
        }
        added
    }

    /// Flushes every [`FLUSH_INTERVAL`] (and folds finished minutes about
    /// once a minute) for as long as the process runs.
    pub fn spawn_flusher(self: &Arc<Self>, pool: PgPool) {
        let counters = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_compact = tokio::time::Instant::now();
            loop {
                tick.tick().await;
                let Some(counters) = counters.upgrade() else {
                    return;
                };
                if let Err(e) = counters.flush(&pool).await {
                    tracing::warn!(error = %e, "request counts not added to the ledger yet; kept for the next flush");
                }
                if last_compact.elapsed() >= COMPACT_INTERVAL {
                    last_compact = tokio::time::Instant::now();
                    if let Err(e) = db::counts::compact(&pool).await {
                        tracing::warn!(error = %e, "folding the ledger's counts failed; will try again");
                    }
                }
            }
        });
    }
}
