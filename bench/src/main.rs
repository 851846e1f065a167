//! ledger-bench: the ledger against PostgreSQL's own limit, in one run on one
//! cluster. Every figure it reports is a ratio to a pgbench baseline measured
//! in the same run, because absolute figures drift from machine to machine
//! and from run to run.
//!
//! `cargo run --release --bin ledger-bench -- --help` (this package is bench/ in the
//! workspace; it reaches the service only through the library); docs/PERFORMANCE.md
//! explains each workload and the targets.

// A benchmark reports by printing.
#![allow(clippy::print_stdout)]

mod chart;
mod load;
mod peers;
mod pgbench;
mod report;
mod workloads;

use anyhow::{Context as _, bail};
use clap::Parser;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(about = "Benchmark the ledger against pgbench baselines on the same cluster")]
struct Args {
    /// Use this database instead of a private cluster (it must be durable:
    /// fsync and synchronous_commit on).
    #[arg(long, env = "BENCH_DATABASE_URL")]
    database_url: Option<String>,
    /// Seconds each measured point runs.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Concurrent clients for W1.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    clients: Vec<usize>,
    /// Claim batch sizes for W3.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,128")]
    batch_sizes: Vec<i64>,
    /// Devices sending batches in W7 and in W3 with batch clients.
    #[arg(long, default_value_t = 4)]
    batch_clients: usize,
    /// Commands per batch in W7 and in W3 with batch clients.
    #[arg(long, default_value_t = 500)]
    batch_items: usize,
    /// Effect latencies (ms) for W8, the defaults check.
    #[arg(long, value_delimiter = ',', default_value = "1,20,200")]
    effect_ms: Vec<u64>,
    /// Custodian settings W8 tries beside the defaults, as batch:max_in_flight.
    #[arg(long, value_delimiter = ',', default_value = "32:64,128:512")]
    w8_custodians: Vec<String>,
    /// Pending commands preloaded for W3b.
    #[arg(long, default_value_t = 100_000)]
    burn_down: usize,
    /// Custodians (one authority each) for W6, the scale-out burn-down.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    custodians: Vec<usize>,
    /// Terminal rows preloaded for W4 (cumulative).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,1000000")]
    ledger_sizes: Vec<usize>,
    /// Add 10^7 rows to W4 (slow: about an hour of preloading on 2 cores).
    #[arg(long)]
    ten_million: bool,
    /// How long W3 runs while the API's resident memory is sampled (the
    /// target is stated for 600 s: ten minutes).
    #[arg(long, default_value_t = 600)]
    memory_seconds: u64,
    /// The API's database pool (`serve --max-connections`).
    #[arg(long, default_value_t = 16)]
    api_pool: u32,
    /// Where results.json, results.md and chart.png go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Also write the results into docs/ (docs/bench/ and the table in
    /// docs/PERFORMANCE.md).
    #[arg(long)]
    docs: bool,
    /// A smoke run: tiny sizes and 2 s points, to check the harness works.
    #[arg(long)]
    quick: bool,
    /// Run only these workloads (w1, w1counts, w2, w3, w5, w7, w3batch, w8, w3b, w6, memory, w4); the
    /// baselines always run. For quick experiments: the targets of the
    /// workloads left out read as not met.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also measure the peers on the same cluster in the same run, each in
    /// a database of its own: graphile-worker 0.18.0 (at its defaults and
    /// with its documented tuned settings), pg-boss 10.4.2 (at its defaults
    /// and with its documented batch settings) and DBOS Transact 5.3.0 (at
    /// its defaults and with the settings its docs give for a queue's
    /// throughput), installed with npm from the lock files in bench/peers/
    /// into target/peers/, and awa 0.6.9 (bench/peers/awa, built with cargo,
    /// fetching from crates.io): single enqueue from 8 clients and from the
    /// most W1 clients, batch enqueue, processing of no-op jobs, and end to
    /// end. The report then gives the ledger's figures as ratios to theirs.
    /// Needs node, npm and cargo; never part of a run without it.
    #[arg(long)]
    peers: bool,
    /// No-op jobs per peer step (default 20,000; 2,000 with --quick).
    #[arg(long)]
    peer_jobs: Option<usize>,
    /// Repetitions of the peers' steps; the median is reported.
    #[arg(long, default_value_t = 1)]
    peer_reps: usize,
}

impl Args {
    /// `--w8-custodians`, parsed.
    fn w8_configs(&self) -> anyhow::Result<Vec<(i64, usize)>> {
        self.w8_custodians
            .iter()
            .map(|c| {
                let (b, f) = c
                    .split_once(':')
                    .with_context(|| format!("{c}: expected batch:max_in_flight"))?;
                Ok((b.parse()?, f.parse()?))
            })
            .collect()
    }
}

fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.quick {
        args.seconds = 2;
        args.clients = vec![1, 16];
        args.batch_sizes = vec![1, 32];
        args.custodians = vec![1, 2];
        args.burn_down = 2_000;
        args.ledger_sizes = vec![1_000, 5_000];
        args.memory_seconds = 4;
    }
    if args.ten_million && !args.ledger_sizes.contains(&10_000_000) {
        args.ledger_sizes.push(10_000_000);
    }
    // The service's own setup: traces are exported when the standard
    // OTEL_* variables ask (the cost of tracing on is measured so). A COMMIT
    // refused with a serialization failure ends the transaction; the
    // driver's ROLLBACK after it draws a notice, kept out of the log.
    let telemetry = command_ledger::bench::init_telemetry(
        command_ledger::bench::LogFormat::Text,
        "warn,sqlx::postgres::notice=error,ledger_bench=info",
    )
    .map_err(anyhow::Error::msg)?;
    if telemetry.exporting() {
        println!("traces: exported over OTLP/HTTP as the OTEL_* variables say");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(run(args));
    telemetry.shutdown();
    outcome
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.docs && !args.only.is_empty() {
        bail!("--docs records a whole run; leave out --only");
    }
    std::fs::create_dir_all(&args.out)?;
    // Installing the peers comes first: a missing npm or registry fails the
    // run before any workload.
    let peers = if args.peers {
        // The peers enqueue from 8 clients, as before, and from as many as
        // W1's most, so that every single-enqueue ratio can be taken at
        // equal concurrency.
        let mut clients = vec![8, args.clients.iter().copied().max().unwrap_or(8)];
        clients.dedup();
        let options = peers::PeerOptions {
            jobs: args
                .peer_jobs
                .unwrap_or(if args.quick { 2_000 } else { 20_000 }),
            reps: args.peer_reps,
            clients,
            batch: 500,
            concurrency: 24,
            seconds: args.seconds,
            e2e_clients: workloads::CLIENTS,
        };
        Some(peers::Peers::prepare(options).await?)
    } else {
        None
    };
    let bench = workloads::Bench::start(
        args.database_url.clone(),
        &args.out,
        args.api_pool,
        Duration::from_secs(args.seconds),
    )
    .await?;
    let settings = bench.settings().await?;
    for (name, must) in [("fsync", "on"), ("synchronous_commit", "on")] {
        if settings.get(name).and_then(|v| v.as_str()) != Some(must) {
            bail!("{name} must be {must} for a benchmark of durable commits; it is {settings}");
        }
    }
    println!("settings: {settings}");

    let want = |w: &str| args.only.is_empty() || args.only.iter().any(|o| o == w);
    let before = bench.baselines(&args.clients).await?;
    println!("baselines before: {before}");
    let mut w1 = serde_json::Value::Null;
    if want("w1") {
        w1 = bench.w1(&args.clients).await?;
        println!("W1: {w1}");
    }
    let mut w1_counts = serde_json::Value::Null;
    if want("w1counts") {
        let most = args.clients.iter().copied().max().unwrap_or(64);
        w1_counts = bench.w1_counts(most).await?;
        println!("W1 with and without the counting trigger: {w1_counts}");
    }
    let mut w2 = serde_json::Value::Null;
    if want("w2") {
        w2 = bench.w2().await?;
        println!("W2: {w2}");
    }
    let mut w3 = serde_json::Value::Null;
    if want("w3") {
        w3 = bench.w3(&args.batch_sizes).await?;
        println!("W3: {w3}");
    }
    // The custodian's default batch: the burn-downs drain at it, as a
    // custodian does unless told otherwise (the peers run at their tuned
    // settings). W3's best batch is the best end to end, where submitters
    // bound the rate; it says nothing of a drain.
    let default_batch = command_ledger::bench::CustodianConfig::new(Vec::new()).batch_size;
    let mut w5 = serde_json::Value::Null;
    if want("w5") {
        w5 = bench.w5(default_batch, args.burn_down.min(20_000)).await?;
        println!("W5: {w5}");
    }
    let mut w7 = serde_json::Value::Null;
    if want("w7") {
        w7 = bench.w7(args.batch_clients, args.batch_items).await?;
        println!("W7: {w7}");
    }
    let mut w3_batches = serde_json::Value::Null;
    if want("w3batch") {
        w3_batches = bench
            .w3_batches(args.batch_clients, args.batch_items, default_batch)
            .await?;
        println!("W3 (batch clients): {w3_batches}");
    }
    let mut w8 = serde_json::Value::Null;
    if want("w8") {
        w8 = bench.w8(&args.effect_ms, &args.w8_configs()?).await?;
        println!("W8: {w8}");
    }
    let best_batch = best_batch(&w3).unwrap_or(default_batch);
    let mut w3b = serde_json::Value::Null;
    if want("w3b") {
        w3b = bench.w3b(args.burn_down, default_batch).await?;
        println!("W3b: {w3b}");
    }
    let mut peer_figures = serde_json::Value::Null;
    if let Some(peers) = &peers {
        let bin_dir = command_ledger::bench::find_bin_dir().unwrap_or_default();
        peer_figures = match peers
            .run(bench.admin_pool(), bench.url(), &bin_dir, &args.out)
            .await
        {
            Ok(figures) => figures,
            Err(e) => {
                // Stop the private cluster before reporting the failure.
                bench.stop().await?;
                return Err(e);
            }
        };
        println!("peers: {peer_figures}");
    }
    let mut w6 = serde_json::Value::Null;
    if want("w6") {
        w6 = bench
            .w6(&args.custodians, args.burn_down / 2, default_batch)
            .await?;
        println!("W6: {w6}");
    }
    let mut memory = serde_json::Value::Null;
    if want("memory") {
        memory = bench
            .memory(Duration::from_secs(args.memory_seconds), best_batch)
            .await?;
        println!("memory: {memory}");
    }
    let mut w4 = serde_json::Value::Null;
    if want("w4") {
        w4 = bench.w4(&args.ledger_sizes, best_batch).await?;
        println!("W4: {w4}");
    }
    let after = bench.baselines(&args.clients).await?;
    println!("baselines after: {after}");
    bench.stop().await?;

    let mut results = json!({
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "settings": settings,
        "machine": report::machine(),
        "seconds_per_point": args.seconds,
        "baselines": {"before": before, "after": after},
        "w1": w1,
        "w1_counts": w1_counts,
        "w2": w2,
        "w3": w3,
        "w3b": w3b,
        "w3_batches": w3_batches,
        "w5": w5,
        "w7": w7,
        "w8": w8,
        "w6": w6,
        "w4": w4,
        "memory": memory,
        "peers": peer_figures,
        // Items per second through the batch submit endpoint (W7), for
        // the peers' ratio.
        "batch_submit_items_per_s": w7["items_per_s"].clone(),
    });
    results["baselines"]["drift"] = report::drift(&results);
    results["targets"] = report::targets(&results);
    if !results["peers"].is_null() {
        results["peers"]["ratios"] = peers::report::ratios(&results);
        results["peers"]["comparison"] = peers::report::comparison(&results);
    }
    let text = serde_json::to_string_pretty(&results)?;
    std::fs::write(args.out.join("results.json"), &text)?;
    let mut markdown = report::markdown(&results);
    markdown.push_str(&peers::markdown(&results));
    std::fs::write(args.out.join("results.md"), &markdown)?;
    chart::render(&results, &args.out.join("chart.png")).context("drawing the chart")?;
    println!("\n{markdown}");
    println!(
        "written: {}/results.json, results.md, chart.png",
        args.out.display()
    );
    if args.docs {
        report::write_docs(&args.out, &markdown)?;
        println!("updated docs/PERFORMANCE.md and docs/bench/");
    }
    Ok(())
}

/// The claim batch size with the most applied commands per second.
fn best_batch(w3: &serde_json::Value) -> Option<i64> {
    w3.as_array()?
        .iter()
        .max_by(|a, b| {
            let rate = |v: &serde_json::Value| v["applied_per_s"].as_f64().unwrap_or(0.0);
            rate(a).total_cmp(&rate(b))
        })
        .and_then(|best| best["batch"].as_i64())
}
