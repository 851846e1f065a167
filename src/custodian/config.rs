//! The custodian's settings and their defaults, written once: `CustodianConfig::new`
//! and the command line's options (`custodian`, `serve`) both read [`defaults`].

use std::time::Duration;

use super::Isolation;

/// The default of every setting the command line exposes, as the command
/// line spells it (`--help` shows these).
pub mod defaults {
    /// `--lease-ttl`.
    pub const LEASE_TTL: &str = "10s";
    /// `--heartbeat`: well inside the TTL.
    pub const HEARTBEAT: &str = "3s";
    /// `--batch-size`: W3b drains fastest at 128 (docs/PERFORMANCE.md).
    pub const BATCH_SIZE: u16 = 128;
    /// `--max-in-flight`: effects that take 200 ms still keep up with 64
    /// submitting clients (at most 1,024 / 0.2 s = 5,120 applied/s; W8 in
    /// docs/PERFORMANCE.md). At 512 they could not on a machine whose
    /// clients submitted 3,329/s (2,560/s at most); at 64, not at all (320/s).
    pub const MAX_IN_FLIGHT: u16 = 1024;
    /// `--poll-interval`.
    pub const POLL_INTERVAL: &str = "1s";
    /// `--recovery-interval`.
    pub const RECOVERY_INTERVAL: &str = "5s";
    /// Not an option: how long a shutdown waits for effects in flight.
    pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
}

/// A default duration; the texts above are constants this crate's tests parse.
fn default_duration(text: &str) -> Duration {
    crate::catalog::parse_duration(text).expect("the defaults are valid durations")
}

#[derive(Debug, Clone)]
pub struct CustodianConfig {
    /// This process's identity as a lease holder; unique per process.
    pub holder: String,
    pub authorities: Vec<String>,
    pub lease_ttl: Duration,
    /// How often leases are renewed; well inside the TTL.
    pub heartbeat: Duration,
    /// Most commands claimed by one statement.
    pub batch_size: i64,
    /// Most effects in flight at once.
    pub max_in_flight: usize,
    /// Fallback wake-up when no notification arrives.
    pub poll_interval: Duration,
    /// How long a shutdown waits for effects in flight.
    pub shutdown_grace: Duration,
    /// How often the custodian runs a recovery pass.
    pub recovery_interval: Duration,
    /// The isolation of the start, record and adoption transactions: SERIALIZABLE,
    /// except in the benchmark's comparison (see [`Isolation`]).
    #[doc(hidden)]
    pub isolation: Isolation,
    /// The isolation of the claim: READ COMMITTED, fenced by the lease.
    /// The claim moves rows only from `pending` to `prepared` (no effect),
    /// holds the authority row `for share` so a takeover waits for it, and
    /// hands each row to one claimer (`skip locked`); the SERIALIZABLE start
    /// re-checks lease and generation before any effect. At SERIALIZABLE the
    /// claim measured slower with more retries (W5, docs/PERFORMANCE.md).
    #[doc(hidden)]
    pub claim_isolation: Isolation,
}

impl CustodianConfig {
    pub fn new(authorities: Vec<String>) -> Self {
        CustodianConfig {
            holder: default_holder(),
            authorities,
            lease_ttl: default_duration(defaults::LEASE_TTL),
            heartbeat: default_duration(defaults::HEARTBEAT),
            batch_size: i64::from(defaults::BATCH_SIZE),
            max_in_flight: usize::from(defaults::MAX_IN_FLIGHT),
            poll_interval: default_duration(defaults::POLL_INTERVAL),
            shutdown_grace: defaults::SHUTDOWN_GRACE,
            recovery_interval: default_duration(defaults::RECOVERY_INTERVAL),
            isolation: Isolation::Serializable,
            claim_isolation: Isolation::ReadCommitted,
        }
    }
}

/// `host:pid:random`, so a restarted process is a new holder (and takes a new generation).
pub fn default_holder() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    let random = getrandom::u32().unwrap_or(0);
    format!("{host}:{}:{random:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_what_the_command_line_documents() {
        let c = CustodianConfig::new(vec!["payments".to_owned()]);
        assert_eq!(c.lease_ttl, Duration::from_secs(10));
        assert_eq!(c.heartbeat, Duration::from_secs(3));
        assert!(c.heartbeat < c.lease_ttl);
        assert_eq!(c.batch_size, 128);
        assert_eq!(c.max_in_flight, 1024);
        assert_eq!(c.poll_interval, Duration::from_secs(1));
        assert_eq!(c.recovery_interval, Duration::from_secs(5));
        assert_eq!(c.shutdown_grace, Duration::from_secs(10));
    }
}
