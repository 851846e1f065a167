//! The baselines: PostgreSQL's own limit for the same work, measured by
//! pgbench on the same cluster in the same run.

use anyhow::{Context as _, bail};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One pgbench run: committed transactions per second and the latency of
/// each transaction, from pgbench's per-transaction log.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Baseline {
    pub(crate) clients: usize,
    pub(crate) tps: f64,
    /// Transactions committed in the run, as pgbench counted them.
    pub(crate) transactions: u64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) p999_ms: f64,
}

#[derive(Debug)]
pub(crate) struct PgBench {
    bin: PathBuf,
    url: String,
    dir: PathBuf,
}

impl PgBench {
    pub(crate) fn new(bin_dir: &Path, url: &str, dir: &Path) -> anyhow::Result<Self> {
        let bin = bin_dir.join("pgbench");
        let bin = if bin.exists() {
            bin
        } else {
            PathBuf::from("pgbench")
        };
        std::fs::create_dir_all(dir)?;
        Ok(PgBench {
            bin,
            url: url.to_owned(),
            dir: dir.canonicalize()?,
        })
    }

    /// Runs `script` (one transaction) on `clients` connections for
    /// `seconds`, with prepared statements, as the service runs them.
    pub(crate) fn run(
        &self,
        name: &str,
        script: &str,
        clients: usize,
        seconds: u64,
        rate: Option<f64>,
    ) -> anyhow::Result<Baseline> {
        self.exec(name, script, clients, &format!("--time={seconds}"), rate)
    }

    /// Runs `script` `transactions` times on each of `clients` connections
    /// (a fixed amount of work rather than a fixed time).
    pub(crate) fn run_count(
        &self,
        name: &str,
        script: &str,
        clients: usize,
        transactions: usize,
    ) -> anyhow::Result<Baseline> {
        self.exec(
            name,
            script,
            clients,
            &format!("--transactions={transactions}"),
            None,
        )
    }

    fn exec(
        &self,
        name: &str,
        script: &str,
        clients: usize,
        limit: &str,
        rate: Option<f64>,
    ) -> anyhow::Result<Baseline> {
        let script_path = self.dir.join(format!("{name}.sql"));
        std::fs::write(&script_path, script)?;
        let prefix = self.dir.join(format!("{name}-log"));
        remove_logs(&prefix)?;
        let threads = clients.clamp(1, 4);
        let output = Command::new(&self.bin)
            .args(["--no-vacuum", "--protocol=prepared", "--log"])
            .arg(format!("--log-prefix={}", prefix.display()))
            .arg(format!("--client={clients}"))
            .arg(format!("--jobs={threads}"))
            .arg(limit)
            .arg(format!("--file={}", script_path.display()))
            .args(rate.map(|r| format!("--rate={r:.1}")))
            .arg(&self.url)
            .current_dir(&self.dir)
            .output()
            .with_context(|| format!("running {}", self.bin.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "pgbench {name} failed: {}\n{stdout}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let tps = stdout
            .lines()
            .find_map(|l| l.strip_prefix("tps = "))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok())
            .with_context(|| format!("no tps in pgbench's output:\n{stdout}"))?;
        let transactions = stdout
            .lines()
            .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
            .and_then(|rest| rest.split('/').next())
            .and_then(|n| n.trim().parse::<u64>().ok())
            .with_context(|| format!("no transaction count in pgbench's output:\n{stdout}"))?;
        let mut latencies = read_latencies(&prefix)?;
        remove_logs(&prefix)?;
        latencies.sort_unstable();
        Ok(Baseline {
            clients,
            tps,
            transactions,
            p50_ms: percentile_ms(&latencies, 0.50),
            p99_ms: percentile_ms(&latencies, 0.99),
            p999_ms: percentile_ms(&latencies, 0.999),
        })
    }
}

/// Every `prefix.<pid>[.<thread>]` file pgbench wrote. The third field of a
/// line is the transaction's latency in microseconds; with `--rate` a
/// seventh, the schedule lag, is added, so that latency counts from when the
/// transaction was due.
fn read_latencies(prefix: &Path) -> anyhow::Result<Vec<u64>> {
    let mut all = Vec::new();
    for path in log_files(prefix)? {
        let text = std::fs::read_to_string(&path)?;
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
            if let Some(us) = field(2) {
                all.push(us + field(6).unwrap_or(0));
            }
        }
    }
    Ok(all)
}

fn log_files(prefix: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let dir = prefix.parent().context("log prefix has a directory")?;
    let stem = prefix
        .file_name()
        .and_then(|n| n.to_str())
        .context("log prefix is a file name")?;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(&format!("{stem}.")))
        {
            files.push(path);
        }
    }
    Ok(files)
}

fn remove_logs(prefix: &Path) -> anyhow::Result<()> {
    for path in log_files(prefix)? {
        std::fs::remove_file(path)?;
    }
    Ok(())
}

/// The `q` quantile of sorted microseconds, in milliseconds.
pub(crate) fn percentile_ms(sorted_us: &[u64], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return f64::NAN;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let i = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    sorted_us[i] as f64 / 1000.0
}
