//! A command's identity digest (`identity-v2`), computed where the command
//! is assembled, byte for byte as the database's `ledger_identity_digest`
//! computes it: SHA-256 of the text PostgreSQL prints for a `jsonb` array
//! of the command's immutable columns.
//!
//! The submit path stores it with the pending row, so the claim reads it
//! instead of hashing the row's arguments again. The database stays the
//! judge: `verify` recomputes the digest from the columns and never reads
//! the stored one, so a digest that differed would be reported, not
//! trusted. A row stored without one (hand-typed SQL, a row of an older
//! release) is hashed by the claim as before.
//!
//! The text is PostgreSQL's output of a `jsonb` value ([`jsonb_text`]):
//! object keys shortest first, then by their bytes; `", "` between
//! elements and `": "` after a key; strings escaped as `escape_json` does;
//! numbers as `numeric` prints the text it was given.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

/// The immutable columns `identity-v2` covers, in its order.
#[derive(Debug, Clone, Copy)]
pub struct Identity<'a> {
    pub id: Uuid,
    pub scope: Uuid,
    pub idempotency_key: &'a str,
    pub request_digest: &'a [u8],
    pub digest_version: i16,
    pub kind: &'a str,
    pub authority_id: &'a str,
    pub run_id: Option<&'a str>,
    pub args: &'a Value,
    pub canonical: &'a Value,
    /// Stored to the microsecond: pass a time already truncated
    /// ([`to_micros`]), as the row will hold it.
    pub created_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub pinned_generation: Option<i64>,
    pub intent_digest: Option<&'a [u8]>,
    pub canonical_rules: &'a [String],
    pub intent_epoch: Option<i32>,
}

impl Identity<'_> {
    /// The text `ledger_identity_digest` hashes.
    pub fn text(&self) -> String {
        let mut out = String::with_capacity(256);
        out.push('[');
        let mut items = Items::new(&mut out);
        items.string("identity-v2");
        items.string(&self.id.to_string());
        items.string(&self.scope.to_string());
        items.string(self.idempotency_key);
        items.string(&hex::encode(self.request_digest));
        items.raw(&self.digest_version.to_string());
        items.string(self.kind);
        items.string(self.authority_id);
        items.optional_string(self.run_id);
        items.value(self.args);
        items.value(self.canonical);
        items.string(&timestamp(self.created_at));
        items.optional_string(self.deadline_at.map(timestamp).as_deref());
        items.raw(&optional_number(self.pinned_generation));
        items.optional_string(self.intent_digest.map(hex::encode).as_deref());
        items.strings(self.canonical_rules);
        items.raw(&optional_number(self.intent_epoch));
        out.push(']');
        out
    }

    /// SHA-256 of [`Identity::text`].
    pub fn digest(&self) -> [u8; 32] {
        Sha256::digest(self.text().as_bytes()).into()
    }
}

/// A time as the row stores it: to the microsecond, earlier nanoseconds
/// dropped.
pub fn to_micros(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap_or(at)
}

/// The text PostgreSQL prints for `value::jsonb`, given the text serde_json
/// writes for it (which is what the database receives).
pub fn jsonb_text(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// Writes the elements of a JSON array, each after a `", "` but the first.
struct Items<'o> {
    out: &'o mut String,
    first: bool,
}

impl<'o> Items<'o> {
    fn new(out: &'o mut String) -> Self {
        Items { out, first: true }
    }

    fn next(&mut self) {
        if !self.first {
            self.out.push_str(", ");
        }
        self.first = false;
    }

    fn raw(&mut self, text: &str) {
        self.next();
        self.out.push_str(text);
    }

    fn string(&mut self, s: &str) {
        self.next();
        write_string(self.out, s);
    }

    fn optional_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.string(s),
            None => self.raw("null"),
        }
    }

    fn strings(&mut self, list: &[String]) {
        self.next();
        self.out.push('[');
        for (i, s) in list.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            write_string(self.out, s);
        }
        self.out.push(']');
    }

    fn value(&mut self, v: &Value) {
        self.next();
        write_value(self.out, v);
    }
}

fn optional_number<N: ToString>(n: Option<N>) -> String {
    n.map_or_else(|| "null".to_owned(), |n| n.to_string())
}

/// `to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.
fn timestamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&numeric_text(&n.to_string())),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // jsonb's order: shorter keys first, then by their bytes.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| (a.0.len(), a.0.as_bytes()).cmp(&(b.0.len(), b.0.as_bytes())));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(out, key);
                out.push_str(": ");
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// PostgreSQL's `escape_json`: the two-character escapes it knows, other
/// characters below U+0020 as `\u00xx` (lower-case hex), the rest as is.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// What `numeric` prints for a JSON number's text: the value written out
/// in full, with as many decimals as the text had after its point less its
/// exponent (`1.5e-7` is `0.00000015`, `1e3` is `1000`, `2.50` stays
/// `2.50`), and no sign on a zero.
pub fn numeric_text(number: &str) -> String {
    let (negative, unsigned) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (
            &unsigned[..at],
            unsigned[at + 1..].parse::<i64>().unwrap_or(0),
        ),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = format!("{whole}{fraction}");
    // Where the point falls in `digits`.
    let length = |s: &str| i64::try_from(s.len()).unwrap_or(i64::MAX);
    let point = length(whole).saturating_add(exponent);
    let (int_part, frac_part) = match usize::try_from(point) {
        Err(_) => {
            let zeros = usize::try_from(point.unsigned_abs()).unwrap_or(0);
            (String::new(), format!("{}{digits}", "0".repeat(zeros)))
        }
        Ok(at) if at >= digits.len() => (
            format!("{digits}{}", "0".repeat(at - digits.len())),
            String::new(),
        ),
        Ok(at) => (digits[..at].to_owned(), digits[at..].to_owned()),
    };
    let int_part = int_part.trim_start_matches('0');
    let int_part = if int_part.is_empty() { "0" } else { int_part };
    let zero = digits.bytes().all(|b| b == b'0');
    let mut out = String::with_capacity(int_part.len() + frac_part.len() + 2);
    if negative && !zero {
        out.push('-');
    }
    out.push_str(int_part);
    // What is right of the point once the exponent moved it: as many digits
    // as the text had after its point less its exponent, none when fewer.
    if !frac_part.is_empty() {
        out.push('.');
        out.push_str(&frac_part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::digest::tests::arb_json;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn numbers_are_written_out_as_numeric_prints_them() {
        for (given, printed) in [
            ("0", "0"),
            ("-0", "0"),
            ("-0.0", "0.0"),
            ("12", "12"),
            ("-12", "-12"),
            ("100.0", "100.0"),
            ("2.50", "2.50"),
            ("0.5", "0.5"),
            ("1e21", "1000000000000000000000"),
            ("1E+2", "100"),
            ("1.5e-7", "0.00000015"),
            ("-1.25e1", "-12.5"),
            ("1.2300e1", "12.300"),
            ("12e-1", "1.2"),
            ("5e-324", &format!("0.{}5", "0".repeat(323))),
        ] {
            assert_eq!(numeric_text(given), printed, "for {given}");
        }
    }

    #[test]
    fn objects_print_shorter_keys_first_and_space_after_separators() {
        let v = json!({"bb": 1, "a": [true, null], "c": {"zz": "x", "y": 2.0}, "ab": {}});
        assert_eq!(
            jsonb_text(&v),
            r#"{"a": [true, null], "c": {"y": 2.0, "zz": "x"}, "ab": {}, "bb": 1}"#
        );
    }

    #[test]
    fn strings_escape_as_escape_json_does() {
        let v = json!("q\"b\\\u{8}\u{c}\n\r\t\u{1}\u{1f}\u{7f}é\u{2028}😀/");
        assert_eq!(
            jsonb_text(&v),
            "\"q\\\"b\\\\\\b\\f\\n\\r\\t\\u0001\\u001f\u{7f}é\u{2028}😀/\""
        );
    }

    #[test]
    fn times_keep_microseconds_and_drop_the_rest() {
        let at = DateTime::parse_from_rfc3339("2026-12-07T06:01:02.123456789Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(timestamp(to_micros(at)), "2026-12-07T06:01:02.123456Z");
        let whole = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(timestamp(whole), "2026-01-02T03:04:05.000000Z");
    }

    #[test]
    fn the_text_lists_the_columns_in_identity_v2_order() {
        let args = json!({"amount": "12.00"});
        let id = Identity {
            id: Uuid::nil(),
            scope: Uuid::max(),
            idempotency_key: "k",
            request_digest: &[0xab; 2],
            digest_version: 3,
            kind: "refund",
            authority_id: "payments",
            run_id: None,
            args: &args,
            canonical: &json!([]),
            created_at: DateTime::from_timestamp_micros(1).unwrap(),
            deadline_at: None,
            pinned_generation: Some(7),
            intent_digest: Some(&[1]),
            canonical_rules: &["money".to_owned(), "trace".to_owned()],
            intent_epoch: None,
        };
        assert_eq!(
            id.text(),
            "[\"identity-v2\", \"00000000-0000-0000-0000-000000000000\", \
             \"ffffffff-ffff-ffff-ffff-ffffffffffff\", \"k\", \"abab\", 3, \"refund\", \
             \"payments\", null, {\"amount\": \"12.00\"}, [], \"1970-01-01T00:00:00.000001Z\", \
             null, 7, \"01\", [\"money\", \"trace\"], null]"
        );
        assert_eq!(id.digest(), <[u8; 32]>::from(Sha256::digest(id.text())));
    }

    proptest! {
        // The text is JSON that means the value it was written from.
        #[test]
        fn the_text_parses_back_to_the_same_value(v in arb_json()) {
            let back: Value = serde_json::from_str(&jsonb_text(&v)).unwrap();
            prop_assert!(same_value(&back, &v), "{} against {}", back, v);
        }

        // A number's text is the same number, whatever form serde wrote.
        #[test]
        fn a_number_keeps_its_value(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            let text = numeric_text(&json!(f).to_string());
            prop_assert_eq!(text.parse::<f64>().unwrap(), f);
            prop_assert!(!text.contains(['e', 'E']));
        }
    }

    /// Equal as JSON values, numbers compared by value (`1e2` is `100`).
    fn same_value(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
            }
            _ => a == b,
        }
    }
}
