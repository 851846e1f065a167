//! The closed state machine of a command (DESIGN section 2). This constant is
//! the meaning; the `command_transitions` table and its trigger are the
//! enforcement, and a test keeps the two identical in both directions.

use std::fmt;
use std::str::FromStr;

/// Where a command is in its life. Terminal states have no outgoing edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    Pending,
    Prepared,
    EffectStarted,
    Applied,
    Failed,
    Ambiguous,
    Cancelled,
    Expired,
}

/// Every allowed `(from, to)` pair, and nothing else.
pub const TRANSITIONS: &[(State, State)] = &[
    (State::Pending, State::Prepared),
    (State::Pending, State::Cancelled),
    (State::Pending, State::Expired),
    (State::Prepared, State::EffectStarted),
    (State::Prepared, State::Cancelled),
    (State::Prepared, State::Expired),
    (State::EffectStarted, State::Applied),
    (State::EffectStarted, State::Failed),
    (State::EffectStarted, State::Ambiguous),
];

/// True when the state machine allows moving from `from` to `to`.
pub fn can_transition(from: State, to: State) -> bool {
    TRANSITIONS.contains(&(from, to))
}

impl State {
    pub const ALL: [State; 8] = [
        State::Pending,
        State::Prepared,
        State::EffectStarted,
        State::Applied,
        State::Failed,
        State::Ambiguous,
        State::Cancelled,
        State::Expired,
    ];

    /// The name used in the database, the API and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Prepared => "prepared",
            State::EffectStarted => "effect_started",
            State::Applied => "applied",
            State::Failed => "failed",
            State::Ambiguous => "ambiguous",
            State::Cancelled => "cancelled",
            State::Expired => "expired",
        }
    }

    /// A terminal command never changes again.
    pub fn is_terminal(self) -> bool {
        !TRANSITIONS.iter().any(|&(from, _)| from == self)
    }

    /// It ended and nothing happened in the world: `failed` (every executor
    /// records `failed` only when the effect certainly did not happen, or
    /// the target refused it), `expired` or `cancelled` (no effect was ever
    /// attempted). `ambiguous` is not: nobody knows.
    pub fn ended_with_nothing_done(self) -> bool {
        matches!(self, State::Failed | State::Expired | State::Cancelled)
    }

    /// [`State::ended_with_nothing_done`], or `ambiguous` and later resolved
    /// `not_applied` (by an operator or the reconcile probe): that is as
    /// definite as a failure. An unresolved `ambiguous`, or one resolved
    /// `applied`, is not.
    pub fn nothing_done_as_resolved(self, resolved_not_applied: bool) -> bool {
        self.ended_with_nothing_done() || (self == State::Ambiguous && resolved_not_applied)
    }

    /// A client may still cancel the command: no effect has been attempted.
    pub fn is_cancellable(self) -> bool {
        can_transition(self, State::Cancelled)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for State {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_definite_end_frees_an_intent_and_a_not_applied_resolution_is_one() {
        for state in State::ALL {
            for resolved in [false, true] {
                let expected = matches!(state, State::Failed | State::Expired | State::Cancelled)
                    || (state == State::Ambiguous && resolved);
                assert_eq!(
                    state.nothing_done_as_resolved(resolved),
                    expected,
                    "{state} resolved not_applied: {resolved}"
                );
            }
        }
    }

    fn expected(from: State, to: State) -> bool {
        use State::*;
        matches!(
            (from, to),
            (Pending, Prepared | Cancelled | Expired)
                | (Prepared, EffectStarted | Cancelled | Expired)
                | (EffectStarted, Applied | Failed | Ambiguous)
        )
    }

    #[test]
    fn every_pair_of_states_matches_the_design_diagram() {
        for from in State::ALL {
            for to in State::ALL {
                assert_eq!(
                    can_transition(from, to),
                    expected(from, to),
                    "{from} -> {to}"
                );
            }
        }
    }

    #[test]
    fn terminal_states_are_exactly_the_five_outcomes() {
        let terminal: Vec<_> = State::ALL.into_iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(
            terminal,
            [
                State::Applied,
                State::Failed,
                State::Ambiguous,
                State::Cancelled,
                State::Expired
            ]
        );
    }

    #[test]
    fn nothing_steps_back_once_the_effect_has_started() {
        for to in [
            State::Pending,
            State::Prepared,
            State::Cancelled,
            State::Expired,
        ] {
            assert!(
                !can_transition(State::EffectStarted, to),
                "effect_started -> {to}"
            );
        }
    }

    #[test]
    fn no_state_transitions_to_itself() {
        for s in State::ALL {
            assert!(!can_transition(s, s));
        }
    }

    #[test]
    fn only_pending_and_prepared_are_cancellable() {
        let cancellable: Vec<_> = State::ALL
            .into_iter()
            .filter(|s| s.is_cancellable())
            .collect();
        assert_eq!(cancellable, [State::Pending, State::Prepared]);
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for s in State::ALL {
            assert_eq!(s.as_str().parse::<State>(), Ok(s));
        }
        assert!("Pending".parse::<State>().is_err());
        assert!("".parse::<State>().is_err());
    }

    #[test]
    fn every_state_is_reachable_from_pending() {
        let mut reached = vec![State::Pending];
        let mut i = 0;
        while i < reached.len() {
            for &(from, to) in TRANSITIONS {
                if from == reached[i] && !reached.contains(&to) {
                    reached.push(to);
                }
            }
            i += 1;
        }
        assert_eq!(reached.len(), State::ALL.len());
    }
}
