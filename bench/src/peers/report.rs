//! The peers' section of the report: their figures; one table of the ledger
//! beside each peer, same run, each side marked with its guarantee; and the
//! ledger figures held to a goal as ratios to the peer figure they are held
//! to.

use serde_json::{Value, json};
use std::fmt::Write as _;

/// The ledger's figures that have a peer counterpart, read from the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LedgerFigures {
    /// W3b: the burn-down of preloaded pending commands, applied per second.
    pub(crate) w3b_applied_per_s: Option<f64>,
    pub(crate) w3b_preloaded: Option<u64>,
    /// W1: submits per second over HTTP at the most clients measured, and
    /// that point's p99 latency.
    pub(crate) w1_submit_rps: Option<f64>,
    pub(crate) w1_p99_ms: Option<f64>,
    pub(crate) w1_clients: Option<u64>,
    /// Items per second through the batch submit endpoint: the report's
    /// top-level `batch_submit_items_per_s`, written by the workload that
    /// measures batch submission; absent (null) in a run without one.
    pub(crate) batch_submit_items_per_s: Option<f64>,
    /// W3 at its best batch size: applied per second while 64 clients
    /// submit, and that batch size.
    pub(crate) w3_applied_per_s: Option<f64>,
    pub(crate) w3_batch: Option<i64>,
}

impl LedgerFigures {
    pub(crate) fn from_results(r: &Value) -> LedgerFigures {
        let most = r["w1"]["closed"].as_array().and_then(|points| {
            points
                .iter()
                .max_by_key(|p| p["clients"].as_u64().unwrap_or(0))
        });
        let w3 = r["w3"].as_array().and_then(|points| {
            points.iter().max_by(|a, b| {
                let rate = |p: &Value| p["applied_per_s"].as_f64().unwrap_or(0.0);
                rate(a).total_cmp(&rate(b))
            })
        });
        LedgerFigures {
            w3b_applied_per_s: r["w3b"]["applied_per_s"].as_f64(),
            w3b_preloaded: r["w3b"]["preloaded"].as_u64(),
            w1_submit_rps: most.and_then(|p| p["rps"].as_f64()),
            w1_p99_ms: most.and_then(|p| p["p99_ms"].as_f64()),
            w1_clients: most.and_then(|p| p["clients"].as_u64()),
            batch_submit_items_per_s: r["batch_submit_items_per_s"].as_f64(),
            w3_applied_per_s: w3.and_then(|p| p["applied_per_s"].as_f64()),
            w3_batch: w3.and_then(|p| p["batch"].as_i64()),
        }
    }
}

/// What the ledger guarantees, for the comparison table.
pub(crate) const LEDGER_GUARANTEE: &str = "record before dispatch, an honest ambiguous";

/// One peer's column of the comparison: where each of its figures comes
/// from. For each measurement the peer's better figure among `keys` is the
/// one compared.
#[derive(Debug)]
struct Column {
    peer: &'static str,
    guarantee: &'static str,
    /// Key prefixes of one-job-per-transaction enqueueing, `<prefix>_c<n>`.
    single: &'static str,
    batch: &'static [&'static str],
    /// Why there is no batch figure, for a peer without one.
    no_batch: Option<&'static str>,
    burn_down: &'static [&'static str],
    e2e: &'static str,
}

const AT_LEAST_ONCE: &str = "at least once";

const COLUMNS: [Column; 4] = [
    Column {
        peer: "graphile-worker",
        guarantee: AT_LEAST_ONCE,
        single: "gw_add_job",
        batch: &["gw_add_jobs"],
        no_batch: None,
        burn_down: &[
            "gw_process_tuned",
            "gw_process_tuned_after_add_job",
            "gw_process_defaults",
        ],
        e2e: "gw_e2e",
    },
    Column {
        peer: "awa",
        guarantee: AT_LEAST_ONCE,
        single: "awa_insert_with",
        batch: &["awa_enqueue_params_batch", "awa_insert_many"],
        no_batch: None,
        burn_down: &[
            "awa_process",
            "awa_process_after_insert_with_more_clients",
            "awa_process_after_insert_many",
            "awa_process_after_enqueue_params_batch",
        ],
        e2e: "awa_e2e",
    },
    Column {
        peer: "pg-boss",
        guarantee: AT_LEAST_ONCE,
        single: "pgboss_send",
        batch: &["pgboss_insert"],
        no_batch: None,
        burn_down: &["pgboss_process_batch", "pgboss_process_defaults"],
        e2e: "pgboss_e2e",
    },
    Column {
        peer: "DBOS Transact",
        guarantee: "exactly once per step",
        single: "dbos_enqueue",
        batch: &[],
        no_batch: Some("no user-facing batch enqueue"),
        burn_down: &["dbos_process_tuned", "dbos_process_defaults"],
        e2e: "dbos_e2e",
    },
];

/// A peer figure of the report by its key: (its name, its value).
fn figure(r: &Value, key: &str) -> Option<(String, f64)> {
    r["peers"]["figures"]
        .as_array()?
        .iter()
        .find(|f| f["key"] == key)
        .and_then(|f| {
            let v = f["value"].as_f64().filter(|v| v.is_finite())?;
            Some((f["name"].as_str().unwrap_or(key).to_owned(), v))
        })
}

/// The largest of the figures under `keys`, with its key.
fn best(r: &Value, keys: &[String]) -> Option<(String, String, f64)> {
    keys.iter()
        .filter_map(|k| figure(r, k).map(|(name, v)| (k.clone(), name, v)))
        .max_by(|a, b| a.2.total_cmp(&b.2))
}

/// The client counts the peers enqueued from.
fn client_counts(r: &Value) -> Vec<u64> {
    r["peers"]["enqueue_clients"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

fn single_keys(r: &Value, prefix: &str) -> Vec<String> {
    client_counts(r)
        .iter()
        .map(|c| format!("{prefix}_c{c}"))
        .collect()
}

/// One cell of the comparison: the peer's figure and the ledger's as a
/// ratio to it.
fn cell(ledger: Option<f64>, peer: Option<(String, String, f64)>, missing: Option<&str>) -> Value {
    match peer {
        Some((key, name, value)) => json!({
            "key": key,
            "figure": name,
            "value": value,
            "ratio": ledger.filter(|_| value > 0.0).map(|l| l / value),
        }),
        None => json!({"note": missing.unwrap_or("not measured")}),
    }
}

/// The comparison: for each measurement, the ledger's figure and each
/// peer's better figure, with the ratio ledger / peer.
pub(crate) fn comparison(r: &Value) -> Value {
    let l = LedgerFigures::from_results(r);
    let most = client_counts(r).into_iter().max();
    let rows: [(&str, &str, Option<f64>, String, &str); 5] = [
        (
            "single",
            "single submit, one command or job per request and transaction (jobs/s; the peer's better of its client counts)",
            l.w1_submit_rps,
            format!("W1, {} clients over HTTP", l.w1_clients.unwrap_or(0)),
            "jobs/s",
        ),
        (
            "batch",
            "batch submit, 500 per call (items/s)",
            l.batch_submit_items_per_s,
            "W7, 4 devices over HTTP".to_owned(),
            "jobs/s",
        ),
        (
            "burn_down",
            "burn-down of queued no-op work by one worker (jobs/s; the peer's better setting)",
            l.w3b_applied_per_s,
            format!("W3b, {} preloaded", l.w3b_preloaded.unwrap_or(0)),
            "jobs/s",
        ),
        (
            "e2e",
            "end to end: finished per second while 64 clients submit one at a time, one worker draining (jobs/s)",
            l.w3_applied_per_s,
            format!(
                "W3 at batch {}, 64 clients over HTTP",
                l.w3_batch.unwrap_or(0)
            ),
            "jobs/s",
        ),
        (
            "p99",
            "p99 submit latency at equal concurrency (ms; less is better, so a ratio under 1 favours the ledger)",
            l.w1_p99_ms,
            format!("W1, {} clients", l.w1_clients.unwrap_or(0)),
            "ms",
        ),
    ];
    let out: Vec<Value> = rows
        .into_iter()
        .map(|(id, what, ledger, ledger_how, unit)| {
            let peers: Vec<Value> = COLUMNS
                .iter()
                .map(|c| {
                    let (peer, missing) = match id {
                        "single" => (best(r, &single_keys(r, c.single)), None),
                        "batch" => (
                            best(
                                r,
                                &c.batch.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>(),
                            ),
                            c.no_batch,
                        ),
                        "burn_down" => (
                            best(
                                r,
                                &c.burn_down
                                    .iter()
                                    .map(|k| (*k).to_owned())
                                    .collect::<Vec<_>>(),
                            ),
                            None,
                        ),
                        "e2e" => (best(r, &[c.e2e.to_owned()]), None),
                        _ => (
                            most.and_then(|m| {
                                let key = format!("{}_c{m}_p99", c.single);
                                figure(r, &key).map(|(n, v)| (key, n, v))
                            }),
                            None,
                        ),
                    };
                    let mut v = cell(ledger, peer, missing);
                    v["peer"] = json!(c.peer);
                    v["guarantee"] = json!(c.guarantee);
                    v
                })
                .collect();
            json!({
                "measurement": id,
                "what": what,
                "unit": unit,
                "ledger": ledger,
                "ledger_how": ledger_how,
                "ledger_guarantee": LEDGER_GUARANTEE,
                "peers": peers,
            })
        })
        .collect();
    Value::Array(out)
}

/// One comparison held to a goal. `missing` says why there is no ratio when
/// the ledger figure is absent.
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

/// A figure by key, labelled for the goals table.
fn labelled(r: &Value, key: &str, label: &str) -> Option<(String, f64)> {
    figure(r, key).map(|(_, v)| (label.to_owned(), v))
}

/// The ledger figures held to a goal (issue 16's), each as a ratio to the
/// peer figure it is held to. The single-submit goal takes the best
/// one-per-transaction enqueue of any peer at any client count measured.
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
    let single = COLUMNS
        .iter()
        .filter_map(|c| {
            best(r, &single_keys(r, c.single)).map(|(key, _, v)| {
                let clients = key.rsplit("_c").next().unwrap_or("?");
                (
                    format!("{}, one per transaction, {clients} clients", c.peer),
                    v,
                )
            })
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    json!([
        ratio(
            w3b,
            labelled(r, "gw_process_tuned", "graphile-worker processing, tuned"),
            Some(1.0)
        ),
        ratio(
            w3b,
            labelled(
                r,
                "gw_process_tuned_startup_adjusted",
                "graphile-worker processing, tuned, less start-up"
            ),
            None
        ),
        ratio(w1, single, Some(4.0)),
        ratio(
            batch,
            labelled(r, "gw_add_jobs", "graphile-worker `add_jobs`, batches"),
            Some(0.5)
        ),
    ])
}

fn num(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() && x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.is_finite() && x.abs() >= 10.0 => format!("{x:.1}"),
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
    let version = |k: &str| p[k]["version"].as_str().unwrap_or("?").to_owned();
    let _ = writeln!(
        md,
        "\n**Peers** (`--peers`: on the same cluster, in the same run, each in a database of its own; \
         {} no-op jobs per step, median of {} repetition(s); single enqueue from {} clients; \
         end to end: {} clients for {} s; graphile-worker {}, pg-boss {} and DBOS Transact {} on node {}, awa {}):\n\n\
         | peer | measurement | value | unit | / L_raw | runs |\n|---|---|---|---|---|---|",
        p["jobs"],
        p["reps"],
        client_counts(r)
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" and "),
        p["end_to_end_clients"],
        p["end_to_end_seconds"],
        version("graphile_worker"),
        version("pg_boss"),
        version("dbos"),
        p["graphile_worker"]["node"].as_str().unwrap_or("?"),
        version("awa"),
    );
    for f in p["figures"].as_array().into_iter().flatten() {
        let value = f["value"].as_f64();
        let unit = f["unit"].as_str().unwrap_or("");
        let _ = writeln!(
            md,
            "| {} | {} | {} | {unit} | {} | {} |",
            f["peer"].as_str().unwrap_or(""),
            f["name"].as_str().unwrap_or(""),
            num(value),
            if unit == "jobs/s" {
                num(value.zip(l_raw).map(|(a, b)| a / b))
            } else {
                "–".to_owned()
            },
            f["values"].as_array().map_or(0, Vec::len),
        );
    }
    comparison_markdown(&mut md, p);
    let _ = writeln!(
        md,
        "\n**The ledger's goals against the peers** (ratio = ledger figure / peer figure, both from this run):\n\n\
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

/// The one table: a row per measurement, the ledger and each peer side by
/// side, each with its guarantee.
fn comparison_markdown(md: &mut String, p: &Value) {
    let Some(rows) = p["comparison"].as_array() else {
        return;
    };
    let head: Vec<String> = COLUMNS
        .iter()
        .map(|c| format!("{} ({})", c.peer, c.guarantee))
        .collect();
    let _ = writeln!(
        md,
        "\n**The ledger beside each peer** (same run; each peer cell: the peer's figure, then \
         ledger / peer in bold; each side's guarantee in its heading):\n\n\
         | measurement | ledger ({LEDGER_GUARANTEE}) | {} |\n|---|---|{}",
        head.join(" | "),
        "---|".repeat(COLUMNS.len()),
    );
    for row in rows {
        let unit = row["unit"].as_str().unwrap_or("");
        let cells: Vec<String> = row["peers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| match c["value"].as_f64() {
                Some(v) => format!(
                    "{} {unit}: **{} ×**",
                    num(Some(v)),
                    num(c["ratio"].as_f64())
                ),
                None => format!("n/a ({})", c["note"].as_str().unwrap_or("")),
            })
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} {unit} ({}) | {} |",
            row["what"].as_str().unwrap_or(""),
            num(row["ledger"].as_f64()),
            row["ledger_how"].as_str().unwrap_or(""),
            cells.join(" | "),
        );
    }
    let _ = writeln!(
        md,
        "\nRecord before dispatch, an honest ambiguous: a command's row is durable before \
         the reply, its `effect_started` is committed before its effect runs, and a command \
         cut off after that ends `ambiguous` (or as a reconcile probe says), never run again. \
         At least once: nothing is durable about a job's run before it runs; a worker that \
         dies mid-job leaves it to be run again. Exactly once per step: a workflow's step \
         outcome is checkpointed after the step runs; a completed step never runs again, \
         one cut off before its checkpoint does."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(key: &str, peer: &str, unit: &str, value: f64) -> Value {
        json!({"key": key, "peer": peer, "name": key, "unit": unit, "value": value, "values": [value]})
    }

    fn results(batch: Option<f64>) -> Value {
        json!({
            "baselines": {"before": {"L_raw": {"tps": 10000.0}}},
            "w1": {"closed": [{"clients": 1, "rps": 100.0, "p99_ms": 2.0}, {"clients": 64, "rps": 4000.0, "p99_ms": 40.0}]},
            "w3": [{"batch": 1, "applied_per_s": 100.0}, {"batch": 128, "applied_per_s": 1500.0}],
            "w3b": {"applied_per_s": 6000.0, "preloaded": 20000},
            "batch_submit_items_per_s": batch,
            "peers": {
                "jobs": 20000, "reps": 1, "enqueue_clients": [8, 64], "end_to_end_seconds": 10,
                "graphile_worker": {"version": "0.18.0", "node": "v20"},
                "awa": {"version": "0.6.9"},
                "pg_boss": {"version": "10.4.2"},
                "dbos": {"version": "5.3.0"},
                "figures": [
                    fig("gw_add_job_c8", "graphile-worker", "jobs/s", 1000.0),
                    fig("gw_add_job_c64", "graphile-worker", "jobs/s", 800.0),
                    fig("gw_add_job_c64_p99", "graphile-worker", "ms", 80.0),
                    fig("awa_insert_with_c8", "awa", "jobs/s", 900.0),
                    fig("awa_insert_with_c64", "awa", "jobs/s", 1250.0),
                    fig("gw_add_jobs", "graphile-worker", "jobs/s", 100000.0),
                    fig("gw_process_tuned", "graphile-worker", "jobs/s", 24000.0),
                    fig("gw_process_defaults", "graphile-worker", "jobs/s", 2000.0),
                    fig("pgboss_process_defaults", "pg-boss", "jobs/s", 0.5),
                    fig("pgboss_process_batch", "pg-boss", "jobs/s", 3000.0),
                    fig("dbos_enqueue_c64", "DBOS Transact", "jobs/s", 700.0),
                    fig("dbos_e2e", "DBOS Transact", "jobs/s", 500.0),
                ],
            },
        })
    }

    #[test]
    fn each_goal_is_a_ratio_to_its_peer_and_single_submit_to_the_best_peer_at_any_client_count() {
        let r = ratios(&results(Some(60000.0)));
        assert_eq!(r[0]["ratio"], json!(0.25));
        assert_eq!(r[0]["met"], json!(false));
        // W1 against awa's 1,250 at 64 clients, the best single figure of
        // any peer at any client count.
        assert_eq!(r[2]["ratio"], json!(3.2));
        assert_eq!(r[2]["peer"], json!("awa, one per transaction, 64 clients"));
        assert_eq!(r[2]["met"], json!(false));
        assert_eq!(r[3]["ratio"], json!(0.6));
        assert_eq!(r[3]["met"], json!(true));
        // A peer figure not measured leaves the ratio out, saying so.
        assert_eq!(r[1]["ratio"], Value::Null);
        assert_eq!(r[1]["note"], json!("n/a (peer figure not measured)"));
    }

    #[test]
    fn the_comparison_takes_each_peers_better_figure_and_marks_each_sides_guarantee() {
        let c = comparison(&results(Some(60000.0)));
        let row = |id: &str| {
            c.as_array()
                .expect("rows")
                .iter()
                .find(|r| r["measurement"] == id)
                .expect("a row")
                .clone()
        };
        let single = row("single");
        assert_eq!(single["ledger"], json!(4000.0));
        assert_eq!(single["ledger_guarantee"], json!(LEDGER_GUARANTEE));
        // graphile-worker's better of 8 (1,000) and 64 (800) clients.
        assert_eq!(single["peers"][0]["key"], json!("gw_add_job_c8"));
        assert_eq!(single["peers"][0]["ratio"], json!(4.0));
        assert_eq!(single["peers"][0]["guarantee"], json!(AT_LEAST_ONCE));
        assert_eq!(single["peers"][3]["peer"], json!("DBOS Transact"));
        assert_eq!(
            single["peers"][3]["guarantee"],
            json!("exactly once per step")
        );
        // pg-boss's better setting for the burn-down.
        let burn = row("burn_down");
        assert_eq!(burn["peers"][2]["key"], json!("pgboss_process_batch"));
        assert_eq!(burn["peers"][2]["ratio"], json!(2.0));
        // DBOS has no batch figure, and says why.
        let batch = row("batch");
        assert_eq!(
            batch["peers"][3]["note"],
            json!("no user-facing batch enqueue")
        );
        // End to end: W3 at its best batch size.
        let e2e = row("e2e");
        assert_eq!(e2e["ledger"], json!(1500.0));
        assert_eq!(e2e["peers"][3]["ratio"], json!(3.0));
        // The latency is compared at the most clients, equal concurrency.
        let p99 = row("p99");
        assert_eq!(p99["peers"][0]["key"], json!("gw_add_job_c64_p99"));
        assert_eq!(p99["peers"][0]["ratio"], json!(0.5));
        assert_eq!(p99["peers"][1]["note"], json!("not measured"));
    }

    #[test]
    fn without_a_batch_figure_the_batch_ratio_says_so() {
        let mut r = results(None);
        r["peers"]["ratios"] = ratios(&r);
        r["peers"]["comparison"] = comparison(&r);
        assert_eq!(
            r["peers"]["ratios"][3]["note"],
            json!("n/a (no batch figure)")
        );
        assert_eq!(r["peers"]["ratios"][3]["met"], Value::Null);
        let md = markdown(&r);
        assert!(md.contains("| batch submit, items/s | – | graphile-worker `add_jobs`, batches | 100000 | n/a (no batch figure) | >= 0.5 | – |"), "{md}");
        assert!(md.contains("| single submit, one command or job per request and transaction (jobs/s; the peer's better of its client counts) | 4000 jobs/s (W1, 64 clients over HTTP) | 1000 jobs/s: **4.00 ×** |"), "{md}");
    }

    #[test]
    fn a_run_without_peers_has_no_peers_section() {
        assert_eq!(markdown(&json!({"w3b": {"applied_per_s": 1.0}})), "");
    }
}
