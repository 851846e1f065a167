//! Prometheus text exposition (format 0.0.4), written by hand: a few
//! counters and gauges, and one histogram family, need no registry. The
//! custodian's counters live here too, so the API can expose an in-process
//! custodian's without depending on it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// The content type of the text exposition format served at `/metrics`.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds (seconds) of the effect latency buckets; `+Inf` follows.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// One histogram: per-bucket (not cumulative) counts, the `+Inf` bucket
/// last; cumulated when rendered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    buckets: [u64; LATENCY_BUCKETS.len() + 1],
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn observe(&mut self, seconds: f64) {
        let at = LATENCY_BUCKETS
            .iter()
            .position(|&le| seconds <= le)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[at] += 1;
        self.sum += seconds;
        self.count += 1;
    }
}

/// How long effects took, by kind and outcome (`applied`, `failed`,
/// `ambiguous`).
#[derive(Debug, Default)]
pub struct EffectLatency {
    by: Mutex<BTreeMap<(String, &'static str), Histogram>>,
}

impl EffectLatency {
    pub fn observe(&self, kind: &str, outcome: &'static str, took: Duration) {
        self.by
            .lock()
            .expect("latency lock")
            .entry((kind.to_owned(), outcome))
            .or_default()
            .observe(took.as_secs_f64());
    }

    pub fn snapshot(&self) -> BTreeMap<(String, &'static str), Histogram> {
        self.by.lock().expect("latency lock").clone()
    }
}

/// The custodian's counters since start; `/metrics` and the benchmark read them.
#[derive(Debug, Default)]
pub struct CustodianStats {
    pub claimed: AtomicU64,
    pub started: AtomicU64,
    pub applied: AtomicU64,
    pub failed: AtomicU64,
    pub ambiguous: AtomicU64,
    pub expired: AtomicU64,
    pub adopted: AtomicU64,
    /// Writes refused because the authority moved on (or the row did).
    pub fenced: AtomicU64,
    pub serialization_retries: AtomicU64,
    pub leases_acquired: AtomicU64,
    pub leases_lost: AtomicU64,
    /// Where the shards live on other nodes: authorities whose engine steps
    /// run as they are because the copies on their shards' node are not
    /// current (a gauge).
    pub stale_step_copies: std::sync::Arc<AtomicU64>,
    /// How long effects took, by kind and outcome.
    pub effect_latency: EffectLatency,
}

/// A text exposition being written.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

/// Label pairs of one sample.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

impl Exposition {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: Labels<'_>, value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", number(value));
    }

    /// A counter family: `samples` are (labels, value).
    pub fn counter(&mut self, name: &str, help: &str, samples: &[(Labels<'_>, f64)]) {
        self.header(name, "counter", help);
        for (labels, value) in samples {
            self.sample(name, labels, *value);
        }
    }

    /// A gauge family.
    pub fn gauge(&mut self, name: &str, help: &str, samples: &[(Labels<'_>, f64)]) {
        self.header(name, "gauge", help);
        for (labels, value) in samples {
            self.sample(name, labels, *value);
        }
    }

    /// A histogram family, one histogram per label set.
    pub fn histogram(&mut self, name: &str, help: &str, samples: &[(Labels<'_>, &Histogram)]) {
        self.header(name, "histogram", help);
        for (labels, h) in samples {
            let mut cumulative = 0;
            let bounds = LATENCY_BUCKETS
                .iter()
                .map(|b| number(*b))
                .chain(std::iter::once("+Inf".to_owned()));
            for (le, n) in bounds.zip(h.buckets) {
                cumulative += n;
                let mut with_le = labels.to_vec();
                with_le.push(("le", &le));
                #[allow(clippy::cast_precision_loss)]
                self.sample(&format!("{name}_bucket"), &with_le, cumulative as f64);
            }
            self.sample(&format!("{name}_sum"), labels, h.sum);
            #[allow(clippy::cast_precision_loss)]
            self.sample(&format!("{name}_count"), labels, h.count as f64);
        }
    }

    pub fn finish(self) -> String {
        self.text
    }
}

/// The families a custodian's counters give (its transitions, adoptions,
/// fenced writes, retries, lease changes and effect latencies).
pub fn custodian(e: &mut Exposition, s: &CustodianStats) {
    e.counter(
        "ledger_transitions_total",
        "State changes made by this process's custodian.",
        &[
            (&[("from", "pending"), ("to", "prepared")], load(&s.claimed)),
            (
                &[("from", "prepared"), ("to", "effect_started")],
                load(&s.started),
            ),
            (
                &[("from", "effect_started"), ("to", "applied")],
                load(&s.applied),
            ),
            (
                &[("from", "effect_started"), ("to", "failed")],
                load(&s.failed),
            ),
            (
                &[("from", "effect_started"), ("to", "ambiguous")],
                load(&s.ambiguous),
            ),
            (&[("from", "pending"), ("to", "expired")], load(&s.expired)),
        ],
    );
    e.counter(
        "ledger_adoptions_total",
        "Prepared commands adopted from a superseded generation.",
        &[(&[], load(&s.adopted))],
    );
    e.counter(
        "ledger_fenced_writes_total",
        "Writes refused because the authority had moved to a newer generation.",
        &[(&[], load(&s.fenced))],
    );
    e.counter(
        "ledger_serialization_retries_total",
        "SERIALIZABLE transactions retried after a serialization failure or deadlock.",
        &[(&[], load(&s.serialization_retries))],
    );
    e.counter(
        "ledger_lease_changes_total",
        "Leases this process acquired or lost.",
        &[
            (&[("change", "acquired")], load(&s.leases_acquired)),
            (&[("change", "lost")], load(&s.leases_lost)),
        ],
    );
    e.gauge(
        "ledger_step_copies_not_current",
        "Authorities whose engine steps run as they are, slower, because the copies of the steps on the node holding their shards are missing or stale (a distributed database, until `command-ledger migrate` makes them again).",
        &[(&[], load(&s.stale_step_copies))],
    );
    let latency = s.effect_latency.snapshot();
    let samples: Vec<_> = latency
        .iter()
        .map(|((kind, outcome), h)| ([("kind", kind.as_str()), ("outcome", *outcome)], h))
        .collect();
    let samples: Vec<_> = samples.iter().map(|(l, h)| (&l[..], *h)).collect();
    e.histogram(
        "ledger_effect_duration_seconds",
        "How long effects took, by kind and outcome.",
        &samples,
    );
}

/// A counter's value as a sample.
#[allow(clippy::cast_precision_loss)]
pub fn load(a: &AtomicU64) -> f64 {
    a.load(std::sync::atomic::Ordering::Relaxed) as f64
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        let mut h = Histogram::default();
        for s in [0.001, 0.004, 0.2, 7.0, 99.0] {
            h.observe(s);
        }
        let mut e = Exposition::default();
        e.histogram(
            "ledger_effect_seconds",
            "How long effects took.",
            &[(&[("kind", "refund"), ("outcome", "applied")], &h)],
        );
        let text = e.finish();
        assert!(text.starts_with(
            "# HELP ledger_effect_seconds How long effects took.\n# TYPE ledger_effect_seconds histogram\n"
        ));
        let bucket = |le: &str| {
            let prefix = format!(
                "ledger_effect_seconds_bucket{{kind=\"refund\",outcome=\"applied\",le=\"{le}\"}} "
            );
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no bucket {le} in\n{text}"))
                .to_owned()
        };
        assert_eq!(bucket("0.005"), "2");
        assert_eq!(bucket("0.25"), "3");
        assert_eq!(bucket("10"), "4");
        assert_eq!(bucket("30"), "4");
        assert_eq!(bucket("+Inf"), "5");
        assert!(
            text.contains("ledger_effect_seconds_count{kind=\"refund\",outcome=\"applied\"} 5\n")
        );
        assert!(
            text.contains("ledger_effect_seconds_sum{kind=\"refund\",outcome=\"applied\"} 106.205")
        );
    }

    #[test]
    fn label_values_are_escaped_and_unlabelled_samples_bare() {
        let mut e = Exposition::default();
        e.gauge(
            "g",
            "A gauge.",
            &[(&[("a", "x\"y\\z\nw")], 1.5), (&[], 2.0)],
        );
        let text = e.finish();
        assert!(text.contains("g{a=\"x\\\"y\\\\z\\nw\"} 1.5\n"), "{text}");
        assert!(text.contains("\ng 2\n"), "{text}");
    }

    #[test]
    fn effect_latency_keeps_one_histogram_per_kind_and_outcome() {
        let l = EffectLatency::default();
        l.observe("refund", "applied", Duration::from_millis(20));
        l.observe("refund", "applied", Duration::from_millis(30));
        l.observe("refund", "ambiguous", Duration::from_secs(5));
        let snap = l.snapshot();
        assert_eq!(snap.len(), 2);
        assert_eq!(snap[&("refund".to_owned(), "applied")].count, 2);
    }
}
