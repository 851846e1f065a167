//! The peers' section of the report: their figures, and each ledger figure
//! that has a peer counterpart as a ratio to it, with the goal it is held to.

use serde_json::{Value, json};
use std::fmt::Write as _;

/// The ledger's figures that have a peer counterpart, read from the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LedgerFigures {
    /// W3b: the burn-down of preloaded pending commands, applied per second.
    pub(crate) w3b_applied_per_s: Option<f64>,
    pub(crate) w3b_preloaded: Option<u64>,
    /// W1: submits per second over HTTP at the most clients measured.
    pub(crate) w1_submit_rps: Option<f64>,
    pub(crate) w1_clients: Option<u64>,
    /// Items per second through the batch submit endpoint: the report's
    /// top-level `batch_submit_items_per_s`, written by the workload that
    /// measures batch submission; absent (null) in a run without one.
    pub(crate) batch_submit_items_per_s: Option<f64>,
}

impl LedgerFigures {
    pub(crate) fn from_results(r: &Value) -> LedgerFigures {
        let most = r["w1"]["closed"].as_array().and_then(|points| {
            points
                .iter()
                .max_by_key(|p| p["clients"].as_u64().unwrap_or(0))
        });
        LedgerFigures {
            w3b_applied_per_s: r["w3b"]["applied_per_s"].as_f64(),
            w3b_preloaded: r["w3b"]["preloaded"].as_u64(),
            w1_submit_rps: most.and_then(|p| p["rps"].as_f64()),
            w1_clients: most.and_then(|p| p["clients"].as_u64()),
            batch_submit_items_per_s: r["batch_submit_items_per_s"].as_f64(),
        }
    }
}

/// A peer figure of the report by its key: (`label`, jobs per second).
fn peer(r: &Value, key: &str, label: &str) -> Option<(String, f64)> {
    r["peers"]["figures"]
        .as_array()?
        .iter()
        .find(|f| f["key"] == key)
        .and_then(|f| Some((label.to_owned(), f["jobs_per_s"].as_f64()?)))
}

/// One comparison. `missing` says why there is no ratio when the ledger
/// figure is absent.
fn ratio(
    ledger: (&str, Option<f64>, &str),
    peer: Option<(String, f64)>,
    goal: Option<f64>,
) -> Value {
    let (what, value, missing) = ledger;
    let ratio = match (value, peer.as_ref()) {
        (Some(l), Some((_, p))) if *p > 0.0 => Some(l / p),
        _ => None,
    };
    let note = match (value, peer.as_ref()) {
        (None, _) => Some(format!("n/a ({missing})")),
        (_, None) => Some("n/a (peer figure not measured)".to_owned()),
        _ => None,
    };
    json!({
        "ledger": what,
        "ledger_value": value,
        "peer": peer.as_ref().map(|p| p.0.as_str()),
        "peer_value": peer.map(|p| p.1),
        "ratio": ratio,
        "goal": goal.map_or_else(|| "reported".to_owned(), |g| format!(">= {g}")),
        "met": goal.and_then(|g| ratio.map(|x| x >= g)),
        "note": note,
    })
}

/// Every ledger figure that has a peer counterpart, as a ratio to it; the
/// goals are issue 16's.
pub(crate) fn ratios(r: &Value) -> Value {
    let l = LedgerFigures::from_results(r);
    let w3b = (
        "W3b burn-down, applied/s",
        l.w3b_applied_per_s,
        "W3b not run",
    );
    let w1 = (
        "W1 submit over HTTP, most clients, req/s",
        l.w1_submit_rps,
        "W1 not run",
    );
    let batch = (
        "batch submit, items/s",
        l.batch_submit_items_per_s,
        "no batch figure",
    );
    // The better peer at one job per transaction.
    let single = [
        peer(
            r,
            "gw_add_job",
            "graphile-worker `add_job`, one per transaction",
        ),
        peer(
            r,
            "awa_insert_with",
            "awa `insert_with`, one per transaction",
        ),
    ]
    .into_iter()
    .flatten()
    .max_by(|a, b| a.1.total_cmp(&b.1));
    json!([
        ratio(
            w3b,
            peer(r, "gw_process_tuned", "graphile-worker processing, tuned"),
            Some(1.0)
        ),
        ratio(
            w3b,
            peer(
                r,
                "gw_process_tuned_startup_adjusted",
                "graphile-worker processing, tuned, less start-up"
            ),
            None
        ),
        ratio(
            w3b,
            peer(
                r,
                "gw_process_defaults",
                "graphile-worker processing, defaults"
            ),
            None
        ),
        ratio(w3b, peer(r, "awa_process", "awa processing"), None),
        ratio(w1, single, Some(4.0)),
        ratio(
            batch,
            peer(r, "gw_add_jobs", "graphile-worker `add_jobs`, batches"),
            Some(0.5)
        ),
        ratio(
            batch,
            peer(
                r,
                "awa_enqueue_params_batch",
                "awa `enqueue_params_batch`, batches"
            ),
            None
        ),
    ])
}

fn num(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() && x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.is_finite() => format!("{x:.2}"),
        _ => "–".to_owned(),
    }
}

/// The peers' section of the markdown report; empty for a run without
/// `--peers`.
pub(crate) fn markdown(r: &Value) -> String {
    let p = &r["peers"];
    if p.is_null() {
        return String::new();
    }
    let mut md = String::new();
    let l_raw = r["baselines"]["before"]["L_raw"]["tps"].as_f64();
    let _ = writeln!(
        md,
        "\n**Peers** (`--peers`: on the same cluster, in the same run, each in a database of its own; \
         {} no-op jobs per step, median of {} repetition(s); graphile-worker {} on node {}, awa {}):\n\n\
         | peer | measurement | jobs/s | / L_raw | runs |\n|---|---|---|---|---|",
        p["jobs"],
        p["reps"],
        p["graphile_worker"]["version"].as_str().unwrap_or("?"),
        p["graphile_worker"]["node"].as_str().unwrap_or("?"),
        p["awa"]["version"].as_str().unwrap_or("?"),
    );
    for f in p["figures"].as_array().into_iter().flatten() {
        let rate = f["jobs_per_s"].as_f64();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            f["peer"].as_str().unwrap_or(""),
            f["name"].as_str().unwrap_or(""),
            num(rate),
            num(rate.zip(l_raw).map(|(a, b)| a / b)),
            f["values"].as_array().map_or(0, Vec::len),
        );
    }
    let _ = writeln!(
        md,
        "\n**The ledger beside the peers** (ratio = ledger figure / peer figure, both from this run):\n\n\
         | ledger figure | value | peer figure | value | ratio | goal | met |\n|---|---|---|---|---|---|---|"
    );
    for x in p["ratios"].as_array().into_iter().flatten() {
        let ratio = x["note"]
            .as_str()
            .map_or_else(|| num(x["ratio"].as_f64()), str::to_owned);
        let met = match x["met"].as_bool() {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} |",
            x["ledger"].as_str().unwrap_or(""),
            num(x["ledger_value"].as_f64()),
            x["peer"].as_str().unwrap_or("–"),
            num(x["peer_value"].as_f64()),
            ratio,
            x["goal"].as_str().unwrap_or(""),
            met,
        );
    }
    let l = LedgerFigures::from_results(r);
    if let (Some(preloaded), Some(jobs)) = (l.w3b_preloaded, p["jobs"].as_u64())
        && preloaded != jobs
    {
        let _ = writeln!(
            md,
            "\nW3b drained {preloaded} commands, the peers {jobs} jobs per step: fixed costs \
             (a worker's start, the last batch) weigh more in the smaller run \
             (`--peer-jobs {preloaded}` makes them equal)."
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(batch: Option<f64>) -> Value {
        json!({
            "baselines": {"before": {"L_raw": {"tps": 10000.0}}},
            "w1": {"closed": [{"clients": 1, "rps": 100.0}, {"clients": 64, "rps": 4000.0}]},
            "w3b": {"applied_per_s": 6000.0, "preloaded": 20000},
            "batch_submit_items_per_s": batch,
            "peers": {
                "jobs": 20000, "reps": 1,
                "graphile_worker": {"version": "0.18.0", "node": "v20"},
                "awa": {"version": "0.6.9"},
                "figures": [
                    {"key": "gw_add_job", "peer": "graphile-worker", "name": "add_job", "jobs_per_s": 1000.0, "values": [1000.0]},
                    {"key": "awa_insert_with", "peer": "awa", "name": "insert_with", "jobs_per_s": 1250.0, "values": [1250.0]},
                    {"key": "gw_add_jobs", "peer": "graphile-worker", "name": "add_jobs", "jobs_per_s": 100000.0, "values": [100000.0]},
                    {"key": "gw_process_tuned", "peer": "graphile-worker", "name": "tuned", "jobs_per_s": 24000.0, "values": [24000.0]},
                ],
            },
        })
    }

    #[test]
    fn each_ledger_figure_is_a_ratio_to_its_peer_and_w1_to_the_better_peer() {
        let r = ratios(&results(Some(60000.0)));
        assert_eq!(r[0]["ratio"], json!(0.25));
        assert_eq!(r[0]["met"], json!(false));
        // W1 against awa's 1,250, the better of the two.
        assert_eq!(r[4]["ratio"], json!(3.2));
        assert_eq!(r[4]["met"], json!(false));
        assert_eq!(r[5]["ratio"], json!(0.6));
        assert_eq!(r[5]["met"], json!(true));
        // A peer figure not measured leaves the ratio out, saying so.
        assert_eq!(r[3]["ratio"], Value::Null);
        assert_eq!(r[3]["note"], json!("n/a (peer figure not measured)"));
    }

    #[test]
    fn without_a_batch_figure_the_batch_ratio_says_so() {
        let mut r = results(None);
        r["peers"]["ratios"] = ratios(&r);
        assert_eq!(
            r["peers"]["ratios"][5]["note"],
            json!("n/a (no batch figure)")
        );
        assert_eq!(r["peers"]["ratios"][5]["met"], Value::Null);
        let md = markdown(&r);
        assert!(md.contains("| batch submit, items/s | – | graphile-worker `add_jobs`, batches | 100000 | n/a (no batch figure) | >= 0.5 | – |"), "{md}");
    }

    #[test]
    fn a_run_without_peers_has_no_peers_section() {
        assert_eq!(markdown(&json!({"w3b": {"applied_per_s": 1.0}})), "");
    }
}
