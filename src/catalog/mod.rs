//! The catalog (`ledger.toml`): which kinds exist, how each is executed,
//! and how its requests are admitted. It is read here into the admission
//! policies (`domain::admission::Policies`, pure) and the executors'
//! settings (built in `custodian/executors.rs`), so that the API, which
//! needs only the policies, does not depend on the executors.
//!
//! ```toml
//! [kinds.refund]
//! url = "http://127.0.0.1:9000/refund"   # HTTP executor
//! timeout = "10s"                        # the effect's deadline (default 30s)
//! headers = { "x-api-key" = "secret" }   # sent with every call
//! reconcile_url = "http://127.0.0.1:9000/applied/{key}"   # optional probe
//! probe_margin = "10s"                   # its 404 counts only after timeout + this (default 10s)
//!
//! authority = "payments"                # the authority POST /v1/invoke uses
//! key = "fingerprint"                    # or "required" (default): may the intent stand in for a key?
//! coalesce_window = "5s"                 # copies within this are one command (default 5s; "0s": none)
//! near_duplicate = "hold"                # hold | allow | reject, after the window (default hold)
//! near_duplicate_horizon = "24h"         # after this, the same intent is new (default 24h)
//! guard_keyed = false                    # the same guard for keyed submissions (opt-in)
//! dedup_scope = "fleet"                  # or "principal": where keys and intents are unique
//! on_failure = "release"                 # or "replay": may a retry run an intent that ended with nothing done?
//! money_fields = ["amount"]              # on top of auto-detection (auto_detect = true)
//! positive_money = ["amount"]            # money fields whose amount must be more than zero
//! currency = "USD"                       # amounts naming no currency ("1200 cents") are in it
//! email_fields = ["customer"]
//! volatile_fields = ["attempt"]          # dropped, on top of request_id, trace_id, ...
//!
//! priority = 0                           # -100..=100: higher is claimed first (with aging)
//! max_priority = 10                      # the most a command may ask for (default: priority)
//!
//! description = "Refund a customer"     # for callers: GET /v1/kinds, MCP tools
//! [kinds.refund.args_schema]             # a JSON Schema of the args: enforced at
//! type = "object"                        # admission, shown to callers (unset: any args)
//! required = ["to", "amount"]
//! properties.to = { type = "string", format = "email" }
//!
//! [kinds.refund.retry]                  # retries of failures with nothing done
//! max_attempts = 5                       # attempts in all, the first included
//! initial_interval = "1s"                # the first wait (default 1s)
//! coefficient = 2.0                      # each wait this times the one before (default 2)
//! max_interval = "1m"                    # the longest wait (default 1m)
//! deadline = "10m"                       # no attempt starts later than this after the first
//! jitter = 0.2                           # each wait drawn within 20 % either side (default 0.2)
//! statuses = [429, 503]                  # the provider's answers that mean "not applied"
//! error_field = "/error/code"            # optional: a listed status counts only if the value
//! error_values = ["rate_limited"]        # at this JSON pointer is one of these
//!
//! provider = "stripe"                   # its limits: [providers.stripe] below
//!
//! [kinds.ping]
//! executor = "noop"                      # built in
//!
//! [providers.stripe]                    # limits held in the database, across custodians
//! max_in_flight = 5                      # claimed and not finished, at most
//! rate = 50                              # started per second, over time
//! burst = 10                             # started at once after a quiet spell (default: rate)
//! ```

mod providers;

pub use providers::ProviderConfig;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::domain::admission::{
    DedupScope, KeyMode, KindDescription, KindPolicy, NearDuplicate, OnFailure, Policies,
};
use crate::domain::args_schema::ArgsSchema;
use crate::domain::canonical::Policy;
use crate::domain::retry::{NotAppliedContract, RetryPolicy};
use crate::domain::schedule::PriorityRule;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    #[serde(default)]
    pub kinds: BTreeMap<String, KindConfig>,
    /// Limits per provider (`domain::limits`), by the provider's name.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindConfig {
    /// `http` (the default when `url` is set) or `noop`.
    pub executor: Option<String>,
    pub url: Option<String>,
    pub timeout: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The reconcile probe for the HTTP executor (`{key}` is replaced by the
    /// downstream key): 200 applied, 404 not applied, else unknown.
    pub reconcile_url: Option<String>,
    /// How long past `timeout` a dispatched effect may still take hold at
    /// the provider (default 10s): the probe's "not found" means "not
    /// applied" only once `timeout` plus this has passed since
    /// `effect_started`.
    pub probe_margin: Option<String>,
    pub authority: Option<String>,
    /// `required` or `fingerprint`.
    pub key: Option<String>,
    pub coalesce_window: Option<String>,
    /// `hold`, `allow` or `reject`.
    pub near_duplicate: Option<String>,
    pub near_duplicate_horizon: Option<String>,
    pub auto_detect: Option<bool>,
    /// Apply the intent guard to keyed submissions as well.
    pub guard_keyed: Option<bool>,
    /// `fleet` (default) or `principal`.
    pub dedup_scope: Option<String>,
    /// `release` (default) or `replay`.
    pub on_failure: Option<String>,
    /// The kind's currency (ISO 4217) for amounts that name none.
    pub currency: Option<String>,
    #[serde(default)]
    pub money_fields: Vec<String>,
    /// Money fields whose amount must be more than zero (a refund of a
    /// negative amount is a charge): read as money, and refused at
    /// admission otherwise.
    #[serde(default)]
    pub positive_money: Vec<String>,
    #[serde(default)]
    pub email_fields: Vec<String>,
    #[serde(default)]
    pub volatile_fields: Vec<String>,
    /// What the kind does, in a sentence, for callers: `GET /v1/kinds`
    /// lists it and `command-ledger mcp` makes it the tool's description.
    pub description: Option<String>,
    /// A JSON Schema of the kind's args: enforced at admission (args that
    /// do not match are refused, nothing recorded) and shown to callers (an
    /// MCP tool's input schema). Compiled when the catalog is loaded; one
    /// that is not a valid JSON Schema refuses the catalog. Unset: any args
    /// object, and callers are shown one made from `money_fields` and
    /// `email_fields`.
    pub args_schema: Option<Value>,
    /// The kind's priority (-100..=100, default 0): higher is claimed first
    /// within an authority, with aging (`domain::schedule`).
    pub priority: Option<i64>,
    /// The highest priority a command of the kind may ask for (default:
    /// `priority`).
    pub max_priority: Option<i64>,
    /// Retries of failures with nothing done (`domain::retry`).
    pub retry: Option<RetryConfig>,
    /// The provider group whose limits its commands are claimed under
    /// (`[providers.<name>]`).
    pub provider: Option<String>,
}

/// `[kinds.<kind>.retry]`: see `domain::retry::RetryPolicy`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    pub max_attempts: u32,
    pub initial_interval: Option<String>,
    pub coefficient: Option<f64>,
    pub max_interval: Option<String>,
    pub deadline: Option<String>,
    pub jitter: Option<f64>,
    #[serde(default)]
    pub statuses: Vec<u16>,
    pub error_field: Option<String>,
    #[serde(default)]
    pub error_values: Vec<String>,
}

impl RetryConfig {
    /// The policy this section describes, or what is wrong with it.
    pub fn policy(&self) -> Result<RetryPolicy, String> {
        let defaults = RetryPolicy::default();
        let parsed = |field: &str, v: &str| {
            parse_duration(v)
                .ok_or_else(|| format!("retry.{field} {v:?} is not like 500ms, 10s or 2m"))
        };
        let duration = |field: &str, value: &Option<String>, default: Duration| match value {
            Some(v) => parsed(field, v),
            None => Ok(default),
        };
        RetryPolicy {
            max_attempts: self.max_attempts,
            initial_interval: duration(
                "initial_interval",
                &self.initial_interval,
                defaults.initial_interval,
            )?,
            coefficient: self.coefficient.unwrap_or(defaults.coefficient),
            max_interval: duration("max_interval", &self.max_interval, defaults.max_interval)?,
            deadline: self
                .deadline
                .as_deref()
                .map(|d| parsed("deadline", d))
                .transpose()?,
            jitter: self.jitter.unwrap_or(defaults.jitter),
            contract: NotAppliedContract {
                statuses: self.statuses.clone(),
                error_field: self.error_field.clone(),
                error_values: self.error_values.clone(),
            },
        }
        .checked()
        .map_err(|e| format!("retry: {e}"))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a valid catalog: {source}")]
    Parse {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("kind {kind}: {problem}")]
    Invalid { kind: String, problem: String },
}

impl Catalog {
    pub fn load(path: &Path) -> Result<Catalog, CatalogError> {
        let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
            path: path.display().to_string(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| CatalogError::Parse {
            path: path.display().to_string(),
            source: Box::new(source),
        })
    }
}

impl Catalog {
    /// The admission policy of every kind the catalog names.
    pub fn policies(&self) -> Result<Policies, CatalogError> {
        // The custodian applies the limits; the API refuses a catalog whose
        // limits cannot work, as the custodian would.
        self.providers()?;
        let mut policies = Policies::default();
        for (kind, cfg) in &self.kinds {
            let invalid = |problem: String| CatalogError::Invalid {
                kind: kind.clone(),
                problem,
            };
            let duration = |field: &str, value: &Option<String>, default: Duration| match value {
                Some(v) => parse_duration(v)
                    .ok_or_else(|| invalid(format!("{field} {v:?} is not like 5s, 10m or 24h"))),
                None => Ok(default),
            };
            let defaults = KindPolicy::default();
            let key = match cfg.key.as_deref() {
                None | Some("required") => KeyMode::Required,
                Some("fingerprint") => KeyMode::Fingerprint,
                Some(other) => {
                    return Err(invalid(format!("key {other:?} is required or fingerprint")));
                }
            };
            let near_duplicate = match cfg.near_duplicate.as_deref() {
                None | Some("hold") => NearDuplicate::Hold,
                Some("allow") => NearDuplicate::Allow,
                Some("reject") => NearDuplicate::Reject,
                Some(other) => {
                    return Err(invalid(format!(
                        "near_duplicate {other:?} is hold, allow or reject"
                    )));
                }
            };
            let dedup_scope = match cfg.dedup_scope.as_deref() {
                None | Some("fleet") => DedupScope::Fleet,
                Some("principal") => DedupScope::Principal,
                Some(other) => {
                    return Err(invalid(format!(
                        "dedup_scope {other:?} is fleet or principal"
                    )));
                }
            };
            let on_failure = match cfg.on_failure.as_deref() {
                None | Some("release") => OnFailure::Release,
                Some("replay") => OnFailure::Replay,
                Some(other) => {
                    return Err(invalid(format!(
                        "on_failure {other:?} is release or replay"
                    )));
                }
            };
            let currency = match cfg.currency.as_deref().map(str::trim) {
                None => None,
                Some(c) if crate::domain::money::minor_units(&c.to_ascii_uppercase()).is_some() => {
                    Some(c.to_ascii_uppercase())
                }
                Some(c) => {
                    return Err(invalid(format!(
                        "currency {c:?} is not an ISO 4217 code such as USD, EUR or JPY"
                    )));
                }
            };
            if let Some(a) = &cfg.authority {
                crate::domain::AuthorityId::parse(a).map_err(|e| invalid(e.to_string()))?;
            }
            // The custodian applies the policy; the API refuses a catalog
            // whose policy cannot work, as the custodian would.
            if let Some(retry) = &cfg.retry {
                retry.policy().map_err(invalid)?;
            }
            let policy = KindPolicy {
                canonical: Policy {
                    auto_detect: cfg.auto_detect.unwrap_or(true),
                    money_fields: cfg.money_fields.clone(),
                    email_fields: cfg.email_fields.clone(),
                    volatile_fields: cfg.volatile_fields.clone(),
                    currency,
                    positive_money: cfg.positive_money.clone(),
                },
                key,
                // "0s": no coalescing; a copy after the first is a near-duplicate.
                window: match cfg.coalesce_window.as_deref().map(str::trim) {
                    Some("0s" | "0ms" | "0") => Duration::ZERO,
                    _ => duration("coalesce_window", &cfg.coalesce_window, defaults.window)?,
                },
                near_duplicate,
                horizon: duration(
                    "near_duplicate_horizon",
                    &cfg.near_duplicate_horizon,
                    defaults.horizon,
                )?,
                authority: cfg.authority.clone(),
                guard_keyed: cfg.guard_keyed.unwrap_or(false),
                dedup_scope,
                on_failure,
                args_schema: cfg
                    .args_schema
                    .as_ref()
                    .map(ArgsSchema::compile)
                    .transpose()
                    .map_err(invalid)?,
                priority: PriorityRule::new(cfg.priority, cfg.max_priority).map_err(invalid)?,
            };
            policies.set(kind, policy);
            policies.describe(
                kind,
                KindDescription {
                    description: cfg.description.clone(),
                },
            );
        }
        Ok(policies)
    }
}

/// The quickstart's `refund`, which `serve` with its private cluster adds
/// when the catalog has none: keyless allowed (the intent stands in for a
/// key), run by the in-process custodian of `payments`, its args declared
/// (and so enforced): `to` and `amount` are required.
pub fn quickstart_refund(policies: &mut Policies) {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "to": {"type": "string", "format": "email", "description": "who gets the money"},
            "amount": {"type": "string", "description": crate::domain::admission::MONEY_DESCRIPTION},
            "currency": {"type": "string", "description": "ISO 4217, when the amount does not name it"},
            "mode": {"type": "string", "enum": ["hang", "stall", "reject", "late", "busy"],
                     "description": "demo only: how the sink misbehaves"}
        },
        "required": ["to", "amount"]
    });
    policies.set(
        "refund",
        KindPolicy {
            key: KeyMode::Fingerprint,
            authority: Some("payments".to_owned()),
            args_schema: Some(
                ArgsSchema::compile(&schema).expect("the quickstart's schema is a JSON Schema"),
            ),
            // A refund of a negative amount is a charge; of nothing, no refund.
            canonical: Policy {
                positive_money: vec!["amount".to_owned()],
                ..Policy::default()
            },
            ..KindPolicy::default()
        },
    );
    policies.describe(
        "refund",
        KindDescription {
            description: Some(
                "Refund money to a customer through the demo payments provider. Repeating a call \
                 is safe: copies of one refund (retried, spelled differently, sent by another \
                 worker) make one refund."
                    .to_owned(),
            ),
        },
    );
}

/// The retry policy of the quickstart's `refund` with the demo sink: its
/// `503` means "not applied" (the sink's `busy` mode answers it, with
/// `Retry-After: 1`), retried up to 3 attempts in all.
pub fn quickstart_refund_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        initial_interval: Duration::from_secs(1),
        coefficient: 2.0,
        max_interval: Duration::from_secs(10),
        deadline: Some(Duration::from_secs(60)),
        jitter: 0.2,
        contract: NotAppliedContract {
            statuses: vec![503],
            ..NotAppliedContract::default()
        },
    }
}

/// `500ms`, `10s`, `2m`, `24h`, `7d`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (number, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))?;
    let n: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(3600).map(Duration::from_secs),
        "d" => n.checked_mul(86_400).map(Duration::from_secs),
        _ => None,
    }
    .filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kind_declares_its_admission_policy() {
        let catalog: Catalog = toml::from_str(
            r#"
            [kinds.refund]
            authority = "payments"
            key = "fingerprint"
            coalesce_window = "2s"
            near_duplicate = "reject"
            near_duplicate_horizon = "1h"
            money_fields = ["sum"]
            dedup_scope = "principal"
            on_failure = "replay"
            currency = "usd"
            "#,
        )
        .unwrap();
        let policies = catalog.policies().unwrap();
        let p = policies.get("refund");
        assert_eq!(p.key, KeyMode::Fingerprint);
        assert_eq!(
            (p.window, p.horizon),
            (Duration::from_secs(2), Duration::from_secs(3600))
        );
        assert_eq!(p.near_duplicate, NearDuplicate::Reject);
        assert_eq!(p.authority.as_deref(), Some("payments"));
        assert_eq!(p.canonical.money_fields, ["sum"]);
        assert_eq!(
            (p.dedup_scope, p.on_failure),
            (DedupScope::Principal, OnFailure::Replay)
        );
        assert_eq!(p.canonical.currency.as_deref(), Some("USD"));
        assert_eq!(policies.get("other"), &KindPolicy::default());
        let no_window: Catalog = toml::from_str("[kinds.r]\ncoalesce_window = \"0s\"").unwrap();
        assert_eq!(
            no_window.policies().unwrap().get("r").window,
            Duration::ZERO
        );
        assert!(
            catalog.effects().unwrap().get("refund").is_none(),
            "a policy-only kind has no executor"
        );
        for bad in [
            "key = \"maybe\"",
            "near_duplicate = \"shrug\"",
            "coalesce_window = \"soon\"",
            "authority = \"a b\"",
            "dedup_scope = \"team\"",
            "on_failure = \"retry\"",
            "currency = \"dollars\"",
        ] {
            let c: Catalog = toml::from_str(&format!("[kinds.refund]\n{bad}")).unwrap();
            assert!(c.policies().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_kind_tells_callers_what_its_args_look_like() {
        let catalog: Catalog = toml::from_str(
            r#"
            [kinds.refund]
            authority = "payments"
            description = "Refund a customer"
            [kinds.refund.args_schema]
            required = ["to"]
            properties.to = { type = "string", format = "email" }

            [kinds.steer]
            money_fields = ["budget"]
            email_fields = ["owner"]
            "#,
        )
        .unwrap();
        let policies = catalog.policies().unwrap();
        let kinds = policies.kinds();
        let names: Vec<&str> = kinds.iter().map(|k| k.0).collect();
        assert_eq!(names, ["refund", "steer"]);
        assert_eq!(kinds[0].2.description.as_deref(), Some("Refund a customer"));
        assert_eq!(
            kinds[0].1.shown_args_schema(),
            json!({"type": "object", "required": ["to"],
                   "properties": {"to": {"type": "string", "format": "email"}}})
        );
        // The declared schema is the one admission enforces.
        let declared = kinds[0].1.args_schema.as_ref().unwrap();
        assert!(declared.check(&json!({"to": "ada@example.com"})).is_ok());
        assert!(
            declared
                .check(&json!({"customer": "ada@example.com"}))
                .is_err()
        );
        // No schema given: nothing enforced, and one from the fields
        // canonical form reads is shown.
        assert!(kinds[1].1.args_schema.is_none());
        let steer = kinds[1].1.shown_args_schema();
        assert_eq!(steer["type"], "object");
        assert_eq!(steer["properties"]["owner"]["format"], "email");
        assert!(steer["properties"]["budget"]["description"].is_string());
    }

    #[test]
    fn a_catalog_whose_args_schema_is_not_a_json_schema_is_refused_at_load() {
        for (bad, says) in [
            ("args_schema = 3", "must be a table"),
            (
                "args_schema = { type = \"string\" }",
                "its type is \"object\"",
            ),
            (
                "args_schema = { properties.to = { type = \"text\" } }",
                "not a valid JSON Schema",
            ),
            (
                "args_schema = { properties.to = { \"$ref\" = \"https://example.com/s.json\" } }",
                "not a valid JSON Schema",
            ),
        ] {
            let c: Catalog = toml::from_str(&format!("[kinds.refund]\n{bad}")).unwrap();
            let e = c.policies().unwrap_err().to_string();
            assert!(
                e.starts_with("kind refund: ") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn durations_parse_in_milliseconds_seconds_and_minutes() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("24h"), Some(Duration::from_secs(86_400)));
        for bad in ["", "10", "s", "0s", "1w", "-1s", "1.5s"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
