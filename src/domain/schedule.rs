//! When a command may be claimed, and in what order.
//!
//! - **Not before.** A command may name an instant before which it is not
//!   claimed (`not_before`). It is recorded `pending` at once, like any
//!   command; its `deadline`, if it has one, must be later.
//! - **Priority.** A whole number from [`MIN_PRIORITY`] to [`MAX_PRIORITY`]:
//!   the kind's (catalog `priority`, default 0), or the command's own, at
//!   most the kind's `max_priority` (default: its `priority`).
//!
//! The order is one number per queued command, its *claim rank*
//! ([`claim_rank`]): the millisecond it became claimable (when it was
//! recorded, or its `not_before` when later), moved earlier by [`STEP_MS`]
//! for each level of priority. A custodian claims its authority's lowest
//! ranks first; equal ranks go in the order of the commands' ids (minted
//! when they arrive). So priority ages in: a command of priority `p` goes ahead of one
//! of priority `q < p` that became claimable less than `(p - q) x 10 s`
//! earlier, and behind any that has waited longer. No stream of
//! higher-priority commands, however steady, holds a command back longer than
//! `(p - q) x 10 s` behind the commands that arrive after it.
//!
//! The database computes the same rank (`ledger_claim_rank`, migration 0028)
//! when a command enters the queue; the integration tests check that the two
//! agree.

use chrono::{DateTime, Utc};

/// The lowest priority a command can have.
pub const MIN_PRIORITY: i16 = -100;
/// The highest priority a command can have.
pub const MAX_PRIORITY: i16 = 100;
/// What one level of priority is worth, in milliseconds of waiting.
pub const STEP_MS: i64 = 10_000;

/// Why a command's schedule or priority is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("priority {0} is outside {MIN_PRIORITY}..={MAX_PRIORITY}")]
    OutOfRange(i64),
    #[error("priority {asked} is above {max}, the highest kind {kind} allows (its max_priority)")]
    AboveKind { kind: String, asked: i16, max: i16 },
    #[error(
        "deadline {deadline} is not after not_before {not_before}: the command could never start"
    )]
    DeadlineNotAfter {
        not_before: DateTime<Utc>,
        deadline: DateTime<Utc>,
    },
}

/// A kind's priorities: the one its commands get, and the highest one a
/// command may ask for (both 0 by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PriorityRule {
    default: i16,
    max: i16,
}

impl PriorityRule {
    /// A kind's rule from the catalog's `priority` and `max_priority` (unset:
    /// the `priority`, so commands cannot go above their kind).
    pub fn new(default: Option<i64>, max: Option<i64>) -> Result<Self, String> {
        let default = in_range(default.unwrap_or(0)).map_err(|e| format!("priority: {e}"))?;
        let max = match max {
            Some(m) => in_range(m).map_err(|e| format!("max_priority: {e}"))?,
            None => default,
        };
        if max < default {
            return Err(format!(
                "max_priority {max} is below priority {default}: a command could not have the kind's own"
            ));
        }
        Ok(PriorityRule { default, max })
    }

    /// The kind's own priority, which its commands get unless they ask.
    pub fn default_priority(&self) -> i16 {
        self.default
    }

    /// The highest priority a command of the kind may ask for.
    pub fn max(&self) -> i16 {
        self.max
    }

    /// The priority a command of `kind` gets when it asks for `asked`: any
    /// level down to [`MIN_PRIORITY`], none above the kind's `max`.
    pub fn resolve(&self, kind: &str, asked: Option<i64>) -> Result<i16, ScheduleError> {
        let Some(asked) = asked else {
            return Ok(self.default);
        };
        let asked = in_range(asked)?;
        if asked > self.max {
            return Err(ScheduleError::AboveKind {
                kind: kind.to_owned(),
                asked,
                max: self.max,
            });
        }
        Ok(asked)
    }
}

fn in_range(p: i64) -> Result<i16, ScheduleError> {
    i16::try_from(p)
        .ok()
        .filter(|p| (MIN_PRIORITY..=MAX_PRIORITY).contains(p))
        .ok_or(ScheduleError::OutOfRange(p))
}

/// A command's window: a deadline, if any, must come after `not_before`
/// (a command that may not start before it passes could never run). A
/// `not_before` in the past is simply now.
pub fn check_window(
    not_before: Option<DateTime<Utc>>,
    deadline: Option<DateTime<Utc>>,
) -> Result<(), ScheduleError> {
    match (not_before, deadline) {
        (Some(not_before), Some(deadline)) if deadline <= not_before => {
            Err(ScheduleError::DeadlineNotAfter {
                not_before,
                deadline,
            })
        }
        _ => Ok(()),
    }
}

/// The claim rank of a command recorded at `recorded` (see the module's
/// head): lower is claimed first.
pub fn claim_rank(
    recorded: DateTime<Utc>,
    not_before: Option<DateTime<Utc>>,
    priority: i16,
) -> i64 {
    let claimable = not_before.map_or(recorded, |t| recorded.max(t));
    claimable.timestamp_millis() - i64::from(priority) * STEP_MS
}

/// Whether a command is waiting for its time at `now`: pending, with a
/// `not_before` still ahead.
pub fn scheduled(pending: bool, not_before: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    pending && not_before.is_some_and(|t| t > now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn at(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(ms).unwrap()
    }

    const T: i64 = 1_800_000_000_000;

    #[test]
    fn a_kind_without_priorities_gives_zero_and_allows_nothing_above() {
        let rule = PriorityRule::default();
        assert_eq!(rule.resolve("ping", None), Ok(0));
        assert_eq!(rule.resolve("ping", Some(-5)), Ok(-5));
        assert_eq!(
            rule.resolve("ping", Some(1)),
            Err(ScheduleError::AboveKind {
                kind: "ping".into(),
                asked: 1,
                max: 0
            })
        );
    }

    #[test]
    fn a_kind_sets_its_own_and_a_bound_for_commands() {
        let rule = PriorityRule::new(Some(5), Some(20)).unwrap();
        assert_eq!(rule.resolve("steer", None), Ok(5));
        assert_eq!(rule.resolve("steer", Some(20)), Ok(20));
        assert!(rule.resolve("steer", Some(21)).is_err());
        assert_eq!(rule.resolve("steer", Some(-100)), Ok(-100));
        assert_eq!(
            rule.resolve("steer", Some(-101)),
            Err(ScheduleError::OutOfRange(-101))
        );
        assert_eq!(
            rule.resolve("steer", Some(i64::MAX)),
            Err(ScheduleError::OutOfRange(i64::MAX))
        );
        // The max defaults to the kind's own.
        assert_eq!(PriorityRule::new(Some(7), None).unwrap().max(), 7);
    }

    #[test]
    fn a_catalog_rule_out_of_range_or_inverted_is_refused() {
        assert!(PriorityRule::new(Some(101), None).is_err());
        assert!(PriorityRule::new(None, Some(-101)).is_err());
        assert!(PriorityRule::new(Some(10), Some(5)).is_err());
    }

    #[test]
    fn a_deadline_must_come_after_not_before() {
        assert_eq!(check_window(None, None), Ok(()));
        assert_eq!(check_window(Some(at(T)), None), Ok(()));
        assert_eq!(check_window(None, Some(at(T))), Ok(()));
        assert_eq!(check_window(Some(at(T)), Some(at(T + 1))), Ok(()));
        assert!(check_window(Some(at(T)), Some(at(T))).is_err());
        assert!(check_window(Some(at(T + 1)), Some(at(T))).is_err());
    }

    #[test]
    fn scheduled_means_pending_with_its_time_ahead() {
        assert!(scheduled(true, Some(at(T + 1)), at(T)));
        assert!(!scheduled(true, Some(at(T)), at(T)));
        assert!(!scheduled(true, None, at(T)));
        assert!(!scheduled(false, Some(at(T + 1)), at(T)));
    }

    #[test]
    fn a_command_not_before_a_later_time_ranks_from_then() {
        assert_eq!(claim_rank(at(T), None, 0), T);
        assert_eq!(claim_rank(at(T), Some(at(T + 5_000)), 0), T + 5_000);
        // A not_before in the past is its recording.
        assert_eq!(claim_rank(at(T), Some(at(T - 5_000)), 0), T);
        assert_eq!(claim_rank(at(T), None, 3), T - 30_000);
        assert_eq!(claim_rank(at(T), None, -3), T + 30_000);
    }

    #[test]
    fn a_low_priority_command_goes_first_once_it_has_waited_the_gap() {
        // Priority 0 at T; a steady stream of priority 10 commands, one
        // every 100 ms from T on.
        let low = claim_rank(at(T), None, 0);
        let gap = 10 * STEP_MS;
        for k in 0..2_000 {
            let arrival = T + k * 100;
            let high = claim_rank(at(arrival), None, 10);
            // Ahead of the low one only if it came within the gap.
            assert_eq!(high < low, arrival - T < gap, "arrival {arrival}");
        }
    }

    proptest! {
        /// Equal priorities, no schedule: the rank orders as the arrival.
        #[test]
        fn equal_priorities_keep_their_order_of_arrival(
            a in T..T + 1_000_000, b in T..T + 1_000_000,
            p in MIN_PRIORITY..=MAX_PRIORITY,
        ) {
            prop_assert_eq!(claim_rank(at(a), None, p).cmp(&claim_rank(at(b), None, p)), a.cmp(&b));
        }

        /// No command is overtaken by one that became claimable more than
        /// their priority gap times the step after it.
        #[test]
        fn aging_bounds_how_long_a_command_is_overtaken(
            a in T..T + 10_000_000, later in 0_i64..10_000_000,
            pa in MIN_PRIORITY..=MAX_PRIORITY, pb in MIN_PRIORITY..=MAX_PRIORITY,
            nb in proptest::option::of(0_i64..10_000_000),
        ) {
            let b_claimable = nb.map_or(a + later, |n| (a + later).max(a + n));
            let rx = claim_rank(at(a), None, pa);
            let ry = claim_rank(at(a + later), nb.map(|n| at(a + n)), pb);
            let gap = (i64::from(pb) - i64::from(pa)).max(0) * STEP_MS;
            if b_claimable - a > gap {
                prop_assert!(rx < ry);
            }
        }

        #[test]
        fn any_asked_priority_is_within_range_and_the_kind(
            default in MIN_PRIORITY..=MAX_PRIORITY, extra in 0_i16..200,
            asked in proptest::option::of(-300_i64..300),
        ) {
            let max = default.saturating_add(extra).min(MAX_PRIORITY);
            let rule = PriorityRule::new(Some(i64::from(default)), Some(i64::from(max))).unwrap();
            match rule.resolve("k", asked) {
                Ok(p) => {
                    prop_assert!((MIN_PRIORITY..=max).contains(&p));
                    prop_assert_eq!(p, asked.map_or(default, |a| i16::try_from(a).unwrap()));
                }
                Err(_) => prop_assert!(asked.is_some_and(|a| a < i64::from(MIN_PRIORITY) || a > i64::from(max))),
            }
        }
    }
}
