//! The closed state machine of a command (DESIGN section 2). This constant is
//! the meaning; the `command_transitions` table and its trigger are the
//! enforcement, and a test keeps the two identical in both directions.

use std::fmt;
use std::str::FromStr;

/// Where a command is in its life. Terminal states have no outgoing edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CommandState {
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
pub const TRANSITIONS: &[(CommandState, CommandState)] = &[
    (CommandState::Pending, CommandState::Prepared),
    (CommandState::Pending, CommandState::Cancelled),
    (CommandState::Pending, CommandState::Expired),
    (CommandState::Prepared, CommandState::EffectStarted),
    (CommandState::Prepared, CommandState::Cancelled),
    (CommandState::Prepared, CommandState::Expired),
    (CommandState::EffectStarted, CommandState::Applied),
    (CommandState::EffectStarted, CommandState::Failed),
    (CommandState::EffectStarted, CommandState::Ambiguous),
];

/// True when the state machine allows moving from `from` to `to`.
pub fn can_transition(from: CommandState, to: CommandState) -> bool {
    TRANSITIONS.contains(&(from, to))
}

impl CommandState {
    pub const ALL: [CommandState; 8] = [
        CommandState::Pending,
        CommandState::Prepared,
        CommandState::EffectStarted,
        CommandState::Applied,
        CommandState::Failed,
        CommandState::Ambiguous,
        CommandState::Cancelled,
        CommandState::Expired,
    ];

    /// The name used in the database, the API and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CommandState::Pending => "pending",
            CommandState::Prepared => "prepared",
            CommandState::EffectStarted => "effect_started",
            CommandState::Applied => "applied",
            CommandState::Failed => "failed",
            CommandState::Ambiguous => "ambiguous",
            CommandState::Cancelled => "cancelled",
            CommandState::Expired => "expired",
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
        matches!(
            self,
            CommandState::Failed | CommandState::Expired | CommandState::Cancelled
        )
    }

    /// [`CommandState::ended_with_nothing_done`], or `ambiguous` and later resolved
    /// `not_applied` (by an operator or the reconcile probe): that is as
    /// definite as a failure. An unresolved `ambiguous`, or one resolved
    /// `applied`, is not.
    pub fn nothing_done_as_resolved(self, resolved_not_applied: bool) -> bool {
        self.ended_with_nothing_done() || (self == CommandState::Ambiguous && resolved_not_applied)
    }

    /// A client may still cancel the command: no effect has been attempted.
    pub fn is_cancellable(self) -> bool {
        can_transition(self, CommandState::Cancelled)
    }
}

impl fmt::Display for CommandState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for CommandState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CommandState::ALL
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
        for state in CommandState::ALL {
            for resolved in [false, true] {
                let expected = matches!(
                    state,
                    CommandState::Failed | CommandState::Expired | CommandState::Cancelled
                ) || (state == CommandState::Ambiguous && resolved);
                assert_eq!(
                    state.nothing_done_as_resolved(resolved),
                    expected,
                    "{state} resolved not_applied: {resolved}"
                );
            }
        }
    }

    fn expected(from: CommandState, to: CommandState) -> bool {
        use CommandState::*;
        matches!(
            (from, to),
            (Pending, Prepared | Cancelled | Expired)
                | (Prepared, EffectStarted | Cancelled | Expired)
                | (EffectStarted, Applied | Failed | Ambiguous)
        )
    }

    #[test]
    fn every_pair_of_states_matches_the_design_diagram() {
        for from in CommandState::ALL {
            for to in CommandState::ALL {
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
        let terminal: Vec<_> = CommandState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(
            terminal,
            [
                CommandState::Applied,
                CommandState::Failed,
                CommandState::Ambiguous,
                CommandState::Cancelled,
                CommandState::Expired
            ]
        );
    }

    #[test]
    fn nothing_steps_back_once_the_effect_has_started() {
        for to in [
            CommandState::Pending,
            CommandState::Prepared,
            CommandState::Cancelled,
            CommandState::Expired,
        ] {
            assert!(
                !can_transition(CommandState::EffectStarted, to),
                "effect_started -> {to}"
            );
        }
    }

    #[test]
    fn no_state_transitions_to_itself() {
        for s in CommandState::ALL {
            assert!(!can_transition(s, s));
        }
    }

    #[test]
    fn only_pending_and_prepared_are_cancellable() {
        let cancellable: Vec<_> = CommandState::ALL
            .into_iter()
            .filter(|s| s.is_cancellable())
            .collect();
        assert_eq!(cancellable, [CommandState::Pending, CommandState::Prepared]);
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for s in CommandState::ALL {
            assert_eq!(s.as_str().parse::<CommandState>(), Ok(s));
        }
        assert!("Pending".parse::<CommandState>().is_err());
        assert!("".parse::<CommandState>().is_err());
    }

    #[test]
    fn every_state_is_reachable_from_pending() {
        let mut reached = vec![CommandState::Pending];
        let mut i = 0;
        while i < reached.len() {
            for &(from, to) in TRANSITIONS {
                if from == reached[i] && !reached.contains(&to) {
                    reached.push(to);
                }
            }
            i += 1;
        }
        assert_eq!(reached.len(), CommandState::ALL.len());
    }
}
