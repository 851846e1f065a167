//! What a request under an idempotency key means, given what the ledger
//! already holds under that key (DESIGN section 3). Uniqueness itself is the
//! database's job (a unique index); this only names the outcome.

use super::digest::RequestDigest;

/// The outcome of recording a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Nothing was stored under the key: a new command was recorded.
    New,
    /// The same request was stored before: answer with the stored command.
    Replay,
    /// A different request was stored under the key: refuse.
    Conflict,
}

impl Disposition {
    pub fn as_str(self) -> &'static str {
        match self {
            Disposition::New => "new",
            Disposition::Replay => "replay",
            Disposition::Conflict => "conflict",
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

#[cfg(test)]
mod tests {
    use super::*;

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
