//! Per-principal rate limiting: a GCRA limiter (governor) keyed by the
//! authenticated principal, never by a header a client could spoof. One
//! noisy device gets 429 with `Retry-After`; the others do not notice.

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Requests per second per principal, and the burst above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
}

impl RateLimit {
    /// The default, which `serve --rate-limit-per-second` and
    /// `--rate-limit-burst` show.
    pub const DEFAULT: RateLimit = RateLimit {
        per_second: NonZeroU32::new(200).expect("non-zero"),
        burst: NonZeroU32::new(400).expect("non-zero"),
    };
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit::DEFAULT
    }
}

#[derive(Debug, Clone)]
pub struct Limiter {
    inner: Arc<DefaultKeyedRateLimiter<Uuid>>,
}

impl Limiter {
    pub fn new(limit: RateLimit) -> Self {
        let quota = Quota::per_second(limit.per_second).allow_burst(limit.burst);
        Limiter {
            inner: Arc::new(RateLimiter::keyed(quota)),
        }
    }

    /// `Err(wait)` when `principal` is over its limit.
    pub fn check(&self, principal: Uuid) -> Result<(), Duration> {
        self.inner
            .check_key(&principal)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}
