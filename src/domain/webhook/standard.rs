//! The Standard Webhooks signature (<https://www.standardwebhooks.com>):
//! three headers, `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64>`, the last HMAC-SHA256 over
//! `"{id}.{timestamp}.{body}"`. Its key is what follows `whsec_` in the
//! endpoint's secret, base64-decoded, as the specification's libraries read
//! a secret (an endpoint's 64 hex digits are valid base64: 48 bytes). Sent
//! beside `Ledger-Signature`, so receivers written against either check.

use super::{SECRET_PREFIX, VerifyError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;
use std::time::Duration;

/// The message's id: the event's, the same on every attempt.
pub const ID_HEADER: &str = "webhook-id";
/// The attempt's time, in unix seconds.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Space-separated `v1,<base64>` signatures.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// The HMAC key of a secret: the base64 after `whsec_` (or the whole
/// secret, without the prefix); `None` when that is not base64.
pub fn key(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
    BASE64.decode(encoded).ok().filter(|key| !key.is_empty())
}

fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `webhook-signature` value for message `id` of `body` sent at
/// `timestamp`; `None` when the secret holds no base64 key.
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = key(secret)?;
    let digest = mac(&key, id, timestamp, body).finalize().into_bytes();
    Some(format!("v1,{}", BASE64.encode(digest)))
}

/// Checks a delivery's three headers against its raw body as the
/// specification's libraries do: a timestamp within `tolerance` of `now`,
/// then any `v1` signature of the space-separated list matching (other
/// versions ignored), compared in constant time.
pub fn verify(
    secret: &str,
    id: &str,
    timestamp: &str,
    signatures: &str,
    body: &[u8],
    now: i64,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let key = key(secret).ok_or(VerifyError::Malformed)?;
    let timestamp: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::Malformed)?;
    let away = now.abs_diff(timestamp);
    if away > tolerance.as_secs() {
        return Err(VerifyError::OutsideTolerance { seconds: away });
    }
    let expected = mac(&key, id, timestamp, body);
    let matched = signatures
        .split(' ')
        .filter_map(|s| s.split_once(','))
        .filter(|(version, _)| *version == "v1")
        .any(|(_, value)| {
            BASE64
                .decode(value)
                .is_ok_and(|bytes| expected.clone().verify_slice(&bytes).is_ok())
        });
    if matched {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TOLERANCE: Duration = Duration::from_secs(300);

    /// The specification's own example (its README and every library's tests).
    #[test]
    fn the_specification_s_example_signs_and_verifies() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let signed = signature(secret, id, 1_614_265_330, body).unwrap();
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert_eq!(
            verify(
                secret,
                id,
                "1614265330",
                &signed,
                body,
                1_614_265_330,
                TOLERANCE
            ),
            Ok(())
        );
    }

    #[test]
    fn an_endpoint_s_hex_secret_is_a_base64_key() {
        let secret = super::super::format_secret(&[7; 32]);
        assert_eq!(key(&secret).unwrap().len(), 48);
        assert!(signature(&secret, "e", 1, b"x").is_some());
        assert_eq!(key("whsec_not base64!"), None);
        assert_eq!(signature("whsec_", "e", 1, b"x"), None);
    }

    #[test]
    fn a_tampered_body_a_stale_time_and_another_id_are_refused() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let signed = signature(secret, "e1", 1000, b"{}").unwrap();
        let check = |id: &str, body: &[u8], now: i64| {
            verify(secret, id, "1000", &signed, body, now, TOLERANCE)
        };
        assert_eq!(check("e1", b"{}", 1000), Ok(()));
        assert_eq!(check("e1", b"{} ", 1000), Err(VerifyError::Mismatch));
        assert_eq!(check("e2", b"{}", 1000), Err(VerifyError::Mismatch));
        assert_eq!(
            check("e1", b"{}", 1301),
            Err(VerifyError::OutsideTolerance { seconds: 301 })
        );
        assert_eq!(check("e1", b"{}", 1300), Ok(()));
    }

    #[test]
    fn any_v1_of_the_list_may_match_and_other_versions_are_ignored() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let signed = signature(secret, "e", 5, b"x").unwrap();
        let list = format!("v1a,zzz v1,AAAA {signed}");
        assert_eq!(verify(secret, "e", "5", &list, b"x", 5, TOLERANCE), Ok(()));
        assert_eq!(
            verify(secret, "e", "5", "v2,abc", b"x", 5, TOLERANCE),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(secret, "e", "soon", &signed, b"x", 5, TOLERANCE),
            Err(VerifyError::Malformed)
        );
    }

    proptest! {
        #[test]
        fn what_is_signed_verifies_and_a_changed_byte_does_not(
            random in proptest::array::uniform32(any::<u8>()),
            id in "[a-z0-9-]{1,40}",
            t in 0i64..4_000_000_000,
            body in proptest::collection::vec(any::<u8>(), 0..200),
            at in any::<prop::sample::Index>(),
        ) {
            let secret = super::super::format_secret(&random);
            let signed = signature(&secret, &id, t, &body).unwrap();
            prop_assert_eq!(verify(&secret, &id, &t.to_string(), &signed, &body, t, TOLERANCE), Ok(()));
            if !body.is_empty() {
                let mut changed = body.clone();
                changed[at.index(body.len())] ^= 1;
                prop_assert_eq!(
                    verify(&secret, &id, &t.to_string(), &signed, &changed, t, TOLERANCE),
                    Err(VerifyError::Mismatch)
                );
            }
        }
    }
}
