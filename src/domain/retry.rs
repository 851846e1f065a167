//! Retries of failures that certainly did not happen: which failures earn
//! another attempt, and when it runs.
//!
//! - **Only what did not happen.** An attempt is retried only when it
//!   failed with nothing done: not dispatched (nothing was sent), or an
//!   answer that the provider's contract says means "not applied" (statuses
//!   listed per kind, optionally narrowed by an error field of the answer).
//!   An `ambiguous` outcome is never retried, whatever the policy: nobody
//!   knows whether it took effect. A refusal (`rejected`) is not retried
//!   either: the provider answered, and the answer stands.
//! - **The wait.** Attempt `n` (the first is 1) that failed waits
//!   `initial_interval x coefficient^(n-1)`, at most `max_interval`, spread
//!   by `jitter` (a fraction: 0.2 draws within 20 % either side), and never
//!   less than the provider's `Retry-After`.
//! - **The bound.** At most `max_attempts` attempts, and none that would
//!   start after the chain's deadline (the command's, tightened to the
//!   first attempt's creation plus the policy's `deadline`).
//!
//! Each attempt is a command of its own (`docs/concepts/retries.md`); this
//! module only decides, from the policy, the attempt that failed, the
//! provider's `Retry-After` and a random draw.

use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

use super::EffectOutcome;

/// The reason of a failure whose answer the kind's contract says means
/// "not applied".
pub const NOT_APPLIED: &str = "not_applied";
/// The reason of a failure before anything was sent.
pub const NOT_DISPATCHED: &str = "not_dispatched";

/// The most attempts a policy may allow.
pub const MAX_ATTEMPTS: u32 = 100;

/// Which provider answers mean "not applied", by the kind's contract.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotAppliedContract {
    /// Statuses that mean "not applied" (e.g. 429, 503).
    pub statuses: Vec<u16>,
    /// A JSON pointer into the answer (`/error/code`): when set, a listed
    /// status means "not applied" only if the value there is one of
    /// `error_values`.
    pub error_field: Option<String>,
    pub error_values: Vec<String>,
}

impl NotAppliedContract {
    /// Whether an answer with this status and body means "not applied".
    pub fn says_not_applied(&self, status: u16, body: &Value) -> bool {
        if !self.statuses.contains(&status) {
            return false;
        }
        let Some(pointer) = &self.error_field else {
            return true;
        };
        match body.pointer(pointer) {
            Some(Value::String(s)) => self.error_values.iter().any(|v| v == s),
            Some(other @ (Value::Number(_) | Value::Bool(_))) => {
                let text = other.to_string();
                self.error_values.contains(&text)
            }
            _ => false,
        }
    }
}

/// A kind's retry policy (catalog `[kinds.<kind>.retry]`).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1, at most
    /// [`MAX_ATTEMPTS`]).
    pub max_attempts: u32,
    pub initial_interval: Duration,
    /// At least 1.
    pub coefficient: f64,
    pub max_interval: Duration,
    /// No attempt starts later than this after the first was recorded.
    pub deadline: Option<Duration>,
    /// 0 to 1: the fraction of each wait drawn at random either side.
    pub jitter: f64,
    pub contract: NotAppliedContract,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_interval: Duration::from_secs(1),
            coefficient: 2.0,
            max_interval: Duration::from_secs(60),
            deadline: None,
            jitter: 0.2,
            contract: NotAppliedContract::default(),
        }
    }
}

/// Why a retry policy is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("max_attempts {0} is outside 1..={MAX_ATTEMPTS}")]
    Attempts(u32),
    #[error("coefficient {0} is not a number of at least 1")]
    Coefficient(f64),
    #[error("jitter {0} is not a fraction from 0 to 1")]
    Jitter(f64),
    #[error("max_interval is shorter than initial_interval")]
    Intervals,
    #[error("status {0} is a success, not a failure")]
    Success(u16),
    #[error("error_field {0:?} is not a JSON pointer (like /error/code)")]
    Pointer(String),
    #[error("error_values needs error_field, and error_field needs error_values")]
    FieldWithoutValues,
}

impl RetryPolicy {
    /// The policy, or why it cannot work.
    pub fn checked(self) -> Result<RetryPolicy, PolicyError> {
        if self.max_attempts == 0 || self.max_attempts > MAX_ATTEMPTS {
            return Err(PolicyError::Attempts(self.max_attempts));
        }
        if !(self.coefficient.is_finite() && self.coefficient >= 1.0) {
            return Err(PolicyError::Coefficient(self.coefficient));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(PolicyError::Jitter(self.jitter));
        }
        if self.max_interval < self.initial_interval {
            return Err(PolicyError::Intervals);
        }
        if let Some(s) = self
            .contract
            .statuses
            .iter()
            .find(|s| (200..300).contains(*s))
        {
            return Err(PolicyError::Success(*s));
        }
        match &self.contract.error_field {
            Some(p) if !p.starts_with('/') => return Err(PolicyError::Pointer(p.clone())),
            Some(_) if self.contract.error_values.is_empty() => {
                return Err(PolicyError::FieldWithoutValues);
            }
            None if !self.contract.error_values.is_empty() => {
                return Err(PolicyError::FieldWithoutValues);
            }
            _ => {}
        }
        Ok(self)
    }

    /// The wait before the attempt after `attempt` (the first is 1), or
    /// `None` when `attempt` was the last the policy allows. `draw` is a
    /// random number in `[0, 1)`; `retry_after` the provider's.
    pub fn wait_after(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        draw: f64,
    ) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let exponent = i32::try_from(attempt.saturating_sub(1)).unwrap_or(i32::MAX);
        let grown = self.initial_interval.as_secs_f64() * self.coefficient.powi(exponent);
        let backoff = grown.min(self.max_interval.as_secs_f64());
        let spread = 1.0 + self.jitter * (2.0 * draw.clamp(0.0, 1.0) - 1.0);
        let wait = Duration::from_secs_f64((backoff * spread).max(0.0));
        Some(retry_after.map_or(wait, |floor| wait.max(floor)))
    }
}

/// The attempt to schedule after one that failed with nothing done.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NextAttempt {
    /// From the failure's record to the next attempt's `not_before`.
    pub wait: Duration,
    /// The policy's `deadline`: no attempt starts later than this after the
    /// first was recorded.
    pub within: Option<Duration>,
}

/// What follows attempt `attempt` (the first is 1) of a kind with `policy`
/// that ended in `outcome`: another attempt after a wait, or nothing (no
/// policy, an outcome that is not a failure with nothing done, or the last
/// attempt allowed). `draw` is a random number in `[0, 1)` for the jitter.
pub fn next_attempt(
    policy: Option<&RetryPolicy>,
    attempt: u32,
    outcome: &EffectOutcome,
    draw: f64,
) -> Option<NextAttempt> {
    let policy = policy?;
    if !retryable(outcome) {
        return None;
    }
    let wait = policy.wait_after(attempt, recorded_retry_after(outcome), draw)?;
    Some(NextAttempt {
        wait,
        within: policy.deadline,
    })
}

/// Whether an outcome is a failure with nothing done that a retry may
/// follow: not dispatched, or "not applied" by the provider's contract.
pub fn retryable(outcome: &EffectOutcome) -> bool {
    matches!(outcome, EffectOutcome::Failed { reason, .. } if *reason == NOT_DISPATCHED || *reason == NOT_APPLIED)
}

/// The provider's `Retry-After` recorded with a failure, if any
/// (`detail.retry_after_s`).
pub fn recorded_retry_after(outcome: &EffectOutcome) -> Option<Duration> {
    let EffectOutcome::Failed { detail, .. } = outcome else {
        return None;
    };
    let seconds = detail.get("retry_after_s")?.as_f64()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// A `Retry-After` header's value: delay-seconds, or an HTTP date (a wait
/// until then from `now`; one in the past is no wait). Anything else is
/// ignored.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let at = DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (at.with_timezone(&Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            initial_interval: Duration::from_secs(1),
            coefficient: 2.0,
            max_interval: Duration::from_secs(10),
            deadline: None,
            jitter: 0.0,
            contract: NotAppliedContract {
                statuses: vec![429, 503],
                ..NotAppliedContract::default()
            },
        }
    }

    #[test]
    fn the_wait_grows_by_the_coefficient_up_to_the_maximum() {
        let p = policy();
        let waits: Vec<_> = (1..5)
            .map(|n| p.wait_after(n, None, 0.5).unwrap().as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8]);
        let p = RetryPolicy {
            max_attempts: 10,
            ..policy()
        };
        assert_eq!(p.wait_after(6, None, 0.5), Some(Duration::from_secs(10)));
    }

    #[test]
    fn the_last_attempt_allowed_has_no_successor() {
        let p = policy();
        assert!(p.wait_after(4, None, 0.5).is_some());
        assert_eq!(p.wait_after(5, None, 0.5), None);
        assert_eq!(p.wait_after(6, None, 0.5), None);
        let once = RetryPolicy {
            max_attempts: 1,
            ..policy()
        };
        assert_eq!(once.wait_after(1, None, 0.5), None);
    }

    #[test]
    fn retry_after_is_a_floor_never_a_ceiling() {
        let p = policy();
        assert_eq!(
            p.wait_after(1, Some(Duration::from_secs(2)), 0.5),
            Some(Duration::from_secs(2))
        );
        // Longer than max_interval: the provider's word wins.
        assert_eq!(
            p.wait_after(1, Some(Duration::from_secs(90)), 0.5),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            p.wait_after(4, Some(Duration::from_secs(1)), 0.5),
            Some(Duration::from_secs(8))
        );
    }

    #[test]
    fn only_failures_with_nothing_done_are_retryable() {
        assert!(retryable(&EffectOutcome::not_dispatched("refused")));
        assert!(retryable(&EffectOutcome::Failed {
            reason: NOT_APPLIED,
            detail: json!({"status": 503}),
        }));
        assert!(!retryable(&EffectOutcome::Failed {
            reason: "rejected",
            detail: json!({"status": 400}),
        }));
        for reason in ["timeout", "connection_lost", "uncertain_response"] {
            assert!(!retryable(&EffectOutcome::Ambiguous {
                reason,
                detail: Value::Null,
            }));
        }
        assert!(!retryable(&EffectOutcome::Applied(Value::Null)));
    }

    #[test]
    fn an_ambiguous_outcome_is_never_followed_whatever_the_policy() {
        let p = RetryPolicy {
            max_attempts: MAX_ATTEMPTS,
            ..policy()
        };
        let timeout = EffectOutcome::Ambiguous {
            reason: "timeout",
            detail: Value::Null,
        };
        assert_eq!(next_attempt(Some(&p), 1, &timeout, 0.5), None);
        assert_eq!(
            next_attempt(None, 1, &EffectOutcome::not_dispatched("x"), 0.5),
            None
        );
        let busy = EffectOutcome::Failed {
            reason: NOT_APPLIED,
            detail: json!({"status": 503, "retry_after_s": 3}),
        };
        assert_eq!(
            next_attempt(Some(&p), 1, &busy, 0.5),
            Some(NextAttempt {
                wait: Duration::from_secs(3),
                within: None
            })
        );
        assert_eq!(next_attempt(Some(&p), MAX_ATTEMPTS, &busy, 0.5), None);
    }

    #[test]
    fn the_contract_reads_the_status_and_the_error_field() {
        let plain = policy().contract;
        assert!(plain.says_not_applied(503, &Value::Null));
        assert!(!plain.says_not_applied(500, &Value::Null));
        let narrowed = NotAppliedContract {
            statuses: vec![409],
            error_field: Some("/error/code".into()),
            error_values: vec!["rate_limited".into(), "7".into()],
        };
        assert!(narrowed.says_not_applied(409, &json!({"error": {"code": "rate_limited"}})));
        assert!(narrowed.says_not_applied(409, &json!({"error": {"code": 7}})));
        assert!(!narrowed.says_not_applied(409, &json!({"error": {"code": "duplicate"}})));
        assert!(!narrowed.says_not_applied(409, &json!("rate_limited")));
        assert!(!narrowed.says_not_applied(503, &json!({"error": {"code": "rate_limited"}})));
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = DateTime::parse_from_rfc3339("2026-12-06T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Dec 2026 10:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Dec 2026 09:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        for junk in ["", "-1", "1.5", "soon", "2 s"] {
            assert_eq!(parse_retry_after(junk, now), None, "{junk:?}");
        }
    }

    #[test]
    fn the_recorded_retry_after_comes_back() {
        let failed = EffectOutcome::Failed {
            reason: NOT_APPLIED,
            detail: json!({"status": 503, "retry_after_s": 2}),
        };
        assert_eq!(recorded_retry_after(&failed), Some(Duration::from_secs(2)));
        assert_eq!(
            recorded_retry_after(&EffectOutcome::not_dispatched("x")),
            None
        );
    }

    #[test]
    fn a_policy_that_cannot_work_is_refused() {
        let bad = [
            RetryPolicy {
                max_attempts: 0,
                ..policy()
            },
            RetryPolicy {
                max_attempts: MAX_ATTEMPTS + 1,
                ..policy()
            },
            RetryPolicy {
                coefficient: 0.5,
                ..policy()
            },
            RetryPolicy {
                coefficient: f64::NAN,
                ..policy()
            },
            RetryPolicy {
                jitter: 1.5,
                ..policy()
            },
            RetryPolicy {
                max_interval: Duration::from_millis(10),
                ..policy()
            },
            RetryPolicy {
                contract: NotAppliedContract {
                    statuses: vec![200],
                    ..NotAppliedContract::default()
                },
                ..policy()
            },
            RetryPolicy {
                contract: NotAppliedContract {
                    statuses: vec![409],
                    error_field: Some("error.code".into()),
                    error_values: vec!["x".into()],
                },
                ..policy()
            },
            RetryPolicy {
                contract: NotAppliedContract {
                    statuses: vec![409],
                    error_field: Some("/error/code".into()),
                    error_values: vec![],
                },
                ..policy()
            },
        ];
        for p in bad {
            assert!(p.clone().checked().is_err(), "{p:?}");
        }
        assert!(policy().checked().is_ok());
    }

    proptest! {
        #[test]
        fn every_wait_stays_within_its_bounds(
            attempt in 1u32..MAX_ATTEMPTS,
            initial_ms in 0u64..10_000,
            extra_ms in 0u64..600_000,
            coefficient in 1.0f64..10.0,
            jitter in 0.0f64..=1.0,
            draw in 0.0f64..1.0,
            retry_after in proptest::option::of(0u64..100_000),
        ) {
            let p = RetryPolicy {
                max_attempts: MAX_ATTEMPTS,
                initial_interval: Duration::from_millis(initial_ms),
                coefficient,
                max_interval: Duration::from_millis(initial_ms + extra_ms),
                deadline: None,
                jitter,
                contract: NotAppliedContract::default(),
            };
            let floor = retry_after.map(Duration::from_millis);
            let wait = p.wait_after(attempt, floor, draw).unwrap();
            // Never more than the maximum spread by the jitter, unless the
            // provider asked for longer; never less than the provider asked.
            let most = p.max_interval.as_secs_f64() * (1.0 + jitter) + 1e-6;
            prop_assert!(wait.as_secs_f64() <= most.max(floor.unwrap_or_default().as_secs_f64() + 1e-6));
            prop_assert!(wait >= floor.unwrap_or_default());
            // Without jitter, waits never shrink from one attempt to the next.
            let steady = RetryPolicy { jitter: 0.0, ..p };
            prop_assert!(steady.wait_after(attempt, None, draw) <= steady.wait_after(attempt + 1, None, draw)
                || attempt + 1 >= MAX_ATTEMPTS);
        }

        #[test]
        fn there_are_never_more_attempts_than_allowed(max in 1u32..=MAX_ATTEMPTS, attempt in 1u32..200) {
            let p = RetryPolicy { max_attempts: max, ..policy() };
            prop_assert_eq!(p.wait_after(attempt, None, 0.5).is_some(), attempt < max);
        }
    }
}
