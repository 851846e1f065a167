//! W3C Trace Context (Level 1): the `traceparent` and `tracestate` a caller
//! sends, read as the specification says, and written back for the calls
//! the ledger makes on a command's behalf (the provider's request, the
//! webhook).
//!
//! The specification's rule for what cannot be read is to ignore it and start
//! afresh, never to refuse the request: [`TraceParent::parse`] and
//! [`trace_state`] answer `None` for a header that does not conform, and the
//! command is recorded without it. A trace context is never part of a
//! command's fingerprint: two copies of one intent sent from two traces are
//! one command.

use std::fmt;

/// The most `tracestate` list members kept (the specification's limit).
pub const MAX_STATE_MEMBERS: usize = 32;

/// The longest `tracestate` kept, in characters: the length the
/// specification asks every vendor to propagate at least.
pub const MAX_STATE_LEN: usize = 512;

/// A member longer than this is the first dropped when a `tracestate` is
/// over [`MAX_STATE_LEN`] (the specification's advice).
const LONG_MEMBER: usize = 128;

/// What a caller's headers said of its trace: the `traceparent`, and the
/// `tracestate` beside it (kept only with a `traceparent`, as the
/// specification says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    pub parent: TraceParent,
    pub state: Option<String>,
}

impl TraceContext {
    /// From the two headers' values: `None` without a `traceparent` that
    /// conforms; a `tracestate` that does not is dropped alone.
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let parent = TraceParent::parse(traceparent?)?;
        Some(TraceContext {
            parent,
            state: tracestate.and_then(trace_state),
        })
    }
}

/// A `traceparent`: the trace, the caller's span, and its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    /// The span of the caller that sent it (`parent-id`).
    pub parent_id: [u8; 8],
    pub flags: u8,
}

impl TraceParent {
    /// Reads a `traceparent` header's value. Version `00` must be exactly
    /// 55 characters; a later version is read by the fields `00` defines when
    /// it is at least as long and anything after them follows a `-` (the
    /// specification's rule for versions it does not know yet). Version
    /// `ff`, upper-case hex, an all-zero trace or parent id: `None`.
    pub fn parse(value: &str) -> Option<TraceParent> {
        let value = value.trim_matches([' ', '\t']);
        let bytes = value.as_bytes();
        if bytes.len() < 55 {
            return None;
        }
        let version = hex_byte(&bytes[0..2])?;
        if version == 0xff {
            return None;
        }
        if version == 0 && bytes.len() != 55 {
            return None;
        }
        if bytes.len() > 55 && bytes[55] != b'-' {
            return None;
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let trace_id: [u8; 16] = hex_bytes(&bytes[3..35])?;
        let parent_id: [u8; 8] = hex_bytes(&bytes[36..52])?;
        let flags = hex_byte(&bytes[53..55])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Whether the caller recorded its span (the `sampled` flag).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The same trace and flags, with `span_id` as the parent: what the
    /// ledger sends on when it calls out from a span of its own.
    pub fn child(&self, span_id: [u8; 8]) -> TraceParent {
        TraceParent {
            parent_id: span_id,
            ..*self
        }
    }

    /// The trace id as 32 lower-case hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }
}

/// Version `00`, as every receiver reads it.
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.parent_id),
            self.flags
        )
    }
}

/// A `tracestate` header's value as it is kept and sent on: its members
/// checked one by one (a key and a value as the specification defines
/// them), empty members dropped, at most [`MAX_STATE_MEMBERS`] and
/// [`MAX_STATE_LEN`] characters (members over 128 characters dropped
/// first, then from the end), joined by `,`. `None` when a member does not
/// conform, a key repeats, or nothing is left: the specification lets a
/// receiver discard such a header whole.
pub fn trace_state(value: &str) -> Option<String> {
    let mut members: Vec<&str> = Vec::new();
    let mut keys: Vec<&str> = Vec::new();
    for member in value.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        let (key, state_value) = member.split_once('=')?;
        if !state_key(key) || !state_value_ok(state_value) || keys.contains(&key) {
            return None;
        }
        keys.push(key);
        members.push(member);
    }
    if members.len() > MAX_STATE_MEMBERS {
        return None;
    }
    let joined_len =
        |m: &[&str]| m.iter().map(|s| s.len()).sum::<usize>() + m.len().saturating_sub(1);
    if joined_len(&members) > MAX_STATE_LEN {
        members.retain(|m| m.len() <= LONG_MEMBER);
    }
    while joined_len(&members) > MAX_STATE_LEN {
        members.pop();
    }
    (!members.is_empty()).then(|| members.join(","))
}

/// `simple-key` (`[a-z][a-z0-9_*/-]{0,255}`) or `tenant@system`
/// (`[a-z0-9][a-z0-9_*/-]{0,240}` `@` `[a-z][a-z0-9_*/-]{0,13}`).
fn state_key(key: &str) -> bool {
    let tail = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/".contains(&b))
    };
    match key.split_once('@') {
        None => {
            key.len() <= 256
                && key.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
                && tail(&key[1..])
        }
        Some((tenant, system)) => {
            (1..=241).contains(&tenant.len())
                && tenant
                    .as_bytes()
                    .first()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && tail(&tenant[1..])
                && (1..=14).contains(&system.len())
                && system
                    .as_bytes()
                    .first()
                    .is_some_and(u8::is_ascii_lowercase)
                && tail(&system[1..])
        }
    }
}

/// Up to 256 printable ASCII characters but `,` and `=`, the last not a space.
fn state_value_ok(value: &str) -> bool {
    (1..=256).contains(&value.len())
        && value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
        && !value.ends_with(' ')
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    let [hi, lo] = two else { return None };
    Some(hex_digit(*hi)? << 4 | hex_digit(*lo)?)
}

/// Lower-case hex only: the specification's alphabet.
fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

fn hex_bytes<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks(2).enumerate() {
        out[i] = hex_byte(pair)?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specifications_example_reads_and_writes_back() {
        let p = TraceParent::parse(EXAMPLE).expect("valid");
        assert_eq!(p.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex::encode(p.parent_id), "00f067aa0ba902b7");
        assert!(p.sampled());
        assert_eq!(p.to_string(), EXAMPLE);
    }

    #[test]
    fn what_version_00_does_not_allow_is_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "0-4bf92f3577b34da6a3ce929d0e0e47361-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_by_the_fields_it_shares_with_00() {
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-adds";
        let p = TraceParent::parse(later).expect("a later version");
        assert_eq!(p.to_string(), EXAMPLE);
        assert_eq!(
            TraceParent::parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"),
            None
        );
    }

    #[test]
    fn a_child_keeps_the_trace_and_flags_and_names_the_new_span() {
        let p = TraceParent::parse(EXAMPLE).expect("valid");
        let c = p.child([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(
            c.to_string(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01"
        );
    }

    #[test]
    fn a_trace_state_goes_only_with_a_traceparent_and_alone_when_it_does_not_conform() {
        assert_eq!(TraceContext::from_headers(None, Some("congo=1")), None);
        assert_eq!(
            TraceContext::from_headers(Some("00-x"), Some("congo=1")),
            None
        );
        let c =
            TraceContext::from_headers(Some(EXAMPLE), Some("Congo=1")).expect("the parent stays");
        assert_eq!((c.parent.to_string().as_str(), c.state), (EXAMPLE, None));
        let c = TraceContext::from_headers(Some(EXAMPLE), Some("congo=1")).expect("both");
        assert_eq!(c.state.as_deref(), Some("congo=1"));
    }

    #[test]
    fn a_trace_state_keeps_its_members_in_order() {
        assert_eq!(
            trace_state("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7 ,,").as_deref(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        assert_eq!(
            trace_state("fw529a3039@dt=ZGFkc,a-b_c*d/e=1").as_deref(),
            Some("fw529a3039@dt=ZGFkc,a-b_c*d/e=1")
        );
    }

    #[test]
    fn a_trace_state_that_does_not_conform_is_dropped_whole() {
        for bad in [
            "Congo=1",
            "congo",
            "congo=",
            "congo=a,congo=b",
            "congo=a=b",
            "congo=a\tb",
            "@dt=1",
            "t@=1",
            "t@dt1234567890123=1",
            " , ",
        ] {
            assert_eq!(trace_state(bad), None, "{bad:?}");
        }
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(trace_state(&many), None);
    }

    #[test]
    fn a_long_trace_state_loses_long_members_first_then_its_last() {
        let long = format!("big={}", "x".repeat(200));
        let small: Vec<String> = (0..20)
            .map(|i| format!("k{i:02}={}", "v".repeat(20)))
            .collect();
        let value = format!("{},{long}", small.join(","));
        let kept = trace_state(&value).expect("something kept");
        assert!(!kept.contains("big="), "the long member goes first");
        assert!(kept.len() <= MAX_STATE_LEN);
        assert!(kept.starts_with("k00="), "members keep their order");
        // 20 members of 24 characters and 19 commas: 499, all kept.
        assert_eq!(kept.split(',').count(), 20);
        let more: Vec<String> = (0..30)
            .map(|i| format!("k{i:02}={}", "v".repeat(20)))
            .collect();
        let kept = trace_state(&more.join(",")).expect("something kept");
        assert_eq!(kept.split(',').count(), 20, "then from the end: {kept}");
    }

    proptest! {
        #[test]
        fn every_traceparent_written_reads_back(
            trace_id in any::<[u8; 16]>(), parent_id in any::<[u8; 8]>(), flags in any::<u8>(),
        ) {
            prop_assume!(trace_id != [0; 16] && parent_id != [0; 8]);
            let p = TraceParent { trace_id, parent_id, flags };
            prop_assert_eq!(TraceParent::parse(&p.to_string()), Some(p));
        }

        #[test]
        fn no_text_makes_the_parser_panic_and_what_it_accepts_is_canonical(s in ".{0,80}") {
            if let Some(p) = TraceParent::parse(&s) {
                let written = p.to_string();
                prop_assert_eq!(written.len(), 55);
                prop_assert_eq!(TraceParent::parse(&written), Some(p));
            }
        }

        #[test]
        fn a_kept_trace_state_is_kept_as_it_is(s in "[a-z0-9=,@ ]{0,80}") {
            if let Some(kept) = trace_state(&s) {
                prop_assert!(kept.len() <= MAX_STATE_LEN);
                prop_assert_eq!(trace_state(&kept), Some(kept));
            }
        }
    }
}
