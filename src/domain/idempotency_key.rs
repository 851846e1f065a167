//! The `Idempotency-Key` header value: an RFC 8941 sf-string (`"abc"`, with
//! `\"` and `\\` escapes) or a bare value such as a UUID. The decoded key is
//! 1-255 characters of printable ASCII.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the Idempotency-Key header is required")]
    Missing,
    #[error("only one Idempotency-Key header may be sent")]
    Repeated,
    #[error("the idempotency key must not be empty")]
    Empty,
    #[error("the idempotency key is longer than {max} characters", max = IdempotencyKey::MAX_LEN)]
    TooLong,
    #[error("the idempotency key may contain only printable ASCII")]
    NotPrintable,
    #[error("the quoted idempotency key is malformed: {0}")]
    BadQuoting(&'static str),
}

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    /// Parses the raw header bytes. Surrounding spaces are allowed (RFC 9110
    /// field values may carry optional whitespace); tabs and controls are not.
    pub fn parse_header(raw: &[u8]) -> Result<Self, KeyError> {
        let trimmed = trim_spaces(raw);
        let key = if let Some(quoted) = trimmed.strip_prefix(b"\"") {
            unquote(quoted)?
        } else {
            if trimmed.iter().any(|&b| !(0x21..=0x7e).contains(&b)) {
                return Err(KeyError::NotPrintable);
            }
            trimmed.to_vec()
        };
        Self::from_bytes(key)
    }

    /// Accepts an already decoded key (for example one stored in the ledger).
    pub fn new(key: &str) -> Result<Self, KeyError> {
        Self::from_bytes(key.as_bytes().to_vec())
    }

    fn from_bytes(key: Vec<u8>) -> Result<Self, KeyError> {
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > Self::MAX_LEN {
            return Err(KeyError::TooLong);
        }
        if key.iter().any(|&b| !(0x20..=0x7e).contains(&b)) {
            return Err(KeyError::NotPrintable);
        }
        Ok(IdempotencyKey(
            String::from_utf8(key).expect("printable ASCII is UTF-8"),
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn trim_spaces(mut b: &[u8]) -> &[u8] {
    while let [b' ', rest @ ..] = b {
        b = rest;
    }
    while let [rest @ .., b' '] = b {
        b = rest;
    }
    b
}

/// Decodes the body of an sf-string after its opening quote.
fn unquote(body: &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(body.len());
    let mut bytes = body.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&c @ (b'"' | b'\\')) => out.push(c),
                _ => {
                    return Err(KeyError::BadQuoting(
                        "a backslash may only escape '\"' or '\\'",
                    ));
                }
            },
            b'"' => {
                return if bytes.next().is_none() {
                    Ok(out)
                } else {
                    Err(KeyError::BadQuoting("characters after the closing quote"))
                };
            }
            0x20..=0x7e => out.push(b),
            _ => return Err(KeyError::NotPrintable),
        }
    }
    Err(KeyError::BadQuoting("missing closing quote"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &str) -> Result<String, KeyError> {
        IdempotencyKey::parse_header(s.as_bytes()).map(|k| k.0)
    }

    #[test]
    fn bare_and_quoted_keys_are_decoded() {
        assert_eq!(parse("abc-123").unwrap(), "abc-123");
        assert_eq!(
            parse("0b9f7c1e-8d55-4a77-9d37-3f2a1e0c9b11").unwrap(),
            "0b9f7c1e-8d55-4a77-9d37-3f2a1e0c9b11"
        );
        assert_eq!(parse("\"abc 123\"").unwrap(), "abc 123");
        assert_eq!(
            parse(r#""say \"hi\" \\ bye""#).unwrap(),
            r#"say "hi" \ bye"#
        );
        assert_eq!(parse("  spaced  ").unwrap(), "spaced");
    }

    #[test]
    fn a_bare_key_and_its_quoted_spelling_are_the_same_key() {
        assert_eq!(parse("order-1").unwrap(), parse("\"order-1\"").unwrap());
    }

    #[test]
    fn empty_long_and_unprintable_keys_are_refused() {
        assert_eq!(parse(""), Err(KeyError::Empty));
        assert_eq!(parse("\"\""), Err(KeyError::Empty));
        assert_eq!(parse(&"k".repeat(255)).map(|k| k.len()), Ok(255));
        assert_eq!(parse(&"k".repeat(256)), Err(KeyError::TooLong));
        assert_eq!(parse("a b"), Err(KeyError::NotPrintable));
        assert_eq!(parse("a\tb"), Err(KeyError::NotPrintable));
        assert_eq!(
            IdempotencyKey::parse_header(b"caf\xc3\xa9"),
            Err(KeyError::NotPrintable)
        );
        assert_eq!(parse("\"tab\there\""), Err(KeyError::NotPrintable));
    }

    #[test]
    fn malformed_quoting_is_refused() {
        assert!(matches!(parse("\"open"), Err(KeyError::BadQuoting(_))));
        assert!(matches!(parse("\"a\"b"), Err(KeyError::BadQuoting(_))));
        assert!(matches!(parse(r#""a\n""#), Err(KeyError::BadQuoting(_))));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_accepted_keys_are_printable(raw in prop::collection::vec(any::<u8>(), 0..600)) {
            if let Ok(k) = IdempotencyKey::parse_header(&raw) {
                prop_assert!(!k.0.is_empty() && k.0.len() <= 255);
                prop_assert!(k.0.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            }
        }

        #[test]
        fn every_printable_key_survives_quoting(key in "[ -~]{1,255}") {
            let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
            prop_assert_eq!(parse(&quoted).unwrap(), key);
        }
    }
}
