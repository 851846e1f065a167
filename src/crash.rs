//! Named crash points for the crash campaign. A point does nothing unless
//! the process was started with `COMMAND_LEDGER_CRASH_AT` naming it (for
//! example `CP2`, or `CP1,CP3`); then, with probability
//! `COMMAND_LEDGER_CRASH_PROBABILITY` (default 1) drawn from
//! `COMMAND_LEDGER_CRASH_SEED`, the process SIGKILLs itself right there: no
//! destructor, no flush, no goodbye. With `COMMAND_LEDGER_CRASH_ACTION=stop`
//! it SIGSTOPs itself instead (a zombie: paused, not dead, until SIGCONT).
//! Production never sets these variables;
//! an unarmed point costs one load of a lazily initialised static.
//!
//! Each point is named by its place in the code; its environment name
//! (CP0..CP5) is what the campaign and the docs use:
//!
//! - `AfterInsert` (CP0): API, after the submission's insert committed, before the response.
//! - `AfterPrepared` (CP1): custodian, after an adoption's commit left rows
//!   `prepared` (the claim commits `effect_started` at once: CP2).
//! - `AfterEffectStarted` (CP2): custodian, after the `effect_started` commit, before dispatch.
//! - `AfterEffect` (CP3): custodian, after the effect returned, before the outcome commit.
//! - `AfterOutcome` (CP4): custodian, after the outcome commit.
//! - `InClaim` (CP5): custodian, inside a claim-and-start transaction that
//!   moved rows, after its statement returned, before its COMMIT (the
//!   authority row held `for share`, the rows locked): where a paused
//!   custodian would keep its successor waiting but for the idle limit
//!   (`db::txn::IDLE_IN_TRANSACTION`).

use std::sync::Mutex;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// CP0: API, after the submission's insert committed, before the response.
    AfterInsert,
    /// CP1: custodian, after an adoption's commit left rows `prepared`.
    AfterPrepared,
    /// CP2: custodian, after the `effect_started` commit, before dispatch.
    AfterEffectStarted,
    /// CP3: custodian, after the effect returned, before the outcome commit.
    AfterEffect,
    /// CP4: custodian, after the outcome commit.
    AfterOutcome,
    /// CP5: custodian, inside a claim-and-start transaction, before its COMMIT.
    InClaim,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 6] = [
        CrashPoint::AfterInsert,
        CrashPoint::AfterPrepared,
        CrashPoint::AfterEffectStarted,
        CrashPoint::AfterEffect,
        CrashPoint::AfterOutcome,
        CrashPoint::InClaim,
    ];

    /// The name `COMMAND_LEDGER_CRASH_AT` uses for this point.
    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::AfterInsert => "CP0",
            CrashPoint::AfterPrepared => "CP1",
            CrashPoint::AfterEffectStarted => "CP2",
            CrashPoint::AfterEffect => "CP3",
            CrashPoint::AfterOutcome => "CP4",
            CrashPoint::InClaim => "CP5",
        }
    }
}

#[derive(Debug)]
struct Armed {
    points: Vec<CrashPoint>,
    /// Probability as a fraction of u64::MAX.
    threshold: u64,
    state: Mutex<u64>,
    /// Pause (SIGSTOP) instead of dying.
    stop: bool,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let at = std::env::var("COMMAND_LEDGER_CRASH_AT").ok()?;
            let points: Vec<CrashPoint> = CrashPoint::ALL
                .into_iter()
                .filter(|p| {
                    at.split(',')
                        .any(|name| name.trim().eq_ignore_ascii_case(p.name()))
                })
                .collect();
            let probability: f64 = std::env::var("COMMAND_LEDGER_CRASH_PROBABILITY")
                .ok()
                .and_then(|p| p.parse().ok())
                .unwrap_or(1.0);
            let seed: u64 = std::env::var("COMMAND_LEDGER_CRASH_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0x5eed);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let threshold = (probability.clamp(0.0, 1.0) * u64::MAX as f64) as u64;
            tracing::warn!(?points, probability, seed, "crash points armed");
            let stop = std::env::var("COMMAND_LEDGER_CRASH_ACTION").is_ok_and(|a| a == "stop");
            Some(Armed {
                points,
                threshold,
                state: Mutex::new(seed | 1),
                stop,
            })
        })
        .as_ref()
}

/// Crashes the process here if this point is armed and the draw says so.
pub fn point(p: CrashPoint) {
    let Some(armed) = armed() else { return };
    if !armed.points.contains(&p) {
        return;
    }
    let draw = {
        let mut x = armed.state.lock().expect("crash rng lock");
        // xorshift64*: deterministic for a seed.
        *x ^= *x >> 12;
        *x ^= *x << 25;
        *x ^= *x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    if draw > armed.threshold {
        return;
    }
    let pid = std::process::id().to_string();
    if armed.stop {
        eprintln!("crash point {} reached: SIGSTOP", p.name());
        let _ = std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status();
        return;
    }
    eprintln!("crash point {} reached: SIGKILL", p.name());
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    // Should the kill command be missing, die all the same.
    std::process::abort();
}
