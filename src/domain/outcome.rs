//! What an effect attempt tells us, and what the ledger records for it.
//! The rule: `applied` and `failed` are definite; anything after dispatch
//! that is not a definite answer is `ambiguous`, never a guess.

use serde_json::{Value, json};

use super::CommandState;

/// The honest result of one effect attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum EffectOutcome {
    /// The effect happened; the executor's result.
    Applied(Value),
    /// The effect certainly did not happen (not dispatched), or the provider
    /// definitely refused it.
    Failed { reason: &'static str, detail: Value },
    /// Dispatched, and nobody can know whether it took effect.
    Ambiguous { reason: &'static str, detail: Value },
}

impl EffectOutcome {
    pub fn not_dispatched(detail: impl Into<String>) -> Self {
        EffectOutcome::Failed {
            reason: "not_dispatched",
            detail: json!(detail.into()),
        }
    }

    /// The terminal state this outcome records.
    pub fn state(&self) -> CommandState {
        match self {
            EffectOutcome::Applied(_) => CommandState::Applied,
            EffectOutcome::Failed { .. } => CommandState::Failed,
            EffectOutcome::Ambiguous { .. } => CommandState::Ambiguous,
        }
    }

    /// `(result, error)` columns for the row.
    pub fn columns(&self) -> (Option<Value>, Option<Value>) {
        match self {
            EffectOutcome::Applied(result) => (Some(result.clone()), None),
            EffectOutcome::Failed { reason, detail }
            | EffectOutcome::Ambiguous { reason, detail } => {
                (None, Some(json!({"reason": reason, "detail": detail})))
            }
        }
    }
}

/// How far an HTTP attempt got, as far as the client can tell.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpAttempt {
    /// Failed before any byte of the request was sent (refused, DNS, TLS).
    NotSent(String),
    /// A complete response.
    Response { status: u16, body: Value },
    /// The request was (or may have been) sent, and then: timeout, reset,
    /// truncated response.
    LostAfterSend(String),
    /// The deadline passed with the request in flight.
    TimedOut,
}

/// The HTTP executor's table: 2xx applied, 4xx failed (the provider
/// refused), 5xx and everything lost after sending ambiguous.
pub fn classify_http(attempt: HttpAttempt) -> EffectOutcome {
    match attempt {
        HttpAttempt::NotSent(why) => EffectOutcome::not_dispatched(why),
        HttpAttempt::Response { status, body } => match status {
            200..=299 => EffectOutcome::Applied(body),
            400..=499 => EffectOutcome::Failed {
                reason: "rejected",
                detail: json!({"status": status, "body": body}),
            },
            _ => EffectOutcome::Ambiguous {
                reason: "uncertain_response",
                detail: json!({"status": status, "body": body}),
            },
        },
        HttpAttempt::LostAfterSend(why) => EffectOutcome::Ambiguous {
            reason: "connection_lost",
            detail: json!(why),
        },
        HttpAttempt::TimedOut => EffectOutcome::Ambiguous {
            reason: "timeout",
            detail: json!("no answer before the deadline"),
        },
    }
}

/// The HTTP table with the kind's contract first: an answer the contract
/// says means "not applied" (`domain::retry::NotAppliedContract`) is
/// `failed`, reason `not_applied`, whatever its status, with the provider's
/// `Retry-After` (if any) kept as `retry_after_s`. Every other attempt is
/// classified by [`classify_http`].
pub fn classify_http_under(
    attempt: HttpAttempt,
    contract: &super::retry::NotAppliedContract,
    retry_after: Option<std::time::Duration>,
) -> EffectOutcome {
    match attempt {
        HttpAttempt::Response { status, body } if contract.says_not_applied(status, &body) => {
            let mut detail = json!({"status": status, "body": body});
            if let Some(wait) = retry_after {
                detail["retry_after_s"] = json!(wait.as_secs_f64());
            }
            EffectOutcome::Failed {
                reason: super::retry::NOT_APPLIED,
                detail,
            }
        }
        other => classify_http(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_2xx_is_applied() {
        for status in [200, 201, 204, 299] {
            let o = classify_http(HttpAttempt::Response {
                status,
                body: json!({"ok": true}),
            });
            assert_eq!(o, EffectOutcome::Applied(json!({"ok": true})));
        }
    }

    #[test]
    fn a_4xx_is_a_definite_refusal() {
        for status in [400, 402, 404, 409, 422, 499] {
            let o = classify_http(HttpAttempt::Response {
                status,
                body: json!("no"),
            });
            assert_eq!(o.state(), CommandState::Failed, "{status}");
        }
    }

    #[test]
    fn a_5xx_or_anything_unusual_is_ambiguous() {
        for status in [500, 502, 503, 504, 100, 302, 600] {
            let o = classify_http(HttpAttempt::Response {
                status,
                body: Value::Null,
            });
            assert_eq!(o.state(), CommandState::Ambiguous, "{status}");
        }
    }

    #[test]
    fn losing_the_answer_after_sending_is_ambiguous_and_never_failed() {
        assert_eq!(
            classify_http(HttpAttempt::TimedOut).state(),
            CommandState::Ambiguous
        );
        assert_eq!(
            classify_http(HttpAttempt::LostAfterSend("reset".into())).state(),
            CommandState::Ambiguous
        );
    }

    #[test]
    fn failing_before_sending_is_failed_not_dispatched() {
        let o = classify_http(HttpAttempt::NotSent("connection refused".into()));
        assert_eq!(o.state(), CommandState::Failed);
        assert_eq!(o.columns().1.unwrap()["reason"], "not_dispatched");
    }

    #[test]
    fn the_contract_turns_its_answers_into_failures_with_nothing_done() {
        use super::super::retry::NotAppliedContract;
        let contract = NotAppliedContract {
            statuses: vec![503],
            ..NotAppliedContract::default()
        };
        let wait = Some(std::time::Duration::from_secs(2));
        let o = classify_http_under(
            HttpAttempt::Response {
                status: 503,
                body: json!("busy"),
            },
            &contract,
            wait,
        );
        assert_eq!(o.state(), CommandState::Failed);
        let (_, error) = o.columns();
        assert_eq!(error.as_ref().unwrap()["reason"], "not_applied");
        assert_eq!(error.unwrap()["detail"]["retry_after_s"], 2.0);
        // What the contract does not list keeps the table's answer.
        for (status, state) in [
            (500, CommandState::Ambiguous),
            (200, CommandState::Applied),
            (400, CommandState::Failed),
        ] {
            let o = classify_http_under(
                HttpAttempt::Response {
                    status,
                    body: Value::Null,
                },
                &contract,
                wait,
            );
            assert_eq!(o.state(), state, "{status}");
        }
        assert_eq!(
            classify_http_under(HttpAttempt::TimedOut, &contract, wait).state(),
            CommandState::Ambiguous
        );
    }

    #[test]
    fn every_outcome_is_terminal_and_reachable_from_effect_started() {
        for o in [
            EffectOutcome::Applied(Value::Null),
            EffectOutcome::not_dispatched("x"),
            classify_http(HttpAttempt::TimedOut),
        ] {
            assert!(o.state().is_terminal());
            assert!(super::super::can_transition(
                CommandState::EffectStarted,
                o.state()
            ));
        }
    }
}
