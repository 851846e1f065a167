//! Validated names that arrive from clients: command kinds and authority ids.
//! The same rules stand as CHECK constraints in the schema.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{what} must not be empty")]
    Empty { what: &'static str },
    #[error("{what} is longer than {max} characters")]
    TooLong { what: &'static str, max: usize },
    #[error("{what} {rule}")]
    BadCharacter {
        what: &'static str,
        rule: &'static str,
    },
}

/// What a command does (`refund`, `steer`); selects the executor.
/// Lowercase ASCII letter first, then `[a-z0-9_.-]`, at most 64 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Kind(String);

/// The executor that may run a command (`agent-7`).
/// Alphanumeric first, then `[A-Za-z0-9_.:-]`, at most 128 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AuthorityId(String);

/// [`AuthorityId`]'s rule as a regular expression, for the OpenAPI document
/// (every place it shows an authority id uses this one copy).
pub const AUTHORITY_ID_PATTERN: &str = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$";

/// [`Kind`]'s rule as a regular expression, for the OpenAPI document (every
/// place it shows a kind uses this one copy).
pub const KIND_PATTERN: &str = r"^[a-z][a-z0-9_.\-]{0,63}$";

impl Kind {
    pub const MAX_LEN: usize = 64;

    pub fn parse(s: &str) -> Result<Self, NameError> {
        const WHAT: &str = "kind";
        check_len(WHAT, s, Self::MAX_LEN)?;
        let mut chars = s.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        let rest_ok = chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'));
        if !(first_ok && rest_ok) {
            return Err(NameError::BadCharacter {
                what: WHAT,
                rule: "must start with a lowercase letter and use only a-z, 0-9, '_', '.', '-'",
            });
        }
        Ok(Kind(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl AuthorityId {
    pub const MAX_LEN: usize = 128;

    pub fn parse(s: &str) -> Result<Self, NameError> {
        const WHAT: &str = "authority";
        check_len(WHAT, s, Self::MAX_LEN)?;
        let mut chars = s.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
        let rest_ok =
            chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-'));
        if !(first_ok && rest_ok) {
            return Err(NameError::BadCharacter {
                what: WHAT,
                rule: "must start with a letter or digit and use only A-Z, a-z, 0-9, '_', '.', ':', '-'",
            });
        }
        Ok(AuthorityId(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The authority a submission names: just the id (`"agent-1"`), or the id
/// pinned to one generation (`{"id": "agent-1", "generation": 7}`), in which
/// case the command runs only under that generation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AuthorityRef {
    pub id: AuthorityId,
    pub pinned_generation: Option<i64>,
}

impl AuthorityRef {
    /// How the authority enters the canonical request: the bare id when not
    /// pinned (so unpinned digests are those of version 1), an object when pinned.
    pub fn canonical(&self) -> serde_json::Value {
        match self.pinned_generation {
            None => serde_json::Value::String(self.id.as_str().to_owned()),
            Some(generation) => {
                serde_json::json!({"id": self.id.as_str(), "generation": generation})
            }
        }
    }
}

fn check_len(what: &'static str, s: &str, max: usize) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError::Empty { what });
    }
    if s.len() > max {
        return Err(NameError::TooLong { what, max });
    }
    Ok(())
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for AuthorityId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordinary_kinds_and_authorities_are_accepted() {
        for k in ["refund", "steer.left", "a", "send_email-v2"] {
            assert!(Kind::parse(k).is_ok(), "{k}");
        }
        for a in ["agent-7", "A", "eu-west:payments.1", "7"] {
            assert!(AuthorityId::parse(a).is_ok(), "{a}");
        }
    }

    #[test]
    fn malformed_kinds_are_refused() {
        for k in [
            "",
            "Refund",
            "1refund",
            "re fund",
            "refund/x",
            "réfund",
            &"a".repeat(65),
        ] {
            assert!(Kind::parse(k).is_err(), "{k:?}");
        }
    }

    #[test]
    fn malformed_authorities_are_refused() {
        for a in [
            "",
            "-agent",
            "agent 7",
            "agent/7",
            "agent\n",
            &"a".repeat(129),
        ] {
            assert!(AuthorityId::parse(a).is_err(), "{a:?}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics_and_accepted_names_fit_the_rules(s in "\\PC{0,140}") {
            if let Ok(k) = Kind::parse(&s) {
                prop_assert!(k.as_str().len() <= Kind::MAX_LEN && k.as_str().is_ascii());
            }
            if let Ok(a) = AuthorityId::parse(&s) {
                prop_assert!(a.as_str().len() <= AuthorityId::MAX_LEN && a.as_str().is_ascii());
            }
        }
    }
}
