//! Asking a kind's reconcile probe whether a command's effect ran, for the
//! API's "probe now": the front ends see this seam, not the executors
//! (which live with the custodian and implement it).

use std::future::Future;
use std::pin::Pin;

use crate::db::CommandRow;
use crate::domain::recovery::ProbeAnswer;

/// A probe's answer, when it comes.
pub type ProbeFuture<'a> = Pin<Box<dyn Future<Output = ProbeAnswer> + Send + 'a>>;

/// Whatever can ask the reconcile probe of a command's kind.
pub trait Prober: Send + Sync + std::fmt::Debug {
    /// How long after `effect_started` an effect of `kind` may still take
    /// hold (its deadline plus its probe margin); `None`: unknown here.
    fn window(&self, kind: &str) -> Option<std::time::Duration>;

    /// `None`: this process has no probe for the command's kind.
    fn probe<'a>(&'a self, row: &'a CommandRow) -> Option<ProbeFuture<'a>>;
}
