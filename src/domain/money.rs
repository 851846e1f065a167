//! Money as the canonicalizer reads it: `"$12.00"`, `"12.00 USD"`, `"USD 12"`,
//! `"1200 cents"` with a currency beside it, `12.5` with a currency beside it;
//! exact decimal arithmetic into ISO 4217 minor units (JPY 0 decimals, BHD 3).

use serde_json::Value;

use super::canon_error::CanonError;

#[derive(Debug, PartialEq)]
pub(super) struct Money {
    pub(super) minor: i64,
    pub(super) currency: &'static str,
    pub(super) used_sibling_currency: bool,
    /// The amount named no currency, and the kind's own was used.
    pub(super) used_kind_currency: bool,
}

impl Money {
    pub(super) fn to_value(&self) -> Value {
        serde_json::json!({"amount_minor": self.minor, "currency": self.currency})
    }
}

/// `sibling`: the currency field beside the amount; `kind`: the kind's own
/// currency (catalog `currency = "USD"`), for amounts that name none.
pub(super) fn parse_money(
    v: &Value,
    sibling: Option<&str>,
    kind: Option<&str>,
    path: &str,
) -> Result<Money, CanonError> {
    // A JSON number may print with an exponent (`1e20`); a person writing
    // money in text never does, so an exponent there is refused, not read.
    let (text, exponent_allowed) = match v {
        Value::Number(n) => (n.to_string(), true),
        Value::String(s) => (s.trim().to_owned(), false),
        other => {
            return Err(CanonError::BadMoney {
                path: path.into(),
                text: other.to_string(),
            });
        }
    };
    let bad = || CanonError::BadMoney {
        path: path.into(),
        text: text.clone(),
    };
    let (currency_in_text, number, cents) = split_money(&text, exponent_allowed).ok_or_else(bad)?;
    let kind = kind.map(|k| resolve_code(k, path)).transpose()?;
    let mut used_kind = false;
    let (currency, used_sibling) = match (currency_in_text, sibling) {
        (Some(MoneyUnit::Code(code)), _) => (code, false),
        (Some(MoneyUnit::Symbol(default, compatible)), Some(given)) => {
            let given_code = resolve_code(given, path)?;
            if compatible.contains(&given_code) {
                (given_code, true)
            } else {
                (default, false)
            }
        }
        // "$" in a kind that counts in CAD is CAD.
        (Some(MoneyUnit::Symbol(_, compatible)), None)
            if kind.is_some_and(|k| compatible.contains(&k)) =>
        {
            used_kind = true;
            (kind.expect("checked above"), false)
        }
        (Some(MoneyUnit::Symbol(default, _)), None) => (default, false),
        (None, Some(given)) => (resolve_code(given, path)?, true),
        (None, None) => match kind {
            Some(k) => {
                used_kind = true;
                (k, false)
            }
            None => {
                return Err(CanonError::AmbiguousMoney {
                    path: path.into(),
                    text,
                });
            }
        },
    };
    let digits = minor_units(currency).expect("resolved codes are known");
    let minor = if cents {
        if number.contains('.') {
            return Err(bad());
        }
        number
            .parse::<i64>()
            .map_err(|_| CanonError::OutOfRange { path: path.into() })?
    } else {
        to_minor(&number, digits).ok_or_else(|| {
            if too_many_decimals(&number, digits) {
                CanonError::TooPrecise {
                    path: path.into(),
                    text: text.clone(),
                    currency: currency.into(),
                    digits,
                }
            } else {
                CanonError::OutOfRange { path: path.into() }
            }
        })?
    };
    Ok(Money {
        minor,
        currency,
        used_sibling_currency: used_sibling,
        used_kind_currency: used_kind,
    })
}

fn too_many_decimals(number: &str, digits: u32) -> bool {
    number
        .split_once('.')
        .is_some_and(|(_, frac)| frac.trim_end_matches('0').len() > digits as usize)
}

fn resolve_code(given: &str, path: &str) -> Result<&'static str, CanonError> {
    let code = given.trim().to_ascii_uppercase();
    CURRENCIES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(c, _)| *c)
        .ok_or(CanonError::UnknownCurrency {
            path: path.into(),
            code,
        })
}

#[derive(Debug)]
enum MoneyUnit {
    Code(&'static str),
    /// A symbol: its usual currency, and the currencies it may stand for.
    Symbol(&'static str, &'static [&'static str]),
}

const SYMBOLS: &[(&str, &str, &[&str])] = &[
    ("US$", "USD", &["USD"]),
    (
        "$",
        "USD",
        &["USD", "CAD", "AUD", "NZD", "MXN", "SGD", "HKD"],
    ),
    ("€", "EUR", &["EUR"]),
    ("£", "GBP", &["GBP"]),
    ("¥", "JPY", &["JPY", "CNY"]),
    ("₹", "INR", &["INR"]),
    ("₩", "KRW", &["KRW"]),
    ("CHF", "CHF", &["CHF"]),
];

/// Splits `"$12.00"`, `"12.00 USD"`, `"USD 12"`, `"1200 cents"`, `"12"`
/// into (unit, number with `.` as decimal point and no separators, counts cents).
/// An exponent (`1e2`) only when `exponent_allowed` (the text of a JSON number).
fn split_money(text: &str, exponent_allowed: bool) -> Option<(Option<MoneyUnit>, String, bool)> {
    let t = text.trim();
    let (negative, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest.trim_start()),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let mut unit = None;
    let mut cents = false;
    let mut rest = t.to_owned();
    // A symbol or code in front.
    for (sym, code, compatible) in SYMBOLS {
        if let Some(r) = rest.strip_prefix(sym) {
            unit = Some(if *sym == "CHF" {
                MoneyUnit::Code(code)
            } else {
                MoneyUnit::Symbol(code, compatible)
            });
            rest = r.trim_start().to_owned();
            break;
        }
    }
    if unit.is_none() && rest.len() > 3 && rest.is_char_boundary(3) {
        let (head, tail) = rest.split_at(3);
        if head.chars().all(|c| c.is_ascii_alphabetic())
            && tail.trim_start().starts_with(|c: char| c.is_ascii_digit())
        {
            let code = CURRENCIES
                .iter()
                .find(|(c, _)| c.eq_ignore_ascii_case(head))?
                .0;
            unit = Some(MoneyUnit::Code(code));
            rest = tail.trim_start().to_owned();
        }
    }
    // A code, symbol or "cents" behind.
    if unit.is_none() {
        let lower = rest.to_ascii_lowercase();
        for word in ["cents", "cent", "minor units", "minor"] {
            if let Some(r) = lower.strip_suffix(word) {
                cents = true;
                rest = rest[..r.len()].trim_end().to_owned();
                break;
            }
        }
    }
    if unit.is_none() && !cents {
        for (sym, code, compatible) in SYMBOLS {
            if let Some(r) = rest.strip_suffix(sym) {
                unit = Some(MoneyUnit::Symbol(code, compatible));
                rest = r.trim_end().to_owned();
                break;
            }
        }
    }
    if unit.is_none() && !cents && rest.len() > 3 && rest.is_char_boundary(rest.len() - 3) {
        let (head, tail) = rest.split_at(rest.len() - 3);
        if tail.chars().all(|c| c.is_ascii_alphabetic())
            && head.trim_end().ends_with(|c: char| c.is_ascii_digit())
        {
            let code = CURRENCIES
                .iter()
                .find(|(c, _)| c.eq_ignore_ascii_case(tail))?
                .0;
            unit = Some(MoneyUnit::Code(code));
            rest = head.trim_end().to_owned();
        }
    }
    let number = plain_number(&rest, exponent_allowed)?;
    Some((
        unit,
        if negative {
            format!("-{number}")
        } else {
            number
        },
        cents,
    ))
}

/// `1,234.50` → `1234.50`; `12` → `12`; an exponent (`1e2`) only when
/// `exponent_allowed`.
fn plain_number(s: &str, exponent_allowed: bool) -> Option<String> {
    let s = s.trim();
    if s.is_empty() || s.len() > 40 {
        return None;
    }
    if let Some((mantissa, exp)) = s.split_once(['e', 'E']) {
        if !exponent_allowed {
            return None;
        }
        let exp: i32 = exp.parse().ok()?;
        let mantissa = plain_number(mantissa, false)?;
        return shift_decimal(&mantissa, exp);
    }
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let int_ok = if int.contains(',') {
        let groups: Vec<&str> = int.split(',').collect();
        groups[0].len() <= 3
            && !groups[0].is_empty()
            && groups[1..].iter().all(|g| g.len() == 3)
            && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_digit()))
    } else {
        !int.is_empty() && int.chars().all(|c| c.is_ascii_digit())
    };
    let frac_ok = frac.is_none_or(|f| !f.is_empty() && f.chars().all(|c| c.is_ascii_digit()));
    if !(int_ok && frac_ok) {
        return None;
    }
    let int = int.replace(',', "");
    Some(match frac {
        Some(f) => format!("{int}.{f}"),
        None => int,
    })
}

/// Moves the decimal point of a plain number by `exp` places.
fn shift_decimal(n: &str, exp: i32) -> Option<String> {
    let negative = n.starts_with('-');
    let n = n.trim_start_matches('-');
    let (int, frac) = n.split_once('.').unwrap_or((n, ""));
    let digits = format!("{int}{frac}");
    let point = i64::try_from(int.len()).ok()? + i64::from(exp);
    if !(-40..=40).contains(&point) {
        return None;
    }
    let s = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(usize::try_from(-point).ok()?))
    } else if usize::try_from(point).ok()? >= digits.len() {
        format!(
            "{digits}{}",
            "0".repeat(usize::try_from(point).ok()? - digits.len())
        )
    } else {
        let (a, b) = digits.split_at(usize::try_from(point).ok()?);
        format!("{a}.{b}")
    };
    Some(if negative { format!("-{s}") } else { s })
}

/// Exact conversion of a plain decimal string to minor units; `None` when it
/// has more significant decimals than the currency allows or is too large.
fn to_minor(number: &str, digits: u32) -> Option<i64> {
    let negative = number.starts_with('-');
    let n = number.trim_start_matches('-');
    let (int, frac) = n.split_once('.').unwrap_or((n, ""));
    let frac = frac.trim_end_matches('0');
    let d = usize::try_from(digits).ok()?;
    if frac.len() > d {
        return None;
    }
    let padded = format!("{int}{frac}{}", "0".repeat(d - frac.len()));
    let value: i64 = padded.parse().ok()?;
    Some(if negative { -value } else { value })
}

/// ISO 4217 minor units of a currency code.
pub fn minor_units(code: &str) -> Option<u32> {
    CURRENCIES.iter().find(|(c, _)| *c == code).map(|(_, d)| *d)
}

/// ISO 4217 active codes and their minor units.
#[rustfmt::skip]
const CURRENCIES: &[(&str, u32)] = &[
    ("AED", 2), ("AFN", 2), ("ALL", 2), ("AMD", 2), ("ANG", 2), ("AOA", 2), ("ARS", 2), ("AUD", 2),
    ("AWG", 2), ("AZN", 2), ("BAM", 2), ("BBD", 2), ("BDT", 2), ("BGN", 2), ("BHD", 3), ("BIF", 0),
    ("BMD", 2), ("BND", 2), ("BOB", 2), ("BRL", 2), ("BSD", 2), ("BTN", 2), ("BWP", 2), ("BYN", 2),
    ("BZD", 2), ("CAD", 2), ("CDF", 2), ("CHF", 2), ("CLF", 4), ("CLP", 0), ("CNY", 2), ("COP", 2),
    ("CRC", 2), ("CUP", 2), ("CVE", 2), ("CZK", 2), ("DJF", 0), ("DKK", 2), ("DOP", 2), ("DZD", 2),
    ("EGP", 2), ("ERN", 2), ("ETB", 2), ("EUR", 2), ("FJD", 2), ("FKP", 2), ("GBP", 2), ("GEL", 2),
    ("GHS", 2), ("GIP", 2), ("GMD", 2), ("GNF", 0), ("GTQ", 2), ("GYD", 2), ("HKD", 2), ("HNL", 2),
    ("HTG", 2), ("HUF", 2), ("IDR", 2), ("ILS", 2), ("INR", 2), ("IQD", 3), ("IRR", 2), ("ISK", 0),
    ("JMD", 2), ("JOD", 3), ("JPY", 0), ("KES", 2), ("KGS", 2), ("KHR", 2), ("KMF", 0), ("KPW", 2),
    ("KRW", 0), ("KWD", 3), ("KYD", 2), ("KZT", 2), ("LAK", 2), ("LBP", 2), ("LKR", 2), ("LRD", 2),
    ("LSL", 2), ("LYD", 3), ("MAD", 2), ("MDL", 2), ("MGA", 2), ("MKD", 2), ("MMK", 2), ("MNT", 2),
    ("MOP", 2), ("MRU", 2), ("MUR", 2), ("MVR", 2), ("MWK", 2), ("MXN", 2), ("MYR", 2), ("MZN", 2),
    ("NAD", 2), ("NGN", 2), ("NIO", 2), ("NOK", 2), ("NPR", 2), ("NZD", 2), ("OMR", 3), ("PAB", 2),
    ("PEN", 2), ("PGK", 2), ("PHP", 2), ("PKR", 2), ("PLN", 2), ("PYG", 0), ("QAR", 2), ("RON", 2),
    ("RSD", 2), ("RUB", 2), ("RWF", 0), ("SAR", 2), ("SBD", 2), ("SCR", 2), ("SDG", 2), ("SEK", 2),
    ("SGD", 2), ("SHP", 2), ("SLE", 2), ("SOS", 2), ("SRD", 2), ("SSP", 2), ("STN", 2), ("SVC", 2),
    ("SYP", 2), ("SZL", 2), ("THB", 2), ("TJS", 2), ("TMT", 2), ("TND", 3), ("TOP", 2), ("TRY", 2),
    ("TTD", 2), ("TWD", 2), ("TZS", 2), ("UAH", 2), ("UGX", 0), ("USD", 2), ("UYI", 0), ("UYU", 2),
    ("UYW", 4), ("UZS", 2), ("VES", 2), ("VND", 0), ("VUV", 0), ("WST", 2), ("XAF", 0), ("XCD", 2),
    ("XOF", 0), ("XPF", 0), ("YER", 2), ("ZAR", 2), ("ZMW", 2), ("ZWL", 2),
];
