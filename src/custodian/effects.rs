//! Effects: what a command does in the world. A Rust trait for in-process
//! handlers (library users register one per kind), the configured HTTP
//! executor, and the built-in `noop`.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument as _;
use uuid::Uuid;

use crate::domain::EffectOutcome;
use crate::domain::limits::ProviderLimit;
use crate::domain::recovery::ProbeAnswer;
use crate::domain::retry::{NextAttempt, RetryPolicy, next_attempt};
use crate::domain::trace_context::TraceContext;

/// Everything an executor needs to run one command.
#[derive(Debug, Clone)]
pub struct EffectCall {
    pub command_id: Uuid,
    pub kind: String,
    pub authority: String,
    /// The fencing token: a sink may refuse a generation older than one it saw.
    pub generation: i64,
    pub args: Value,
    /// Stable across any retry of the same command: derived from its id.
    pub downstream_key: String,
    /// Which attempt of its chain this command is: 1, or more for an attempt
    /// the ledger scheduled after a failure with nothing done
    /// (`domain::retry`). Sent to an HTTP provider as `Ledger-Command-Attempt`.
    pub attempt: u32,
    /// The trace context the command was submitted with: the effect's span
    /// joins it and the provider's request carries it on.
    pub trace: Option<TraceContext>,
}

impl EffectCall {
    /// The idempotency key a downstream provider sees for a command.
    pub fn downstream_key_for(command_id: Uuid) -> String {
        format!("cl-{command_id}")
    }
}

pub type EffectFuture<'a> = Pin<Box<dyn Future<Output = EffectOutcome> + Send + 'a>>;
pub type ProbeFuture<'a> = Pin<Box<dyn Future<Output = ProbeAnswer> + Send + 'a>>;

/// An executor. It must answer honestly: `Applied` only when the effect
/// happened, `Failed` only when it certainly did not, `Ambiguous` otherwise.
/// The custodian enforces the deadline around it (a timeout is ambiguous).
pub trait Effect: Send + Sync + fmt::Debug {
    fn execute<'a>(&'a self, call: &'a EffectCall) -> EffectFuture<'a>;

    /// The reconcile probe, for executors that can tell whether an effect
    /// with this call's downstream key ran. Recovery asks it about commands
    /// whose executor vanished after `effect_started`; without one, such a
    /// command is `ambiguous`.
    fn reconcile<'a>(&'a self, _call: &'a EffectCall) -> Option<ProbeFuture<'a>> {
        None
    }
}

/// The built-in `noop` kind: applied at once, for demos and benchmarks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Noop;

impl Effect for Noop {
    fn execute<'a>(&'a self, call: &'a EffectCall) -> EffectFuture<'a> {
        Box::pin(async move {
            EffectOutcome::Applied(json!({"noop": true, "key": call.downstream_key}))
        })
    }
}

/// An executor, its deadline, and how much longer a dispatched effect may
/// still take hold at the provider.
#[derive(Debug, Clone)]
pub struct Registered {
    pub effect: Arc<dyn Effect>,
    pub timeout: Duration,
    /// Added to `timeout` before a probe's "not found" counts as "not
    /// applied" (`domain::recovery::weigh`): the request's way to the
    /// provider and the provider's own queue.
    pub probe_margin: Duration,
    /// Retries of its failures with nothing done, if any.
    pub retry: Option<RetryPolicy>,
}

impl Registered {
    /// How long after `effect_started` the effect may still take hold.
    pub fn window(&self) -> Duration {
        self.timeout.saturating_add(self.probe_margin)
    }
}

/// Executors by kind, and the limits per provider they run under.
#[derive(Debug, Clone)]
pub struct Effects {
    by_kind: HashMap<String, Registered>,
    providers: Vec<ProviderLimit>,
}

/// Deadline of an effect when the catalog gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The probe margin when the catalog gives none (`probe_margin`).
pub const DEFAULT_PROBE_MARGIN: Duration = Duration::from_secs(10);

impl Default for Effects {
    fn default() -> Self {
        let mut effects = Effects {
            by_kind: HashMap::new(),
            providers: Vec::new(),
        };
        effects.register("noop", Noop, DEFAULT_TIMEOUT);
        effects
    }
}

impl Effects {
    /// `effect` runs `kind` under `timeout`, with the default probe margin.
    pub fn register(&mut self, kind: &str, effect: impl Effect + 'static, timeout: Duration) {
        self.register_with_margin(kind, effect, timeout, DEFAULT_PROBE_MARGIN);
    }

    /// [`Effects::register`] with a probe margin of its own.
    pub fn register_with_margin(
        &mut self,
        kind: &str,
        effect: impl Effect + 'static,
        timeout: Duration,
        probe_margin: Duration,
    ) {
        self.by_kind.insert(
            kind.to_owned(),
            Registered {
                effect: Arc::new(effect),
                timeout,
                probe_margin,
                retry: None,
            },
        );
    }

    /// Failures of `kind` with nothing done are retried under `policy`
    /// (`domain::retry`). A kind not registered is left alone.
    pub fn retry(&mut self, kind: &str, policy: RetryPolicy) {
        if let Some(registered) = self.by_kind.get_mut(kind) {
            registered.retry = Some(policy);
        }
    }

    /// The limits per provider the custodian writes to the database when it
    /// starts (`domain::limits`), replacing any it held before.
    pub fn limit_providers(&mut self, providers: Vec<ProviderLimit>) {
        self.providers = providers;
    }

    /// The limits per provider.
    pub fn providers(&self) -> &[ProviderLimit] {
        &self.providers
    }

    /// The attempt to schedule after attempt `attempt` of `kind` ended in
    /// `outcome`, under the kind's retry policy (none: nothing follows).
    pub fn next_attempt(
        &self,
        kind: &str,
        attempt: u32,
        outcome: &EffectOutcome,
    ) -> Option<NextAttempt> {
        let policy = self.get(kind)?.retry.as_ref()?;
        // The jitter's draw: 53 random bits as a fraction in [0, 1).
        let bits = Uuid::new_v4().as_u128() >> 75;
        let draw = bits as f64 / (1u64 << 53) as f64;
        next_attempt(Some(policy), attempt, outcome, draw)
    }

    pub fn get(&self, kind: &str) -> Option<&Registered> {
        self.by_kind.get(kind)
    }

    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.by_kind.keys().map(String::as_str)
    }
}

impl crate::ledger::probe::Prober for Effects {
    fn window(&self, kind: &str) -> Option<Duration> {
        self.get(kind).map(Registered::window)
    }

    fn probe<'a>(
        &'a self,
        row: &'a crate::db::CommandRow,
    ) -> Option<crate::ledger::probe::ProbeFuture<'a>> {
        let registered = self.get(&row.kind)?;
        let call = EffectCall {
            command_id: row.id,
            kind: row.kind.clone(),
            authority: row.authority_id.clone(),
            generation: row.authority_generation.unwrap_or(0),
            args: row.args.clone(),
            downstream_key: EffectCall::downstream_key_for(row.id),
            attempt: row.attempt(),
            trace: row.trace(),
        };
        Some(Box::pin(async move {
            match registered.effect.reconcile(&call) {
                Some(probe) => probe.await,
                None => {
                    ProbeAnswer::Unknown("the kind's executor has no reconcile probe".to_owned())
                }
            }
        }))
    }
}

/// Runs one call under its deadline. A missing executor is a definite
/// failure (nothing was dispatched); a deadline reached is ambiguous.
pub async fn run_effect(effects: &Effects, call: &EffectCall) -> EffectOutcome {
    let Some(registered) = effects.get(&call.kind) else {
        return EffectOutcome::Failed {
            reason: "not_dispatched",
            detail: json!(format!(
                "no executor is configured for kind {:?}",
                call.kind
            )),
        };
    };
    // The executor runs in a task of its own, so that a panicking handler
    // becomes an honest outcome instead of a row stuck in effect_started;
    // the task stays in the caller's span (the custodian's `effect` span),
    // so the handler's log lines name its command.
    let effect = Arc::clone(&registered.effect);
    let owned = call.clone();
    let task = tokio::spawn(async move { effect.execute(&owned).await }.in_current_span());
    let abort = task.abort_handle();
    match tokio::time::timeout(registered.timeout, task).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) => EffectOutcome::Ambiguous {
            reason: "executor_panicked",
            detail: json!(format!("the executor failed while running: {e}")),
        },
        Err(_) => {
            abort.abort();
            crate::domain::classify_http(crate::domain::HttpAttempt::TimedOut)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Panics;

    impl Effect for Panics {
        fn execute<'a>(&'a self, _call: &'a EffectCall) -> EffectFuture<'a> {
            Box::pin(async { panic!("handler bug") })
        }
    }

    #[derive(Debug)]
    struct Sleeps;

    impl Effect for Sleeps {
        fn execute<'a>(&'a self, _call: &'a EffectCall) -> EffectFuture<'a> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                EffectOutcome::Applied(Value::Null)
            })
        }
    }

    fn call(kind: &str) -> EffectCall {
        let id = Uuid::now_v7();
        EffectCall {
            command_id: id,
            kind: kind.to_owned(),
            authority: "a".to_owned(),
            generation: 1,
            args: json!({}),
            downstream_key: EffectCall::downstream_key_for(id),
            attempt: 1,
            trace: None,
        }
    }

    #[tokio::test]
    async fn a_panicking_handler_is_ambiguous_not_a_crash() {
        let mut effects = Effects::default();
        effects.register("boom", Panics, Duration::from_secs(1));
        let outcome = run_effect(&effects, &call("boom")).await;
        assert_eq!(outcome.state(), crate::domain::CommandState::Ambiguous);
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_past_its_deadline_is_ambiguous() {
        let mut effects = Effects::default();
        effects.register("slow", Sleeps, Duration::from_secs(2));
        let outcome = run_effect(&effects, &call("slow")).await;
        assert_eq!(outcome.columns().1.unwrap()["reason"], "timeout");
    }

    #[tokio::test]
    async fn noop_applies_and_unknown_kinds_are_not_dispatched() {
        let effects = Effects::default();
        assert_eq!(
            run_effect(&effects, &call("noop")).await.state(),
            crate::domain::CommandState::Applied
        );
        let outcome = run_effect(&effects, &call("refund")).await;
        assert_eq!(outcome.columns().1.unwrap()["reason"], "not_dispatched");
    }
}
