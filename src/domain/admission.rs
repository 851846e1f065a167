//! What a request means, given what the ledger already holds (DESIGN
//! section 3): under an idempotency key, and, for keyless submissions,
//! under the same intent. Uniqueness itself is the database's job (a unique
//! index); this only names the outcome.

use serde_json::{Value, json};
use std::time::Duration;

use super::args_schema::ArgsSchema;
use super::canonical::Policy;
use super::digest::RequestDigest;
use super::schedule::PriorityRule;

/// The outcome of recording a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Nothing was stored under the key: a new command was recorded.
    New,
    /// The same request was stored before: answer with the stored command.
    Replay,
    /// A different request was stored under the key: refuse.
    Conflict,
    /// The same intent as a command still in flight: its outcome is this one's.
    Coalesced,
    /// A near-duplicate of an earlier intent: held for a human.
    Held,
}

impl Disposition {
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::New => "new",
            Disposition::Replay => "replay",
            Disposition::Conflict => "conflict",
            Disposition::Coalesced => "coalesced",
            Disposition::Held => "held",
        }
    }
}

/// `stored` is the digest already recorded under the key, if any.
pub fn disposition(stored: Option<&RequestDigest>, incoming: &RequestDigest) -> Disposition {
    match stored {
        None => Disposition::New,
        Some(stored) if stored == incoming => Disposition::Replay,
        Some(_) => Disposition::Conflict,
    }
}

/// Whether a kind needs a client key, or lets the intent's fingerprint stand in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMode {
    Required,
    Fingerprint,
}

/// What to do with a near-duplicate: the same intent from another run,
/// after the coalescing window and within the horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NearDuplicate {
    Hold,
    Allow,
    Reject,
}

/// Where a kind's idempotency keys and intent fingerprints are unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DedupScope {
    /// Per fleet: two agents of one fleet racing one intent make one command.
    Fleet,
    /// Per principal: each token's principal has a dedup space of its own.
    Principal,
}

impl DedupScope {
    /// The scope a command of this kind is recorded in, for a principal of
    /// `fleet_id`.
    pub fn scope(self, principal_id: uuid::Uuid, fleet_id: uuid::Uuid) -> uuid::Uuid {
        match self {
            DedupScope::Fleet => fleet_id,
            DedupScope::Principal => principal_id,
        }
    }
}

/// What a definite failure does to its intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnFailure {
    /// A command that ended with nothing done (failed, expired, cancelled)
    /// frees its intent: the next request of it from another run records a
    /// new command. `ambiguous` never does.
    Release,
    /// The failure is replayed like any outcome, until the horizon.
    Replay,
}

/// A kind's admission policy (from the catalog).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindPolicy {
    pub canonical: Policy,
    pub key: KeyMode,
    /// Copies of one intent arriving within this time of the first are the same command.
    pub window: Duration,
    pub near_duplicate: NearDuplicate,
    /// After this, the same intent is simply new again.
    pub horizon: Duration,
    /// The authority `POST /v1/invoke` uses for this kind.
    pub authority: Option<String>,
    /// Apply the intent guard to keyed submissions too (agents that make a
    /// new key on every re-plan): a new key for a recent intent is the same
    /// command, or a near-duplicate.
    pub guard_keyed: bool,
    /// Where keys and intent fingerprints are unique (default: the fleet).
    pub dedup_scope: DedupScope,
    /// What a definite failure does to its intent (default: release it).
    pub on_failure: OnFailure,
    /// The args the kind declares (the catalog's `args_schema`): enforced
    /// at admission, and what callers are shown. `None`: any args object.
    pub args_schema: Option<ArgsSchema>,
    /// The kind's priority, and the highest a command may ask for.
    pub priority: PriorityRule,
}

impl Default for KindPolicy {
    fn default() -> Self {
        KindPolicy {
            canonical: Policy::default(),
            key: KeyMode::Required,
            window: Duration::from_secs(5),
            near_duplicate: NearDuplicate::Hold,
            horizon: Duration::from_secs(24 * 3600),
            authority: None,
            guard_keyed: false,
            dedup_scope: DedupScope::Fleet,
            on_failure: OnFailure::Release,
            args_schema: None,
            priority: PriorityRule::default(),
        }
    }
}

impl KindPolicy {
    /// The args schema callers are shown: the declared one (enforced), else
    /// one made from the fields canonical form treats specially, which only
    /// describes (the canonicalizer itself refuses money it cannot read).
    pub fn shown_args_schema(&self) -> Value {
        match &self.args_schema {
            Some(schema) => schema.source().clone(),
            None => args_schema_from(self),
        }
    }
}

/// The command of the same intent, in the principal's scope, that a request
/// is compared with: the one this very request was already answered with
/// (whoever executed it), else the latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latest {
    /// This request (same run, same request) was answered with it before:
    /// it is the request the command was recorded for, or one coalesced
    /// into it. A retry is then the same command, however late.
    pub same_request: bool,
    /// How long ago it arrived.
    pub age: Duration,
    /// The highest epoch this intent has reached (the how-many-th command of it).
    pub epoch: u32,
    /// It ended with nothing done: failed (not dispatched, refused, or not
    /// applied by the reconcile probe), expired or cancelled.
    pub nothing_done: bool,
    /// The request names its run (a run id): a retry of the same request is
    /// then the same run asking again.
    pub run_named: bool,
}

/// What a keyless submission (or a keyed one under the intent guard) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentVerdict {
    /// Record a new command, the `epoch`-th of this intent.
    New { epoch: u32 },
    /// Record a new command, the `epoch`-th of this intent, as the retry of
    /// the latest one, which ended with nothing done.
    Retry { epoch: u32 },
    /// It is the latest command (a retry, or a racing worker in the window).
    Same,
    /// A near-duplicate to hold for a human.
    Held,
    /// A near-duplicate the kind refuses.
    Refused,
}

pub fn intent_verdict(latest: Option<Latest>, policy: &KindPolicy) -> IntentVerdict {
    match latest {
        None => IntentVerdict::New { epoch: 1 },
        // A released failure: the same run asking again still sees the
        // failure it saw; anyone else (or a request naming no run) retries.
        Some(l)
            if l.nothing_done
                && policy.on_failure == OnFailure::Release
                && !(l.same_request && l.run_named) =>
        {
            IntentVerdict::Retry { epoch: l.epoch + 1 }
        }
        // The same run asking again is the same command however late: the
        // horizon only decides what another run's copy of the intent gets.
        Some(l) if l.same_request && l.run_named => IntentVerdict::Same,
        // A request naming no run cannot be told from a new one of the same
        // intent: after the horizon it is new again.
        Some(l) if l.age > policy.horizon => IntentVerdict::New { epoch: l.epoch + 1 },
        Some(l) if l.same_request || l.age <= policy.window => IntentVerdict::Same,
        Some(l) => match policy.near_duplicate {
            NearDuplicate::Hold => IntentVerdict::Held,
            NearDuplicate::Allow => IntentVerdict::New { epoch: l.epoch + 1 },
            NearDuplicate::Reject => IntentVerdict::Refused,
        },
    }
}

/// The key a keyless command is recorded under: its intent and epoch, so
/// that racing copies collide on the unique index.
pub fn derived_key(intent: &RequestDigest, epoch: u32) -> String {
    format!("intent:{intent}:{epoch}")
}

/// Admission policies by kind; kinds the catalog does not name get the
/// default. Also what callers are told about each named kind.
#[derive(Debug, Clone, Default)]
pub struct Policies {
    by_kind: std::collections::HashMap<String, KindPolicy>,
    default: KindPolicy,
    descriptions: std::collections::BTreeMap<String, KindDescription>,
}

impl Policies {
    pub fn get(&self, kind: &str) -> &KindPolicy {
        self.by_kind.get(kind).unwrap_or(&self.default)
    }

    pub fn set(&mut self, kind: &str, policy: KindPolicy) {
        self.by_kind.insert(kind.to_owned(), policy);
    }

    /// Tells callers what `kind` does and what its args look like.
    pub fn describe(&mut self, kind: &str, description: KindDescription) {
        self.descriptions.insert(kind.to_owned(), description);
    }

    /// Every kind the catalog names, by name, with its policy (whose
    /// `shown_args_schema` callers are shown) and what callers are told
    /// about it.
    pub fn kinds(&self) -> Vec<(&str, &KindPolicy, KindDescription)> {
        let mut kinds: Vec<_> = self
            .by_kind
            .iter()
            .map(|(kind, policy)| {
                let described = self.descriptions.get(kind).cloned().unwrap_or_default();
                (kind.as_str(), policy, described)
            })
            .collect();
        kinds.sort_by(|a, b| a.0.cmp(b.0));
        kinds
    }
}

/// What callers are told about a kind besides its args schema (which is
/// the policy's: the schema shown is the schema enforced).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KindDescription {
    pub description: Option<String>,
}

/// The schema a kind's args are shown when the catalog declares none: any
/// object, with the fields its canonical form treats specially described.
fn args_schema_from(policy: &KindPolicy) -> Value {
    let mut properties = serde_json::Map::new();
    for field in &policy.canonical.money_fields {
        properties.insert(field.clone(), json!({"description": MONEY_DESCRIPTION}));
    }
    for field in &policy.canonical.email_fields {
        properties.insert(field.clone(), json!({"type": "string", "format": "email"}));
    }
    json!({"type": "object", "properties": properties})
}

/// How the ledger reads money, for callers.
pub const MONEY_DESCRIPTION: &str = "an amount with its currency: \"12.00 USD\", \"$12.00\", \"USD 12\", or \"1200 cents\" with a \"currency\" field; never without a currency";

#[cfg(test)]
mod tests {
    use super::*;

    fn latest(same_request: bool, age_secs: u64, epoch: u32) -> Option<Latest> {
        Some(Latest {
            same_request,
            age: Duration::from_secs(age_secs),
            epoch,
            nothing_done: false,
            run_named: true,
        })
    }

    fn failed(same_request: bool, run_named: bool, age_secs: u64) -> Option<Latest> {
        Some(Latest {
            same_request,
            age: Duration::from_secs(age_secs),
            epoch: 1,
            nothing_done: true,
            run_named,
        })
    }

    #[test]
    fn a_failure_with_nothing_done_frees_its_intent_for_another_run() {
        let p = KindPolicy::default();
        // Another run, inside or after the window: a new command, the retry.
        assert_eq!(
            intent_verdict(failed(false, true, 1), &p),
            IntentVerdict::Retry { epoch: 2 }
        );
        assert_eq!(
            intent_verdict(failed(false, true, 60), &p),
            IntentVerdict::Retry { epoch: 2 }
        );
        // The same run asking again sees the failure it saw.
        assert_eq!(
            intent_verdict(failed(true, true, 60), &p),
            IntentVerdict::Same
        );
        // A request naming no run cannot be told from a retry: it retries.
        assert_eq!(
            intent_verdict(failed(true, false, 60), &p),
            IntentVerdict::Retry { epoch: 2 }
        );
    }

    #[test]
    fn a_kind_that_replays_failures_keeps_them_and_ambiguous_is_never_freed() {
        let replay = KindPolicy {
            on_failure: OnFailure::Replay,
            ..KindPolicy::default()
        };
        assert_eq!(
            intent_verdict(failed(false, true, 60), &replay),
            IntentVerdict::Held
        );
        // An ambiguous (or applied) command is not "nothing done".
        assert_eq!(
            intent_verdict(latest(false, 60, 1), &KindPolicy::default()),
            IntentVerdict::Held
        );
    }

    #[test]
    fn the_dedup_scope_is_the_fleet_or_the_principal() {
        let (p, f) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
        assert_eq!(DedupScope::Fleet.scope(p, f), f);
        assert_eq!(DedupScope::Principal.scope(p, f), p);
    }

    #[test]
    fn the_first_of_an_intent_is_new() {
        assert_eq!(
            intent_verdict(None, &KindPolicy::default()),
            IntentVerdict::New { epoch: 1 }
        );
    }

    #[test]
    fn a_retry_of_the_same_run_is_the_same_command_however_late() {
        let p = KindPolicy::default();
        for hours in [1, 24, 25, 24 * 365] {
            assert_eq!(
                intent_verdict(latest(true, hours * 3600, 1), &p),
                IntentVerdict::Same,
                "{hours} h later"
            );
        }
        // A short horizon (the outside run's `refund_h`) changes nothing.
        let short = KindPolicy {
            window: Duration::from_secs(1),
            horizon: Duration::from_secs(4),
            ..KindPolicy::default()
        };
        assert_eq!(
            intent_verdict(latest(true, 6, 1), &short),
            IntentVerdict::Same
        );
    }

    #[test]
    fn after_the_horizon_another_run_or_a_request_naming_no_run_is_new_again() {
        let p = KindPolicy::default();
        assert_eq!(
            intent_verdict(latest(false, 25 * 3600, 1), &p),
            IntentVerdict::New { epoch: 2 }
        );
        let unnamed = Some(Latest {
            run_named: false,
            ..latest(true, 25 * 3600, 3).unwrap()
        });
        assert_eq!(intent_verdict(unnamed, &p), IntentVerdict::New { epoch: 4 });
        // Within the horizon a request naming no run is the same command.
        let unnamed = Some(Latest {
            run_named: false,
            ..latest(true, 3600, 1).unwrap()
        });
        assert_eq!(intent_verdict(unnamed, &p), IntentVerdict::Same);
    }

    #[test]
    fn another_run_within_the_window_is_the_same_command() {
        assert_eq!(
            intent_verdict(latest(false, 4, 1), &KindPolicy::default()),
            IntentVerdict::Same
        );
        assert_eq!(
            intent_verdict(latest(false, 5, 1), &KindPolicy::default()),
            IntentVerdict::Same
        );
    }

    #[test]
    fn another_run_after_the_window_is_a_near_duplicate() {
        let hold = KindPolicy::default();
        assert_eq!(
            intent_verdict(latest(false, 6, 1), &hold),
            IntentVerdict::Held
        );
        let allow = KindPolicy {
            near_duplicate: NearDuplicate::Allow,
            ..KindPolicy::default()
        };
        assert_eq!(
            intent_verdict(latest(false, 6, 3), &allow),
            IntentVerdict::New { epoch: 4 }
        );
        let reject = KindPolicy {
            near_duplicate: NearDuplicate::Reject,
            ..KindPolicy::default()
        };
        assert_eq!(
            intent_verdict(latest(false, 6, 1), &reject),
            IntentVerdict::Refused
        );
    }

    #[test]
    fn derived_keys_carry_their_epoch_and_fit_the_key_rules() {
        let d = RequestDigest([0xab; 32]);
        let key = derived_key(&d, 7);
        assert!(key.ends_with(":7"));
        assert!(super::super::IdempotencyKey::new(&key).is_ok());
    }

    #[test]
    fn an_unused_key_is_new() {
        assert_eq!(disposition(None, &RequestDigest([1; 32])), Disposition::New);
    }

    #[test]
    fn the_same_digest_under_a_used_key_is_a_replay() {
        let d = RequestDigest([7; 32]);
        assert_eq!(disposition(Some(&d), &d), Disposition::Replay);
    }

    #[test]
    fn a_different_digest_under_a_used_key_is_a_conflict() {
        let mut other = [7; 32];
        other[31] = 8;
        assert_eq!(
            disposition(Some(&RequestDigest([7; 32])), &RequestDigest(other)),
            Disposition::Conflict
        );
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn any_policy() -> impl Strategy<Value = KindPolicy> {
        (
            0u64..100_000,
            0u64..10_000_000,
            prop_oneof![
                Just(NearDuplicate::Hold),
                Just(NearDuplicate::Allow),
                Just(NearDuplicate::Reject)
            ],
            prop_oneof![Just(OnFailure::Release), Just(OnFailure::Replay)],
        )
            .prop_map(|(window, horizon, near_duplicate, on_failure)| KindPolicy {
                window: Duration::from_secs(window),
                horizon: Duration::from_secs(horizon),
                near_duplicate,
                on_failure,
                ..KindPolicy::default()
            })
    }

    proptest! {
        /// Whatever the kind's window, horizon and near-duplicate rule, and
        /// however late: the same run's same request never records a second
        /// command of an intent it was answered for.
        #[test]
        fn the_same_runs_retry_never_records_a_second_command(
            policy in any_policy(),
            age in 0u64..100_000_000,
            epoch in 1u32..1_000,
            nothing_done: bool,
        ) {
            let latest = Latest {
                same_request: true,
                age: Duration::from_secs(age),
                epoch,
                nothing_done,
                run_named: true,
            };
            prop_assert_eq!(intent_verdict(Some(latest), &policy), IntentVerdict::Same);
        }
    }
}
