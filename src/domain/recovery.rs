//! Recovery decisions (DESIGN section 5), pure: given what the ledger says
//! about an unfinished command and its authority, what may be done about it.
//! Recovery never re-executes anything: an effect that may have run is
//! resolved by asking the executor (the reconcile probe) or declared
//! ambiguous.

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
    /// The effect certainly did not run.
    NotApplied,
    /// No definite answer.
    Unknown(String),
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
