//! Asking a kind's reconcile probe whether a command's effect ran, for the
//! API's "probe now": the front ends see this seam, not the executors
//! (which live with the custodian and implement it).

use chrono::{DateTime, Utc};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::db::CommandRow;
use crate::domain::recovery::{EffectWindow, ProbeAnswer, Verdict, weigh};

/// A probe's answer, when it comes.
pub type ProbeFuture<'a> = Pin<Box<dyn Future<Output = ProbeAnswer> + Send + 'a>>;

/// Whatever can ask the reconcile probe of a command's kind.
pub trait Prober: Send + Sync + std::fmt::Debug {
    /// How long after `effect_started` an effect of `kind` may still take
    /// hold (its deadline plus its probe margin); `None`: unknown here.
    fn window(&self, kind: &str) -> Option<Duration>;

    /// `None`: this process has no probe for the command's kind.
    fn probe<'a>(&'a self, row: &'a CommandRow) -> Option<ProbeFuture<'a>>;
}

/// Weighs a probe's answer about an effect recorded `effect_started` at
/// `started_at` (unknown: taken as `read_at`, the whole window ahead) that
/// may take hold for `lasts` (unknown: for ever), by the database's clock:
/// `read_at`, read with the row, carried forward by this process's monotonic
/// clock since `asked` (so never later than the database's own). Recovery and
/// "probe now" both decide here.
pub fn weigh_by_database_clock(
    answer: ProbeAnswer,
    started_at: Option<DateTime<Utc>>,
    lasts: Option<Duration>,
    read_at: DateTime<Utc>,
    asked: Instant,
) -> (Verdict, EffectWindow) {
    let window = EffectWindow {
        started_at: started_at.unwrap_or(read_at),
        lasts: lasts.unwrap_or(Duration::MAX),
    };
    let now = read_at + chrono::Duration::from_std(asked.elapsed()).unwrap_or_default();
    (weigh(answer, window, now), window)
}
