//! Outcome webhooks, the pure part: the signatures an event is sent with
//! (`Ledger-Signature`, and the Standard Webhooks headers: [`standard`]) and
//! how a receiver checks them, when a failed delivery is tried again, and which
//! URLs and addresses an endpoint may name (`url`, re-exported here). No
//! I/O: clocks, secrets and the addresses a host resolved to come in as
//! arguments.

pub mod standard;
mod url;

pub use url::{
    AddressClass, Host, MAX_URL_LEN, Target, UrlError, check_address, classify, classify_v4,
    parse_url,
};

use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit as _, Mac as _};
use serde_json::Value;
use sha2::Sha256;
use std::time::Duration;

/// The header carrying the signature: `t=<unix seconds>,v1=<hex>`.
pub const SIGNATURE_HEADER: &str = "Ledger-Signature";
/// The header carrying the event's id, the receiver's key for dropping
/// duplicates (also the body's `event_id`).
pub const EVENT_ID_HEADER: &str = "Ledger-Event-Id";
/// The header numbering the attempt (1 for the first), for the receiver's logs.
pub const ATTEMPT_HEADER: &str = "Ledger-Attempt";
/// Marks an endpoint's secret, so a leaked one is recognisable in scans.
pub const SECRET_PREFIX: &str = "whsec_";
/// How far a receiver should let a signature's time be from its clock.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// The terminal states an endpoint may ask for (all of them by default).
pub const TERMINAL_STATES: [&str; 5] = ["applied", "failed", "ambiguous", "cancelled", "expired"];

/// An endpoint's secret for 32 random bytes: shown once, when the endpoint
/// is registered; the HMAC key is the whole string, prefix included.
pub fn format_secret(random: &[u8; 32]) -> String {
    format!("{SECRET_PREFIX}{}", hex::encode(random))
}

fn mac(secret: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// HMAC-SHA256 of `"{timestamp}.{body}"` under `secret`, in lowercase hex.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    hex::encode(mac(secret, timestamp, body).finalize().into_bytes())
}

/// The `Ledger-Signature` value for `body` sent at `timestamp` (unix seconds).
pub fn signature_header(secret: &str, timestamp: i64, body: &[u8]) -> String {
    format!("t={timestamp},v1={}", sign(secret, timestamp, body))
}

/// Why a signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the signature header is not t=<unix seconds>,v1=<hex>")]
    Malformed,
    #[error("the signature is {seconds} s away from now, more than the tolerance")]
    OutsideTolerance { seconds: u64 },
    #[error("no v1 signature matches the body")]
    Mismatch,
}

/// Checks a `Ledger-Signature` header against the raw body, as a receiver
/// does: one `t`, at least one `v1` (any may match: room for a second
/// secret while one is replaced), a time within `tolerance` of `now`, and a
/// constant-time comparison.
pub fn verify(
    secret: &str,
    header: &str,
    body: &[u8],
    now: i64,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let mut timestamp = None;
    let mut candidates = Vec::new();
    for part in header.split(',') {
        let (name, value) = part.trim().split_once('=').ok_or(VerifyError::Malformed)?;
        match name {
            "t" if timestamp.is_none() => {
                timestamp = Some(value.parse::<i64>().map_err(|_| VerifyError::Malformed)?);
            }
            "t" => return Err(VerifyError::Malformed),
            "v1" => candidates.push(value),
            // Later schemes are ignored, so a receiver keeps working when one is added.
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or(VerifyError::Malformed)?;
    if candidates.is_empty() {
        return Err(VerifyError::Malformed);
    }
    let away = now.abs_diff(timestamp);
    if away > tolerance.as_secs() {
        return Err(VerifyError::OutsideTolerance { seconds: away });
    }
    let expected = mac(secret, timestamp, body);
    let matched = candidates
        .iter()
        .any(|c| hex::decode(c).is_ok_and(|bytes| expected.clone().verify_slice(&bytes).is_ok()));
    if matched {
        Ok(())
    } else {
        Err(VerifyError::Mismatch)
    }
}

/// When a failed delivery is tried again: `first` after the first attempt,
/// doubling after each further one, never more than `cap` apart. A pure
/// function of the attempt number: every deliverer agrees on the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// 10 s, 20 s, 40 s, ... up to an hour apart.
    pub const DEFAULT: Backoff = Backoff {
        first: Duration::from_secs(10),
        cap: Duration::from_secs(3600),
    };

    /// The wait after attempt number `attempt` (1 for the first) failed.
    pub fn after(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.first
            .checked_mul(1u32 << doublings)
            .map_or(self.cap, |d| d.min(self.cap))
    }
}

/// `now` plus `wait`, saturating at the largest time chrono represents.
pub fn later(now: DateTime<Utc>, wait: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(wait)
        .ok()
        .and_then(|w| now.checked_add_signed(w))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// What becomes of an event after one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterAttempt {
    /// The receiver answered 2xx: nothing more is sent (unless an operator
    /// redelivers it).
    Delivered,
    /// Tried again at this time.
    RetryAt(DateTime<Utc>),
    /// The next attempt would fall after the event's expiry: no more attempts.
    Expired,
}

/// The decision after attempt number `attempt` of an event that expires at
/// `expires_at`, made at `now`.
pub fn after_attempt(
    succeeded: bool,
    attempt: u32,
    now: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    backoff: Backoff,
) -> AfterAttempt {
    if succeeded {
        return AfterAttempt::Delivered;
    }
    let next = later(now, backoff.after(attempt));
    if next < expires_at {
        AfterAttempt::RetryAt(next)
    } else {
        AfterAttempt::Expired
    }
}

/// A payload as it is shown and sent: its times written as every other
/// time of the API is (UTC, `Z`). The database writes `finished_at` into the
/// stored payload as `+00:00`; the stored payload is left as it is.
pub fn payload_shown(payload: &Value) -> Value {
    let mut shown = payload.clone();
    if let Some(t) = shown.get_mut("finished_at")
        && let Some(parsed) = t
            .as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
    {
        *t = Value::String(
            parsed
                .with_timezone(&Utc)
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        );
    }
    shown
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_payloads_finished_at_is_shown_in_utc_with_z_like_every_other_time() {
        let stored = serde_json::json!({"state": "applied", "finished_at": "2026-12-06T04:07:32.123456+00:00"});
        let shown = payload_shown(&stored);
        assert_eq!(shown["finished_at"], "2026-12-06T04:07:32.123456Z");
        assert_eq!(shown["state"], "applied");
        let noon = serde_json::json!({"finished_at": "2026-12-06T12:00:00+02:00"});
        assert_eq!(payload_shown(&noon)["finished_at"], "2026-12-06T10:00:00Z");
        for left in [
            serde_json::json!({"finished_at": null}),
            serde_json::json!({"finished_at": "soon"}),
            serde_json::json!([1]),
        ] {
            assert_eq!(payload_shown(&left), left);
        }
    }

    use super::*;
    use proptest::prelude::*;

    const SECRET: &str = "whsec_test";

    #[test]
    fn the_signature_is_hmac_sha256_over_the_timestamp_a_dot_and_the_body() {
        // Computed independently, as docs/WEBHOOKS.md's receiver does:
        // python3 -c 'import hmac,hashlib;print(hmac.new(b"whsec_test",b"1700000000.{}",hashlib.sha256).hexdigest())'
        assert_eq!(
            sign(SECRET, 1_700_000_000, b"{}"),
            "35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91"
        );
        assert_eq!(
            signature_header(SECRET, 7, b"x"),
            format!("t=7,v1={}", sign(SECRET, 7, b"x"))
        );
    }

    #[test]
    fn a_signed_body_verifies_and_a_changed_one_does_not() {
        let header = signature_header(SECRET, 1000, b"{\"a\":1}");
        assert_eq!(
            verify(SECRET, &header, b"{\"a\":1}", 1010, DEFAULT_TOLERANCE),
            Ok(())
        );
        assert_eq!(
            verify(SECRET, &header, b"{\"a\":2}", 1010, DEFAULT_TOLERANCE),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(
                "whsec_other",
                &header,
                b"{\"a\":1}",
                1010,
                DEFAULT_TOLERANCE
            ),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn an_old_or_future_signature_is_refused() {
        let header = signature_header(SECRET, 1000, b"x");
        assert_eq!(
            verify(SECRET, &header, b"x", 1301, DEFAULT_TOLERANCE),
            Err(VerifyError::OutsideTolerance { seconds: 301 })
        );
        assert_eq!(
            verify(SECRET, &header, b"x", 699, DEFAULT_TOLERANCE),
            Err(VerifyError::OutsideTolerance { seconds: 301 })
        );
        assert_eq!(
            verify(SECRET, &header, b"x", 1300, DEFAULT_TOLERANCE),
            Ok(())
        );
    }

    #[test]
    fn malformed_headers_are_refused_and_any_matching_v1_is_accepted() {
        for bad in ["", "v1=00", "t=1", "t=x,v1=00", "t=1,t=1,v1=00", "nonsense"] {
            assert_eq!(
                verify(SECRET, bad, b"x", 1, DEFAULT_TOLERANCE),
                Err(VerifyError::Malformed),
                "{bad}"
            );
        }
        let good = sign(SECRET, 5, b"x");
        let header = format!("t=5, v1=zz, v1={good}, v2=whatever");
        assert_eq!(verify(SECRET, &header, b"x", 5, DEFAULT_TOLERANCE), Ok(()));
    }

    #[test]
    fn secrets_are_prefixed_and_carry_all_their_randomness() {
        let s = format_secret(&[0xab; 32]);
        assert!(s.starts_with(SECRET_PREFIX));
        assert_eq!(s.len(), SECRET_PREFIX.len() + 64);
        assert_ne!(s, format_secret(&[0xac; 32]));
    }

    #[test]
    fn the_backoff_doubles_from_the_first_wait_up_to_the_cap() {
        let b = Backoff {
            first: Duration::from_secs(10),
            cap: Duration::from_secs(60),
        };
        let waits: Vec<u64> = (1..=6).map(|n| b.after(n).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 60, 60, 60]);
        assert_eq!(b.after(0), Duration::from_secs(10));
        assert_eq!(b.after(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn an_attempt_is_delivered_retried_or_the_event_expires() {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        let b = Backoff {
            first: Duration::from_secs(10),
            cap: Duration::from_secs(60),
        };
        let expires = now + chrono::Duration::seconds(30);
        assert_eq!(after_attempt(true, 9, now, now, b), AfterAttempt::Delivered);
        assert_eq!(
            after_attempt(false, 1, now, expires, b),
            AfterAttempt::RetryAt(now + chrono::Duration::seconds(10))
        );
        assert_eq!(
            after_attempt(false, 2, now, expires, b),
            AfterAttempt::RetryAt(now + chrono::Duration::seconds(20))
        );
        assert_eq!(
            after_attempt(false, 3, now, expires, b),
            AfterAttempt::Expired
        );
    }

    proptest! {
        #[test]
        fn every_signature_verifies_within_the_tolerance(
            secret in "[ -~]{1,64}",
            body in proptest::collection::vec(any::<u8>(), 0..512),
            t in 0i64..4_000_000_000,
            skew in -300i64..=300,
        ) {
            let header = signature_header(&secret, t, &body);
            prop_assert_eq!(verify(&secret, &header, &body, t + skew, DEFAULT_TOLERANCE), Ok(()));
        }

        #[test]
        fn a_changed_byte_of_the_body_never_verifies(
            body in proptest::collection::vec(any::<u8>(), 1..256),
            at in any::<proptest::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let header = signature_header(SECRET, 10, &body);
            let mut changed = body;
            let i = at.index(changed.len());
            changed[i] ^= flip;
            prop_assert_eq!(
                verify(SECRET, &header, &changed, 10, DEFAULT_TOLERANCE),
                Err(VerifyError::Mismatch)
            );
        }

        #[test]
        fn the_backoff_never_shrinks_and_never_passes_the_cap(
            first_ms in 1u64..100_000,
            cap_ms in 1u64..10_000_000,
            n in 1u32..200,
        ) {
            let b = Backoff { first: Duration::from_millis(first_ms), cap: Duration::from_millis(cap_ms) };
            prop_assert!(b.after(n) <= b.after(n + 1));
            prop_assert!(b.after(n) <= b.cap);
            prop_assert_eq!(b.after(1), b.first.min(b.cap));
        }
    }
}
