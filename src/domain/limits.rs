//! Limits per provider: how hard the ledger may hit a provider, across every
//! custodian process.
//!
//! - **A group of kinds.** The catalog names a provider (`[providers.stripe]`)
//!   and the kinds that call it (`provider = "stripe"`).
//! - **In flight.** At most `max_in_flight` of the group's commands are
//!   claimed and not terminal at once.
//! - **A token bucket.** The bucket holds at most `burst` tokens and gains
//!   `rate` a second; each command started takes one. Over any span of `t`
//!   seconds, at most `burst + rate x t` commands of the group start.
//! - **Waiting is not failing.** A command over a limit stays queued in its
//!   place; it never fails for the limit.
//!
//! The database holds the bucket (`provider_limits`, migration 0048) and the
//! claim draws from it under a row lock; this module says what a valid limit
//! is and, as [`room`] and [`refill`], the arithmetic the claim does, so that
//! its properties are tested here.

use std::time::Duration;

/// The most a limit may name (in flight, burst): more is no limit at all.
pub const MAX_COUNT: u32 = 1_000_000;

/// A provider's limits, from the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderLimit {
    pub name: String,
    /// Commands of the group claimed and not terminal, at most.
    pub max_in_flight: Option<u32>,
    /// Commands of the group started per second, over time.
    pub rate: Option<f64>,
    /// Commands that may start at once after a quiet spell (the bucket's
    /// size): by default one second's worth of `rate`, at least 1.
    pub burst: u32,
    /// The kinds in the group.
    pub kinds: Vec<String>,
}

impl ProviderLimit {
    /// A limit, or why it cannot work.
    // The default burst is clamped to 1..=MAX_COUNT before the cast.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn new(
        name: &str,
        max_in_flight: Option<u32>,
        rate: Option<f64>,
        burst: Option<u32>,
    ) -> Result<ProviderLimit, String> {
        if max_in_flight.is_none() && rate.is_none() {
            return Err("a provider needs max_in_flight, rate or both".into());
        }
        if let Some(n) = max_in_flight
            && !(1..=MAX_COUNT).contains(&n)
        {
            return Err(format!("max_in_flight {n} is not 1..={MAX_COUNT}"));
        }
        if let Some(r) = rate
            && !(r.is_finite() && r > 0.0 && r <= f64::from(MAX_COUNT))
        {
            return Err(format!(
                "rate {r} is not a number of commands a second above 0 (at most {MAX_COUNT})"
            ));
        }
        if let Some(b) = burst {
            if rate.is_none() {
                return Err("burst is the size of the rate's bucket: it needs a rate".into());
            }
            if !(1..=MAX_COUNT).contains(&b) {
                return Err(format!("burst {b} is not 1..={MAX_COUNT}"));
            }
        }
        let one_second = rate.map_or(1.0, f64::ceil).clamp(1.0, f64::from(MAX_COUNT));
        Ok(ProviderLimit {
            name: name.to_owned(),
            max_in_flight,
            rate,
            burst: burst.unwrap_or(one_second as u32),
            kinds: Vec::new(),
        })
    }

    /// The most commands of the group that may start over `span`, from a
    /// full bucket (`None`: no rate limit).
    // A rate is positive and at most MAX_COUNT: the product fits.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn most_started(&self, span: Duration) -> Option<u64> {
        self.rate
            .map(|r| u64::from(self.burst) + (r * span.as_secs_f64()).floor() as u64)
    }

    /// The limit as `ledger_set_providers` takes it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "max_in_flight": self.max_in_flight,
            "rate": self.rate,
            "burst": self.burst,
            "kinds": self.kinds,
        })
    }
}

/// The bucket's tokens `elapsed` after it held `tokens` (no rate: no bucket).
pub fn refill(limit: &ProviderLimit, tokens: f64, elapsed: Duration) -> Option<f64> {
    limit
        .rate
        .map(|r| (tokens + r * elapsed.as_secs_f64()).min(f64::from(limit.burst)))
}

/// How many of the group's commands a claim asking for `asked` may start,
/// with `tokens` in the bucket (refilled) and `in_flight` of the group
/// claimed and not terminal.
// Tokens are at least 0 and at most a burst (a u32) before the cast.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn room(limit: &ProviderLimit, tokens: Option<f64>, in_flight: u32, asked: u32) -> u32 {
    let by_rate = tokens.map_or(asked, |t| t.max(0.0).floor() as u32);
    let by_flight = limit
        .max_in_flight
        .map_or(asked, |m| m.saturating_sub(in_flight));
    asked.min(by_rate).min(by_flight)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_limit_needs_something_to_limit_and_sane_numbers() {
        assert!(ProviderLimit::new("p", None, None, None).is_err());
        assert!(ProviderLimit::new("p", Some(0), None, None).is_err());
        assert!(ProviderLimit::new("p", None, Some(0.0), None).is_err());
        assert!(ProviderLimit::new("p", None, Some(f64::NAN), None).is_err());
        assert!(ProviderLimit::new("p", None, Some(-1.0), None).is_err());
        assert!(ProviderLimit::new("p", None, Some(10.0), Some(0)).is_err());
        assert!(ProviderLimit::new("p", Some(5), None, Some(3)).is_err());
        let l = ProviderLimit::new("p", Some(5), None, None).unwrap();
        assert_eq!((l.max_in_flight, l.rate, l.burst), (Some(5), None, 1));
    }

    #[test]
    fn the_bucket_holds_one_second_of_its_rate_unless_told() {
        assert_eq!(
            ProviderLimit::new("p", None, Some(50.0), None)
                .unwrap()
                .burst,
            50
        );
        assert_eq!(
            ProviderLimit::new("p", None, Some(0.5), None)
                .unwrap()
                .burst,
            1
        );
        assert_eq!(
            ProviderLimit::new("p", None, Some(2.5), None)
                .unwrap()
                .burst,
            3
        );
        assert_eq!(
            ProviderLimit::new("p", None, Some(50.0), Some(10))
                .unwrap()
                .burst,
            10
        );
    }

    #[test]
    fn a_rate_of_50_with_a_burst_of_10_starts_at_most_510_in_10_seconds() {
        let l = ProviderLimit::new("p", None, Some(50.0), Some(10)).unwrap();
        assert_eq!(l.most_started(Duration::from_secs(10)), Some(510));
        assert_eq!(
            ProviderLimit::new("p", Some(5), None, None)
                .unwrap()
                .most_started(Duration::from_secs(10)),
            None
        );
    }

    #[test]
    fn room_is_the_least_of_what_was_asked_the_tokens_and_the_free_places() {
        let l = ProviderLimit::new("p", Some(5), Some(50.0), Some(10)).unwrap();
        assert_eq!(room(&l, Some(10.0), 0, 64), 5);
        assert_eq!(room(&l, Some(3.7), 0, 64), 3);
        assert_eq!(room(&l, Some(10.0), 4, 64), 1);
        assert_eq!(
            room(&l, Some(10.0), 7, 64),
            0,
            "over the limit after it was lowered"
        );
        assert_eq!(room(&l, Some(10.0), 0, 2), 2);
        assert_eq!(room(&l, Some(0.9), 0, 64), 0);
        let flight_only = ProviderLimit::new("p", Some(5), None, None).unwrap();
        assert_eq!(room(&flight_only, None, 2, 64), 3);
    }

    proptest! {
        /// However claims are spread in time and whatever they ask, the
        /// commands started over any span from a full bucket never exceed
        /// `burst + rate x span`, and none starts past the in-flight limit.
        #[test]
        fn no_schedule_of_claims_beats_the_bucket(
            rate in 0.1f64..500.0,
            burst in 1u32..100,
            max_in_flight in proptest::option::of(1u32..20),
            claims in proptest::collection::vec((0u64..200, 0u32..64, 0u32..30), 1..200),
        ) {
            let l = ProviderLimit::new("p", max_in_flight, Some(rate), Some(burst)).unwrap();
            let mut tokens = f64::from(burst);
            let (mut now_ms, mut started) = (0u64, 0u64);
            for (gap_ms, asked, in_flight) in claims {
                now_ms += gap_ms;
                tokens = refill(&l, tokens, Duration::from_millis(gap_ms)).unwrap();
                let n = room(&l, Some(tokens), in_flight, asked);
                prop_assert!(n <= asked);
                if let Some(m) = max_in_flight {
                    prop_assert!(in_flight + n <= m.max(in_flight));
                }
                tokens -= f64::from(n);
                prop_assert!(tokens >= 0.0);
                started += u64::from(n);
                let bound = l.most_started(Duration::from_millis(now_ms)).unwrap();
                prop_assert!(started <= bound, "{started} started in {now_ms} ms, bound {bound}");
            }
        }
    }
}
