//! Bearer tokens: their printed form, the hash stored in place of them, and
//! the short prefix shown in listings. Randomness comes in from the caller.

use sha2::{Digest as _, Sha256};

/// Marks command-ledger tokens, so a leaked one is recognisable in scans.
pub const TOKEN_PREFIX: &str = "clt_";
/// Characters of a token kept in clear for listings (`clt_` and 8 more).
pub const LISTED_PREFIX_LEN: usize = 12;

/// The printed token for 32 random bytes.
pub fn format_token(random: &[u8; 32]) -> String {
    format!("{TOKEN_PREFIX}{}", hex::encode(random))
}

/// What is stored instead of the token.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The non-secret part of a token used to name it in listings.
pub fn listed_prefix(token: &str) -> &str {
    token.get(..LISTED_PREFIX_LEN).unwrap_or(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_and_carry_all_their_randomness() {
        let t = format_token(&[0xab; 32]);
        assert!(t.starts_with(TOKEN_PREFIX));
        assert_eq!(t.len(), TOKEN_PREFIX.len() + 64);
        assert_ne!(format_token(&[0xab; 32]), format_token(&[0xac; 32]));
    }

    #[test]
    fn the_listed_prefix_reveals_only_a_few_random_characters() {
        let t = format_token(&[0x12; 32]);
        assert_eq!(listed_prefix(&t), "clt_12121212");
        assert_eq!(listed_prefix("short"), "short");
    }

    #[test]
    fn the_hash_is_sha256_of_the_whole_token() {
        assert_eq!(
            hex::encode(token_hash("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
