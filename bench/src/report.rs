//! The ratios, the targets and the markdown table.

use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::Path;

const BEGIN: &str = "<!-- bench:begin -->";
const END: &str = "<!-- bench:end -->";

/// What the run ran on.
pub(crate) fn machine() -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let memory = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .map(|l| l.trim().to_owned())
        .unwrap_or_default();
    json!({
        "cores": std::thread::available_parallelism().map(usize::from).unwrap_or(0),
        "cpu": cpu,
        "memory": memory,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
    })
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// After / before for each baseline; a change over 15 % flags the run.
pub(crate) fn drift(r: &Value) -> Value {
    let mut out = serde_json::Map::new();
    let mut flagged = false;
    for name in ["L_raw", "L_submit", "L_dup"] {
        let before = f(&r["baselines"]["before"][name]["tps"]);
        let after = f(&r["baselines"]["after"][name]["tps"]);
        let change = after / before - 1.0;
        flagged |= change.abs() > 0.15 || change.is_nan();
        out.insert(name.to_owned(), json!(change));
    }
    out.insert("flagged".to_owned(), json!(flagged));
    Value::Object(out)
}

fn target(name: &str, measured: f64, goal: &str, met: bool) -> Value {
    json!({"target": name, "measured": measured, "goal": goal, "met": met})
}

/// Every target of the benchmark, met or not, as a ratio measured in this run.
pub(crate) fn targets(r: &Value) -> Value {
    let base = |name: &str| f(&r["baselines"]["before"][name]["tps"]);
    let closed = r["w1"]["closed"].as_array().cloned().unwrap_or_default();
    let most = closed
        .iter()
        .max_by_key(|p| p["clients"].as_u64().unwrap_or(0));
    let w1 = most.map_or(f64::NAN, |p| f(&p["rps"])) / base("L_submit");
    let open = &r["w1"]["open"];
    let p99 = f(&open["p99_ms"]) / f(&open["pgbench_same_rate"]["p99_ms"]);
    let mixes = r["w2"]["mixes"].as_array().cloned().unwrap_or_default();
    let w2 = mixes
        .iter()
        .find(|m| f(&m["duplicate_share"]) > 0.9)
        .map_or(f64::NAN, |m| f(&m["rps"]))
        / base("L_dup");
    let wal_dup = f(&r["w2"]["wal_bytes_per_duplicate"]);
    let w3 = r["w3"].as_array().cloned().unwrap_or_default();
    let best = w3
        .iter()
        .map(|p| f(&p["applied_per_s"]))
        .fold(f64::NAN, f64::max);
    let batch1 = w3
        .iter()
        .find(|p| p["batch"].as_i64() == Some(1))
        .map_or(f64::NAN, |p| f(&p["applied_per_s"]));
    let w3b = f(&r["w3b"]["applied_per_s"]) / base("L_raw");
    let hot = f(&r["w3b"]["hot_update_share"]);
    let w3_batches = f(&r["w3_batches"]["applied_per_s"]) / base("L_raw");
    let w7 = f(&r["w7"]["items_per_s"]) / base("L_raw");
    let w4 = r["w4"].as_array().cloned().unwrap_or_default();
    let (small, large) = (w4.first(), w4.last());
    let w4_ratio = |field: &str| match (small, large) {
        (Some(s), Some(l)) => f(&l[field]) / f(&s[field]),
        _ => f64::NAN,
    };
    let w5 = &r["w5"];
    let retries = f(&w5["serializable"]["retries_per_1000_transitions"]);
    let isolation_cost =
        f(&w5["serializable"]["applied_per_s"]) / f(&w5["read_committed"]["applied_per_s"]);
    let claim_cost = f(&w5["burn_down"]["serializable"]["applied_per_s"])
        / f(&w5["burn_down"]["claim_read_committed"]["applied_per_s"]);
    let memory = f(&r["memory"]["change"]);
    let sizes = match (small, large) {
        (Some(s), Some(l)) => format!("{} vs {} rows", l["rows"], s["rows"]),
        _ => String::new(),
    };
    json!([
        target(
            "W1 submit, most clients / L_submit",
            w1,
            ">= 1.0",
            w1 >= 1.0
        ),
        target(
            "W1 open loop at 50 %: p99 / pgbench p99 at the same rate",
            p99,
            "<= 3",
            p99 <= 3.0
        ),
        target("W2 99 % duplicates / L_dup", w2, ">= 0.5", w2 >= 0.5),
        target(
            "W2 WAL bytes per duplicate",
            wal_dup,
            "~0 (< 100)",
            wal_dup < 100.0
        ),
        target(
            "W3 end to end, best batch / L_raw",
            best / base("L_raw"),
            ">= 0.4",
            best / base("L_raw") >= 0.4
        ),
        target(
            "W3 best batch / batch size 1",
            best / batch1,
            ">= 3",
            best / batch1 >= 3.0
        ),
        target("W3b burn-down / L_raw", w3b, ">= 1.0", w3b >= 1.0),
        target(
            "W3b share of commands updates that are HOT",
            hot,
            ">= 0.90",
            hot >= 0.90
        ),
        target(
            "W3 end to end, batch-submitting clients / L_raw",
            w3_batches,
            ">= 0.4",
            w3_batches >= 0.4
        ),
        target(
            "W7 batch submit, items per second / L_raw",
            w7,
            "reported",
            w7.is_finite()
        ),
        target(
            &format!("W4 submit throughput, {sizes}"),
            w4_ratio("submit_rps"),
            ">= 0.8",
            w4_ratio("submit_rps") >= 0.8
        ),
        target(
            &format!("W4 end-to-end throughput, {sizes}"),
            w4_ratio("e2e_applied_per_s"),
            ">= 0.8",
            w4_ratio("e2e_applied_per_s") >= 0.8
        ),
        target(
            &format!("W4 submit p99, {sizes}"),
            w4_ratio("submit_p99_ms"),
            "<= 2",
            w4_ratio("submit_p99_ms") <= 2.0
        ),
        target(
            &format!(
                "W5 serialization retries per 1,000 transitions (default batch {})",
                w5["batch"]
            ),
            retries,
            "< 10",
            retries < 10.0
        ),
        target(
            "W5 end to end at SERIALIZABLE / at READ COMMITTED (same batch)",
            isolation_cost,
            "reported",
            isolation_cost.is_finite()
        ),
        target(
            "W5 burn-down with the claim at SERIALIZABLE / at READ COMMITTED",
            claim_cost,
            "reported",
            claim_cost.is_finite()
        ),
        target(
            "resident memory change over the W3 run",
            memory,
            "within ±0.10",
            memory.abs() <= 0.10
        ),
    ])
}

fn n(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.is_nan() => "–".to_owned(),
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) if x.abs() >= 10.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
        None => "–".to_owned(),
    }
}

/// The run as markdown tables.
#[allow(clippy::too_many_lines)]
pub(crate) fn markdown(r: &Value) -> String {
    let mut md = String::new();
    let s = &r["settings"];
    let m = &r["machine"];
    let _ = writeln!(
        md,
        "Run: `{}` on {} cores ({}), {}; PostgreSQL {}, fsync={}, synchronous_commit={}, \
         wal_sync_method={}, shared_buffers={} (8 kB pages); {} s per point.\n",
        r["command"].as_str().unwrap_or(""),
        m["cores"],
        m["cpu"].as_str().unwrap_or(""),
        m["memory"].as_str().unwrap_or(""),
        s["server_version"].as_str().unwrap_or(""),
        s["fsync"].as_str().unwrap_or(""),
        s["synchronous_commit"].as_str().unwrap_or(""),
        s["wal_sync_method"].as_str().unwrap_or(""),
        s["shared_buffers"].as_str().unwrap_or(""),
        r["seconds_per_point"],
    );
    let _ = writeln!(
        md,
        "**Targets** (ratios to baselines measured in this run):\n"
    );
    let _ = writeln!(md, "| target | measured | goal | met |\n|---|---|---|---|");
    for t in r["targets"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            t["target"].as_str().unwrap_or(""),
            n(&t["measured"]),
            t["goal"].as_str().unwrap_or(""),
            if t["met"].as_bool() == Some(true) {
                "yes"
            } else {
                "**no**"
            }
        );
    }
    let drift = &r["baselines"]["drift"];
    let _ = writeln!(
        md,
        "\n**Baselines** (pgbench, prepared statements, on the same cluster):\n\n\
         | baseline | clients | tps before | tps after | drift | p50 ms | p99 ms |\n|---|---|---|---|---|---|---|"
    );
    for name in ["L_raw", "L_submit", "L_dup"] {
        let b = &r["baselines"]["before"][name];
        let a = &r["baselines"]["after"][name];
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {:+.0} % | {} | {} |",
            b["clients"],
            n(&b["tps"]),
            n(&a["tps"]),
            f(&drift[name]) * 100.0,
            n(&b["p50_ms"]),
            n(&b["p99_ms"]),
        );
    }
    if drift["flagged"].as_bool() == Some(true) {
        let _ = writeln!(
            md,
            "\n**Flagged:** a baseline moved more than 15 % between the start and the end of the run."
        );
    }
    let _ = writeln!(
        md,
        "\n**W1 submit over HTTP** (unique keys, closed loop):\n\n\
         | clients | req/s | / L_submit | p50 ms | p99 ms | p99.9 ms |\n|---|---|---|---|---|---|"
    );
    let l_submit = f(&r["baselines"]["before"]["L_submit"]["tps"]);
    for p in r["w1"]["closed"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} | {} | {} | {} |",
            p["clients"],
            n(&p["rps"]),
            f(&p["rps"]) / l_submit,
            n(&p["p50_ms"]),
            n(&p["p99_ms"]),
            n(&p["p999_ms"]),
        );
    }
    let o = &r["w1"]["open"];
    let _ = writeln!(
        md,
        "\nOpen loop at {} req/s (half the best closed-loop rate): p50 {} ms, p99 {} ms, \
         p99.9 {} ms; pgbench running the same SQL at the same rate: p99 {} ms.",
        n(&o["rate"]),
        n(&o["p50_ms"]),
        n(&o["p99_ms"]),
        n(&o["p999_ms"]),
        n(&o["pgbench_same_rate"]["p99_ms"]),
    );
    let _ = writeln!(
        md,
        "\n**W2 duplicates** (64 clients; a duplicate repeats a recorded key and body):\n\n\
         | duplicates | req/s | p50 ms | p99 ms |\n|---|---|---|---|"
    );
    for mix in r["w2"]["mixes"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| {:.0} % | {} | {} | {} |",
            f(&mix["duplicate_share"]) * 100.0,
            n(&mix["rps"]),
            n(&mix["p50_ms"]),
            n(&mix["p99_ms"]),
        );
    }
    let _ = writeln!(
        md,
        "\nWAL per request (`pg_stat_wal`): {} bytes per duplicate, {} bytes per new command.",
        n(&r["w2"]["wal_bytes_per_duplicate"]),
        n(&r["w2"]["wal_bytes_per_new"]),
    );
    let _ = writeln!(
        md,
        "\n**W3 end to end** (64 clients submit, one custodian, `noop` effect; applied counted in the database):\n\n\
         | claim batch | applied/s | / L_raw | submit→applied p50 ms | p99 ms | WAL syncs per command | serialization retries per 1,000 transitions |\n\
         |---|---|---|---|---|---|---|"
    );
    let l_raw = f(&r["baselines"]["before"]["L_raw"]["tps"]);
    for p in r["w3"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} | {} | {} | {} | {} |",
            p["batch"],
            n(&p["applied_per_s"]),
            f(&p["applied_per_s"]) / l_raw,
            n(&p["p50_ms"]),
            n(&p["p99_ms"]),
            n(&p["wal_syncs_per_command"]),
            n(&p["retries_per_1000_transitions"]),
        );
    }
    let w5 = &r["w5"];
    let _ = writeln!(
        md,
        "\n**W5 isolation** (W3 at the custodian's default batch of {}, back to back; the service runs \
         `{}`; READ COMMITTED is a mode only the harness selects):\n\n\
         | claim at | start and record at | applied/s | submit→applied p99 ms | serialization retries | per 1,000 transitions |\n\
         |---|---|---|---|---|---|",
        w5["batch"],
        w5["service"].as_str().unwrap_or("?"),
    );
    for (claim, rest, p) in [
        ("SERIALIZABLE", "SERIALIZABLE", &w5["serializable"]),
        (
            "READ COMMITTED",
            "SERIALIZABLE",
            &w5["claim_read_committed"],
        ),
        ("READ COMMITTED", "READ COMMITTED", &w5["read_committed"]),
    ] {
        let _ = writeln!(
            md,
            "| {claim} | {rest} | {} | {} | {} | {} |",
            n(&p["applied_per_s"]),
            n(&p["p99_ms"]),
            p["serialization_retries"],
            n(&p["retries_per_1000_transitions"]),
        );
    }
    let _ = writeln!(
        md,
        "\nBurn-down of {} preloaded commands (no HTTP), start and record at SERIALIZABLE, each \
         form twice (A B B A; the mean, then each run):\n\n\
         | claim at | applied/s | runs | serialization retries (both runs) |\n|---|---|---|---|",
        w5["burn_down"]["serializable"]["preloaded"],
    );
    for (claim, p) in [
        ("SERIALIZABLE", &w5["burn_down"]["serializable"]),
        ("READ COMMITTED", &w5["burn_down"]["claim_read_committed"]),
    ] {
        let _ = writeln!(
            md,
            "| {claim} | {} | {} / {} | {} |",
            n(&p["applied_per_s"]),
            n(&p["runs"][0]),
            n(&p["runs"][1]),
            p["serialization_retries"],
        );
    }
    let c = &r["w1_counts"];
    if !c.is_null() {
        let _ = writeln!(
            md,
            "\n**The counters on the submit path** (W1 at {} clients, the history's counting trigger \
             on, off, off, on): {} and {} req/s counting, {} and {} not; counting / not = {:.3}.",
            c["clients"],
            n(&c["counting_rps"][0]),
            n(&c["counting_rps"][1]),
            n(&c["not_counting_rps"][0]),
            n(&c["not_counting_rps"][1]),
            f(&c["ratio"]),
        );
    }
    let b = &r["w3b"];
    let _ = writeln!(
        md,
        "\n**W3b burn-down**: {} pending commands preloaded, drained by one custodian (batch {}) in {} s: \
         {} applied/s, {:.2} × L_raw; {} WAL syncs per command; {:.0} % of the updates of `commands` HOT.",
        b["preloaded"],
        b["batch"],
        n(&b["seconds"]),
        n(&b["applied_per_s"]),
        f(&b["applied_per_s"]) / l_raw,
        n(&b["wal_syncs_per_command"]),
        f(&b["hot_update_share"]) * 100.0,
    );
    let w7 = &r["w7"];
    let _ = writeln!(
        md,
        "\n**W7 batch submit**: {} devices, each sending batches of {} new commands to \
         `POST /v1/commands/batch`: {} items/s ({:.2} × L_raw), batch p50 {} ms, p99 {} ms, {} batches failed.",
        w7["clients"],
        w7["items_per_batch"],
        n(&w7["items_per_s"]),
        f(&w7["items_per_s"]) / l_raw,
        n(&w7["batch_p50_ms"]),
        n(&w7["batch_p99_ms"]),
        w7["batches_failed"],
    );
    let e = &r["w3_batches"];
    let _ = writeln!(
        md,
        "\n**W3 with batch clients**: {} devices sending batches of {} while one custodian (batch {}) \
         drains: {} submitted/s, {} applied/s ({:.2} × L_raw), submit→applied p50 {} ms, p99 {} ms.",
        e["clients"],
        e["items_per_batch"],
        e["batch"],
        n(&e["submit_rps"]),
        n(&e["applied_per_s"]),
        f(&e["applied_per_s"]) / l_raw,
        n(&e["p50_ms"]),
        n(&e["p99_ms"]),
    );
    let _ = writeln!(
        md,
        "\n**W6 scale-out** (the burn-down split over custodians, one authority each):\n\n\
         | custodians | pending preloaded | applied/s | / one custodian | / L_raw |\n|---|---|---|---|---|"
    );
    let w6 = r["w6"].as_array().cloned().unwrap_or_default();
    let one = w6.first().map_or(f64::NAN, |p| f(&p["applied_per_s"]));
    for p in &w6 {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.2} | {:.2} |",
            p["custodians"],
            p["preloaded"],
            n(&p["applied_per_s"]),
            f(&p["applied_per_s"]) / one,
            f(&p["applied_per_s"]) / l_raw,
        );
    }
    let _ = writeln!(
        md,
        "\n**W4 ledger size** (terminal rows preloaded; 64 clients):\n\n\
         | terminal rows | submit req/s | submit p99 ms | end to end: submitted/s | applied/s | submit→applied p99 ms |\n|---|---|---|---|---|---|"
    );
    for p in r["w4"].as_array().into_iter().flatten() {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} |",
            p["rows"],
            n(&p["submit_rps"]),
            n(&p["submit_p99_ms"]),
            n(&p["e2e_submit_rps"]),
            n(&p["e2e_applied_per_s"]),
            n(&p["e2e_p99_ms"]),
        );
    }
    let _ = writeln!(
        md,
        "\n**W4's points, per command submitted (submit) or applied (end to end)**, each \
         point right after a `CHECKPOINT` (blocks read from outside shared buffers, and the \
         time reading them with `track_io_timing`; full-page images in the WAL; buffers a \
         backend wrote itself to find a free one):\n\n\
         | terminal rows | point | WAL bytes | full-page images | blocks read | read ms | backend writes | checkpoints | most read |\n|---|---|---|---|---|---|---|---|---|"
    );
    let points = r["w4"].as_array().into_iter().flatten().flat_map(|p| {
        [("submit", "submit"), ("end to end", "e2e")]
            .into_iter()
            .map(move |(point, prefix)| (p, point, prefix))
    });
    for (p, point, prefix) in points {
        let io = &p[format!("{prefix}_io_per_command")];
        if io.is_null() {
            continue;
        }
        let most = io["blocks_read_by_relation"]
            .as_array()
            .map(|m| {
                m.iter()
                    .take(3)
                    .map(|r| {
                        format!(
                            "{} {:.2}",
                            r["relation"].as_str().unwrap_or("?"),
                            f(&r["blocks"])
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "| {} | {point} | {} | {:.3} | {:.2} | {:.3} | {:.3} | {} | {} |",
            p["rows"],
            n(&p[format!("{prefix}_wal_bytes_per_command")]),
            f(&io["wal_full_page_images"]),
            f(&io["blocks_read"]),
            f(&io["read_ms"]),
            f(&io["backend_writes"]),
            io["checkpoints"],
            most,
        );
    }
    let mem = &r["memory"];
    let _ = writeln!(
        md,
        "\n**Memory**: over {} s of W3 at 16 clients ({} requests), the resident memory of the \
         process running the API, the custodian and the load went from {} MiB (first third, after \
         warm-up) to {} MiB (last third): {:+.1} %.",
        mem["seconds"],
        mem["requests"],
        n(&json!(f(&mem["rss_kib_early"]) / 1024.0)),
        n(&json!(f(&mem["rss_kib_late"]) / 1024.0)),
        f(&mem["change"]) * 100.0,
    );
    md
}

/// Puts the results into docs/: the files under docs/bench/, the table
/// between the markers in docs/PERFORMANCE.md.
pub(crate) fn write_docs(out: &Path, markdown: &str) -> anyhow::Result<()> {
    let docs = Path::new("docs");
    std::fs::create_dir_all(docs.join("bench"))?;
    for file in ["results.json", "chart.png"] {
        std::fs::copy(out.join(file), docs.join("bench").join(file))?;
    }
    let path = docs.join("PERFORMANCE.md");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let block = format!("{BEGIN}\n{markdown}\n{END}");
    let updated = match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if b < e => format!("{}{block}{}", &text[..b], &text[e + END.len()..]),
        _ => format!("{text}\n{block}\n"),
    };
    std::fs::write(path, updated)?;
    Ok(())
}
