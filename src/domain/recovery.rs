//! Recovery decisions (DESIGN section 5), pure: given what the ledger says
//! about an unfinished command and its authority, what may be done about it.
//! Recovery never re-executes anything: an effect that may have run is
//! resolved by asking the executor (the reconcile probe) or declared
//! ambiguous.

use chrono::{DateTime, Utc};
use std::time::Duration;

use super::CommandState;

/// What recovery reads about one unfinished command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub state: CommandState,
    /// The generation the command is bound to (none while pending).
    pub generation: Option<i64>,
    pub pinned_generation: Option<i64>,
    pub deadline_passed: bool,
    /// The authority's current generation, if it was ever leased.
    pub current_generation: Option<i64>,
    /// Whether someone holds a live lease on the authority.
    pub lease_live: bool,
}

/// What to do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: it is someone's live work, or nothing is known to be wrong.
    Leave,
    /// Before any effect: end it `expired` with this reason.
    Expire(&'static str),
    /// A prepared row of a superseded generation: rebind it to the current
    /// one (no effect was attempted).
    Adopt { to_generation: i64 },
    /// Its effect may have run and its executor is gone: ask the executor
    /// whether it did (or, without a probe, declare it ambiguous).
    Resolve,
}

pub fn decide(f: &Facts) -> Decision {
    let superseded = matches!((f.generation, f.current_generation), (Some(g), Some(c)) if g < c);
    match f.state {
        CommandState::Pending if f.deadline_passed => Decision::Expire("deadline_passed"),
        CommandState::Prepared if f.deadline_passed => Decision::Expire("deadline_passed"),
        CommandState::Prepared if superseded => match (f.pinned_generation, f.current_generation) {
            (Some(pinned), Some(current)) if pinned != current => {
                Decision::Expire("authority_superseded")
            }
            (_, Some(current)) => Decision::Adopt {
                to_generation: current,
            },
            (_, None) => Decision::Leave,
        },
        CommandState::EffectStarted if superseded || !f.lease_live => Decision::Resolve,
        _ => Decision::Leave,
    }
}

/// What the reconcile probe said.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeAnswer {
    /// The effect ran; the executor's result.
    Applied(serde_json::Value),
    /// The provider has no effect under the command's key (a `404`).
    NotApplied,
    /// No definite answer.
    Unknown(String),
}

/// How long after `effect_started` a dispatched effect may still take
/// hold at the provider: the kind's deadline plus the catalog's margin
/// (`probe_margin`) for the request's way there and the provider's queue.
/// Measured from the `effect_started` commit's time, by the database's
/// clock, so no process's clock decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectWindow {
    /// When `effect_started` was recorded.
    pub started_at: DateTime<Utc>,
    /// The kind's deadline plus its probe margin.
    pub lasts: Duration,
}

impl EffectWindow {
    /// The first moment the effect can no longer be running.
    pub fn closes_at(&self) -> DateTime<Utc> {
        let lasts = chrono::Duration::from_std(self.lasts).unwrap_or(chrono::Duration::MAX);
        self.started_at
            .checked_add_signed(lasts)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// What a probe's answer is worth at `now`.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The effect ran; the executor's result.
    Applied(serde_json::Value),
    /// The effect did not run and no longer can: the provider has nothing
    /// under the key, and the effect's window has closed.
    NotApplied,
    /// No effect yet, but one dispatched before the window closes may still
    /// take hold: nothing is concluded; ask again at `ask_again_at`.
    NotYet { ask_again_at: DateTime<Utc> },
    /// No definite answer.
    Unknown(String),
}

/// Weighs a probe's answer: "not found" is "not applied" only once the
/// effect can no longer be running (a provider may finish a request after
/// its caller hung up), and "not yet" before that. A positive answer counts
/// at once: an effect that ran cannot un-run.
pub fn weigh(answer: ProbeAnswer, window: EffectWindow, now: DateTime<Utc>) -> Verdict {
    match answer {
        ProbeAnswer::Applied(result) => Verdict::Applied(result),
        ProbeAnswer::NotApplied if now >= window.closes_at() => Verdict::NotApplied,
        ProbeAnswer::NotApplied => Verdict::NotYet {
            ask_again_at: window.closes_at(),
        },
        ProbeAnswer::Unknown(why) => Verdict::Unknown(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(state: CommandState) -> Facts {
        Facts {
            state,
            generation: (state != CommandState::Pending).then_some(3),
            pinned_generation: None,
            deadline_passed: false,
            current_generation: Some(3),
            lease_live: true,
        }
    }

    #[test]
    fn live_work_of_the_current_generation_is_left_alone() {
        for s in [
            CommandState::Pending,
            CommandState::Prepared,
            CommandState::EffectStarted,
        ] {
            assert_eq!(decide(&facts(s)), Decision::Leave, "{s}");
        }
    }

    #[test]
    fn overdue_rows_expire_only_before_the_effect() {
        for s in [CommandState::Pending, CommandState::Prepared] {
            assert_eq!(
                decide(&Facts {
                    deadline_passed: true,
                    ..facts(s)
                }),
                Decision::Expire("deadline_passed")
            );
        }
        // Once the effect may have started, a deadline changes nothing.
        let started = Facts {
            deadline_passed: true,
            ..facts(CommandState::EffectStarted)
        };
        assert_eq!(decide(&started), Decision::Leave);
    }

    #[test]
    fn prepared_rows_of_a_superseded_generation_are_adopted_unless_pinned_elsewhere() {
        let old = Facts {
            generation: Some(2),
            ..facts(CommandState::Prepared)
        };
        assert_eq!(decide(&old), Decision::Adopt { to_generation: 3 });
        let pinned = Facts {
            pinned_generation: Some(2),
            ..old
        };
        assert_eq!(decide(&pinned), Decision::Expire("authority_superseded"));
        let pinned_current = Facts {
            pinned_generation: Some(3),
            ..old
        };
        assert_eq!(
            decide(&pinned_current),
            Decision::Adopt { to_generation: 3 }
        );
    }

    #[test]
    fn a_started_effect_whose_executor_is_gone_is_resolved_never_rerun() {
        let superseded = Facts {
            generation: Some(2),
            ..facts(CommandState::EffectStarted)
        };
        assert_eq!(decide(&superseded), Decision::Resolve);
        let dead_lease = Facts {
            lease_live: false,
            ..facts(CommandState::EffectStarted)
        };
        assert_eq!(decide(&dead_lease), Decision::Resolve);
    }

    fn window() -> (EffectWindow, DateTime<Utc>) {
        let started_at = "2026-12-06T10:00:00Z".parse().unwrap();
        let window = EffectWindow {
            started_at,
            lasts: Duration::from_secs(15),
        };
        (window, started_at)
    }

    #[test]
    fn not_found_is_not_applied_only_once_the_effect_can_no_longer_run() {
        let (w, started) = window();
        let closes = started + chrono::Duration::seconds(15);
        assert_eq!(w.closes_at(), closes);
        for now in [
            started,
            started + chrono::Duration::seconds(14),
            closes - chrono::Duration::milliseconds(1),
        ] {
            assert_eq!(
                weigh(ProbeAnswer::NotApplied, w, now),
                Verdict::NotYet {
                    ask_again_at: closes
                },
                "{now}"
            );
        }
        for now in [closes, closes + chrono::Duration::days(3)] {
            assert_eq!(weigh(ProbeAnswer::NotApplied, w, now), Verdict::NotApplied);
        }
    }

    #[test]
    fn applied_and_unknown_answers_count_whenever_they_come() {
        let (w, started) = window();
        for now in [started, started + chrono::Duration::hours(1)] {
            assert_eq!(
                weigh(ProbeAnswer::Applied(serde_json::json!({"id": 1})), w, now),
                Verdict::Applied(serde_json::json!({"id": 1}))
            );
            assert_eq!(
                weigh(ProbeAnswer::Unknown("down".into()), w, now),
                Verdict::Unknown("down".into())
            );
        }
    }

    #[test]
    fn a_window_too_long_to_represent_never_closes() {
        let (_, started) = window();
        let w = EffectWindow {
            started_at: started,
            lasts: Duration::MAX,
        };
        assert_eq!(w.closes_at(), DateTime::<Utc>::MAX_UTC);
        assert!(matches!(
            weigh(
                ProbeAnswer::NotApplied,
                w,
                started + chrono::Duration::days(36500)
            ),
            Verdict::NotYet { .. }
        ));
    }

    #[test]
    fn terminal_rows_are_never_touched() {
        for s in CommandState::ALL.into_iter().filter(|s| s.is_terminal()) {
            let f = Facts {
                deadline_passed: true,
                lease_live: false,
                generation: Some(1),
                ..facts(s)
            };
            assert_eq!(decide(&f), Decision::Leave, "{s}");
        }
    }

    #[test]
    fn every_decision_is_a_legal_transition() {
        for s in CommandState::ALL {
            for deadline_passed in [false, true] {
                for lease_live in [false, true] {
                    for generation in [None, Some(1), Some(3)] {
                        for pinned in [None, Some(1), Some(3)] {
                            let f = Facts {
                                state: s,
                                generation,
                                pinned_generation: pinned,
                                deadline_passed,
                                current_generation: Some(3),
                                lease_live,
                            };
                            match decide(&f) {
                                Decision::Expire(_) => {
                                    assert!(super::super::can_transition(s, CommandState::Expired));
                                }
                                Decision::Adopt { .. } => assert_eq!(s, CommandState::Prepared),
                                Decision::Resolve => assert_eq!(s, CommandState::EffectStarted),
                                Decision::Leave => {}
                            }
                        }
                    }
                }
            }
        }
    }
}
