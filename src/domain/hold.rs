//! Where a hold stands now, pure: a hold was opened because its request
//! resembled an earlier command of the same intent; by the time an operator
//! looks, that command may have been resolved and the intent run again by
//! another request. Releasing such a hold would run the intent once more, so
//! the operator is shown the intent's current state, and a release that would
//! run an intent already applied after the hold was opened must name that
//! applied command (an explicit, recorded confirmation).

use uuid::Uuid;

use super::CommandState;

/// What the ledger says now about a hold's intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentNow {
    /// The state of the command the hold resembles (`None`: pruned).
    pub resembles: Option<CommandState>,
    /// Its resolution's outcome, when it is ambiguous and resolved
    /// (`applied` or `not_applied`).
    pub resembles_resolution: Option<String>,
    /// The newest command of the intent, and its state.
    pub latest: Option<(Uuid, CommandState)>,
    /// The newest command of the intent created after the hold opened that
    /// is `applied` (other than the hold's own released command).
    pub applied_since: Option<Uuid>,
}

/// How a hold stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Its question is still the one it was opened with.
    Current,
    /// The command it resembles ended with nothing done (failed, cancelled,
    /// expired, or ambiguous resolved `not_applied`): the reason for the
    /// hold has gone, and a new request of the intent would run unheld.
    ReasonGone {
        resembles: CommandState,
        resolved_not_applied: bool,
    },
    /// The intent was applied by this command after the hold opened:
    /// releasing would apply it again.
    AppliedSince(Uuid),
}

impl Standing {
    /// `current`, `reason_gone` or `applied_since`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Standing::Current => "current",
            Standing::ReasonGone { .. } => "reason_gone",
            Standing::AppliedSince(_) => "applied_since",
        }
    }

    /// What an operator should know before deciding, in a sentence.
    pub fn note(&self) -> Option<String> {
        match self {
            Standing::Current => None,
            Standing::ReasonGone {
                resembles,
                resolved_not_applied: true,
            } => Some(format!(
                "the command this hold resembles is {resembles}, resolved not_applied: nothing of the intent was done, and a new request of it would run without a hold"
            )),
            Standing::ReasonGone { resembles, .. } => Some(format!(
                "the command this hold resembles ended {resembles}: nothing of the intent was done, and a new request of it would run without a hold"
            )),
            Standing::AppliedSince(id) => Some(format!(
                "command {id} applied this intent after the hold was opened: releasing would apply it again, so a release must confirm it (confirm_applied: \"{id}\")"
            )),
        }
    }

    /// The applied command a release must name, if any.
    pub fn confirmation_needed(&self) -> Option<Uuid> {
        match self {
            Standing::AppliedSince(id) => Some(*id),
            _ => None,
        }
    }
}

/// How a hold whose intent stands as `now` stands. An application since
/// the hold outweighs everything: it is what would be paid twice.
pub fn standing(now: &IntentNow) -> Standing {
    if let Some(id) = now.applied_since {
        return Standing::AppliedSince(id);
    }
    let resolved_not_applied = now.resembles_resolution.as_deref() == Some("not_applied");
    match now.resembles {
        Some(s @ (CommandState::Failed | CommandState::Cancelled | CommandState::Expired)) => {
            Standing::ReasonGone {
                resembles: s,
                resolved_not_applied: false,
            }
        }
        Some(CommandState::Ambiguous) if resolved_not_applied => Standing::ReasonGone {
            resembles: CommandState::Ambiguous,
            resolved_not_applied: true,
        },
        _ => Standing::Current,
    }
}

/// Whether a release that names `confirmed` may go ahead for a hold that
/// stands as `standing`: `Err` names the applied command it must confirm.
pub fn may_release(standing: &Standing, confirmed: Option<Uuid>) -> Result<(), Uuid> {
    match standing.confirmation_needed() {
        Some(applied) if confirmed != Some(applied) => Err(applied),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(resembles: CommandState) -> IntentNow {
        IntentNow {
            resembles: Some(resembles),
            resembles_resolution: None,
            latest: None,
            applied_since: None,
        }
    }

    #[test]
    fn a_hold_on_a_live_or_applied_or_unresolved_command_is_current() {
        for s in [
            CommandState::Pending,
            CommandState::Prepared,
            CommandState::EffectStarted,
            CommandState::Applied,
            CommandState::Ambiguous,
        ] {
            assert_eq!(standing(&now(s)), Standing::Current, "{s}");
        }
        let pruned = IntentNow {
            resembles: None,
            ..now(CommandState::Applied)
        };
        assert_eq!(standing(&pruned), Standing::Current);
        let resolved_applied = IntentNow {
            resembles_resolution: Some("applied".into()),
            ..now(CommandState::Ambiguous)
        };
        assert_eq!(standing(&resolved_applied), Standing::Current);
    }

    #[test]
    fn a_hold_whose_command_ended_with_nothing_done_says_its_reason_has_gone() {
        for s in [
            CommandState::Failed,
            CommandState::Cancelled,
            CommandState::Expired,
        ] {
            let st = standing(&now(s));
            assert_eq!(st.as_str(), "reason_gone", "{s}");
            assert!(st.note().unwrap().contains(s.as_str()));
            assert_eq!(may_release(&st, None), Ok(()));
        }
        let resolved = IntentNow {
            resembles_resolution: Some("not_applied".into()),
            ..now(CommandState::Ambiguous)
        };
        let st = standing(&resolved);
        assert_eq!(
            st,
            Standing::ReasonGone {
                resembles: CommandState::Ambiguous,
                resolved_not_applied: true
            }
        );
        assert!(st.note().unwrap().contains("resolved not_applied"));
    }

    #[test]
    fn an_application_since_the_hold_needs_that_very_command_confirmed() {
        let applied = Uuid::now_v7();
        let other = Uuid::now_v7();
        for resembles in CommandState::ALL {
            for resolution in [None, Some("not_applied"), Some("applied")] {
                let st = standing(&IntentNow {
                    resembles: Some(resembles),
                    resembles_resolution: resolution.map(str::to_owned),
                    latest: Some((applied, CommandState::Applied)),
                    applied_since: Some(applied),
                });
                assert_eq!(st, Standing::AppliedSince(applied));
                assert_eq!(may_release(&st, None), Err(applied));
                assert_eq!(may_release(&st, Some(other)), Err(applied));
                assert_eq!(may_release(&st, Some(applied)), Ok(()));
                assert!(st.note().unwrap().contains(&applied.to_string()));
            }
        }
    }

    #[test]
    fn only_an_application_since_the_hold_asks_for_a_confirmation() {
        for resembles in CommandState::ALL {
            let st = standing(&now(resembles));
            assert_eq!(st.confirmation_needed(), None, "{resembles}");
            assert_eq!(may_release(&st, None), Ok(()));
            // A confirmation nobody asked for changes nothing.
            assert_eq!(may_release(&st, Some(Uuid::now_v7())), Ok(()));
        }
    }
}
