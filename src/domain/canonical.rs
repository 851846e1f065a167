//! The canonicalizer (DESIGN section 4): one intent, however it is spelled.
//! Pure, versioned and explainable: volatile fields go, money becomes
//! `{"amount_minor", "currency"}` in ISO 4217 minor units, e-mail addresses
//! are lowercased, numbers take one form, and the rules that fired are
//! listed with their paths. Ambiguous money (no currency anywhere) is an
//! error, never a guess. Since version 3, every string and object key is
//! first brought to Unicode NFC, so `"José"` typed on one platform and on
//! another is one name. Object keys are sorted when the form is serialised
//! (`digest::canonical_json`).

use serde_json::{Map, Number, Value};
use unicode_normalization::{UnicodeNormalization, is_nfc};

pub use super::canon_error::CanonError;
use super::money::{minor_units, parse_money};

/// Version of these rules; stored with every command's digest. Version 2
/// is version 3 without the NFC pass: for args whose text is already in
/// NFC (all ASCII, and what most platforms send) both give the same form.
pub const CANONICALIZER_VERSION: i16 = 3;

/// The first version that brings strings and keys to Unicode NFC.
pub const NFC_SINCE: i16 = 3;

/// Field names dropped wherever they appear (compared case-, `_`- and `-`-insensitively).
pub const DEFAULT_VOLATILE: &[&str] = &["request_id", "idempotency_key", "timestamp", "trace_id"];

/// Field names whose values are money when auto-detection is on.
const MONEY_NAMES: &[&str] = &["amount", "price", "total", "cost", "fee"];
/// Sibling fields that name the currency of a money field.
const CURRENCY_NAMES: &[&str] = &["currency", "currency_code", "ccy"];

/// Longest string considered as money or e-mail (longer ones are plain text).
pub(super) const MAX_SCALAR_LEN: usize = 254;

/// How a kind's args are canonicalized (from the catalog; defaults: auto-detect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Detect money and e-mail fields by name and shape.
    pub auto_detect: bool,
    /// Always money (top-level or dotted paths such as `refund.amount`).
    pub money_fields: Vec<String>,
    /// Always e-mail addresses.
    pub email_fields: Vec<String>,
    /// Dropped, on top of `DEFAULT_VOLATILE`.
    pub volatile_fields: Vec<String>,
    /// The kind's own currency (ISO 4217): an amount that names none (no
    /// code, no currency field beside it: `"1200 cents"`, `"12.00"`) is in
    /// it. Without one, such an amount is refused, never guessed.
    pub currency: Option<String>,
    /// Money fields (dotted paths, as `money_fields`) whose amount must be
    /// more than zero: a refund of a negative amount is a charge, and one
    /// of nothing is no refund. Read after the amount is parsed, so every
    /// spelling of the amount is held to it.
    pub positive_money: Vec<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            auto_detect: true,
            money_fields: Vec::new(),
            email_fields: Vec::new(),
            volatile_fields: Vec::new(),
            currency: None,
            positive_money: Vec::new(),
        }
    }
}

/// The canonical args and what was done to reach them.
#[derive(Debug, Clone, PartialEq)]
pub struct Canonical {
    pub value: Value,
    /// `rule@path`, sorted: `drop_volatile@/trace_id`, `money@/amount`, ...
    pub rules: Vec<String>,
}

/// Canonicalizes `args` under `policy`, at the current version.
pub fn canonicalize(args: &Value, policy: &Policy) -> Result<Canonical, CanonError> {
    canonicalize_at(args, policy, CANONICALIZER_VERSION)
}

/// Canonicalizes `args` under the rules of `version` (2 or later), so that a
/// request can be compared with a command recorded under an older version.
pub fn canonicalize_at(
    args: &Value,
    policy: &Policy,
    version: i16,
) -> Result<Canonical, CanonError> {
    let mut rules = Vec::new();
    let value = if version >= NFC_SINCE {
        let normalized = nfc(args, "", &mut rules)?;
        walk(&normalized, "", policy, &mut rules)?
    } else {
        walk(args, "", policy, &mut rules)?
    };
    rules.sort();
    rules.dedup();
    Ok(Canonical { value, rules })
}

/// Every string and object key in Unicode NFC (`nfc@path` where one
/// changed). Two keys of one object that become the same are refused: which
/// one was meant cannot be known.
fn nfc(value: &Value, path: &str, rules: &mut Vec<String>) -> Result<Value, CanonError> {
    let composed = |s: &str| -> Option<String> { (!is_nfc(s)).then(|| s.nfc().collect()) };
    Ok(match value {
        Value::String(s) => match composed(s) {
            Some(c) => {
                rules.push(format!("nfc@{}", display(path)));
                Value::String(c)
            }
            None => value.clone(),
        },
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| nfc(v, &format!("{path}/{i}"), rules))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, v) in map {
                let (key, changed) = match composed(key) {
                    Some(c) => (c, true),
                    None => (key.clone(), false),
                };
                let child = format!("{path}/{key}");
                if changed {
                    rules.push(format!("nfc@{child}"));
                }
                let v = nfc(v, &child, rules)?;
                if out.insert(key, v).is_some() {
                    return Err(CanonError::DuplicateKey { path: child });
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    })
}

fn norm(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn named(key: &str, names: &[&str]) -> bool {
    let k = norm(key);
    names.iter().any(|n| norm(n) == k)
}

fn listed(path: &str, fields: &[String]) -> bool {
    // `path` is a JSON pointer like /refund/amount; fields are dotted.
    let dotted = path.trim_start_matches('/').replace('/', ".");
    fields.iter().any(|f| f == &dotted)
}

fn walk(
    value: &Value,
    path: &str,
    policy: &Policy,
    rules: &mut Vec<String>,
) -> Result<Value, CanonError> {
    match value {
        Value::Object(map) => walk_object(map, path, policy, rules),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| walk(v, &format!("{path}/{i}"), policy, rules))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Number(n) => {
            let canonical = canonical_number(n);
            if &canonical != n {
                rules.push(format!("number@{}", display(path)));
            }
            Ok(Value::Number(canonical))
        }
        Value::String(s) if is_email_field(path, s, policy) => {
            let lower = s.trim().to_lowercase();
            if &lower != s {
                rules.push(format!("email_lowercase@{}", display(path)));
            }
            Ok(Value::String(lower))
        }
        other => Ok(other.clone()),
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

fn is_email_field(path: &str, s: &str, policy: &Policy) -> bool {
    listed(path, &policy.email_fields) || (policy.auto_detect && looks_like_email(s))
}

fn looks_like_email(s: &str) -> bool {
    let s = s.trim();
    if s.len() > MAX_SCALAR_LEN || s.chars().any(char::is_whitespace) {
        return false;
    }
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
}

fn walk_object(
    map: &Map<String, Value>,
    path: &str,
    policy: &Policy,
    rules: &mut Vec<String>,
) -> Result<Value, CanonError> {
    let volatile = |k: &str| {
        named(k, DEFAULT_VOLATILE) || policy.volatile_fields.iter().any(|v| norm(v) == norm(k))
    };
    let currency_key = map.keys().find(|k| named(k, CURRENCY_NAMES)).cloned();
    let currency_given = currency_key
        .as_ref()
        .and_then(|k| map[k].as_str())
        .map(str::to_owned);
    let mut out = Map::new();
    let mut currency_consumed = false;
    for (key, v) in map {
        let child = format!("{path}/{key}");
        if volatile(key) {
            rules.push(format!("drop_volatile@{child}"));
            continue;
        }
        let positive = listed(&child, &policy.positive_money);
        let is_money = positive
            || listed(&child, &policy.money_fields)
            || (policy.auto_detect && named(key, MONEY_NAMES) && money_shaped(v));
        if positive && is_canonical_money(v) {
            let minor = v["amount_minor"].as_i64().unwrap_or(0);
            if minor <= 0 {
                return Err(CanonError::NotPositive {
                    path: child,
                    text: v.to_string(),
                });
            }
        }
        if is_money && !is_canonical_money(v) {
            let money = parse_money(
                v,
                currency_given.as_deref(),
                policy.currency.as_deref(),
                &child,
            )?;
            if positive && money.minor <= 0 {
                return Err(CanonError::NotPositive {
                    path: child,
                    text: match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    },
                });
            }
            if money.used_kind_currency {
                rules.push(format!("kind_currency@{child}"));
            }
            if money.used_sibling_currency {
                currency_consumed = true;
            } else if let Some(given) = &currency_given {
                // The amount named its currency; a currency field beside it must agree.
                let given = given.trim().to_ascii_uppercase();
                if given != money.currency {
                    return Err(CanonError::CurrencyMismatch {
                        path: child,
                        found: money.currency.into(),
                        given,
                    });
                }
                currency_consumed = true;
            }
            rules.push(format!("money@{child}"));
            out.insert(key.clone(), money.to_value());
            continue;
        }
        out.insert(key.clone(), walk(v, &child, policy, rules)?);
    }
    if currency_consumed && let Some(k) = currency_key {
        out.remove(&k);
        rules.push(format!("currency_merged@{path}/{k}"));
    }
    Ok(Value::Object(out))
}

/// Whether a value under a money-like name is read as money: any number
/// and any string. Reading it may then fail, and the request is refused: a
/// bare amount with no currency anywhere is never guessed, and text that is
/// no amount (`"twelve bucks"`) is never passed through as if it were one.
/// Objects are walked (they may hold the amount's parts), and `true` or
/// `null` are no amount anybody could mistake.
fn money_shaped(v: &Value) -> bool {
    matches!(v, Value::Number(_) | Value::String(_))
}

fn is_canonical_money(v: &Value) -> bool {
    let Value::Object(m) = v else { return false };
    m.len() == 2
        && m.get("amount_minor").is_some_and(Value::is_i64)
        && m.get("currency")
            .and_then(Value::as_str)
            .is_some_and(|c| minor_units(c).is_some())
}

/// Integers stay integers; a float with no fractional part becomes an
/// integer; other floats keep their shortest round-trip form.
fn canonical_number(n: &Number) -> Number {
    if n.is_i64() || n.is_u64() {
        return n.clone();
    }
    match n.as_f64() {
        #[allow(clippy::cast_possible_truncation)]
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Number::from(f as i64),
        _ => n.clone(),
    }
}

#[cfg(test)]
mod tests;
