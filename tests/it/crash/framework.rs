//! The crash campaign's framework: real processes under a supervisor that
//! restarts them (API, custodians, demo sink, PostgreSQL), clients that log
//! what was acknowledged, and the invariant check over the ledger, the
//! sink's log and the client's log. The campaigns are in `campaigns.rs`.

use command_ledger::demo_sink::{LogLine, read_log};
use command_ledger::domain::{CommandState, can_transition};
use serde_json::{Value, json};
use sqlx::PgPool;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(super) const BIN: &str = env!("CARGO_BIN_EXE_command-ledger");

pub(super) fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub(super) fn seed() -> u64 {
    std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
                .into()
        })
}

pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(super) fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

pub(super) fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|rest| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// Environment variables that arm a process's crash points.
pub(super) type EnvVars = Vec<(String, String)>;

/// Keeps one process running: restarts it whenever it dies, counting the
/// deaths by SIGKILL it did not cause itself.
pub(super) struct Supervisor {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) armed: Arc<Mutex<Option<EnvVars>>>,
    pub(super) kills: Arc<AtomicUsize>,
    pub(super) current: Arc<Mutex<Option<u32>>>,
    pub(super) ours: Arc<AtomicBool>,
    pub(super) thread: Option<std::thread::JoinHandle<()>>,
}

impl Supervisor {
    pub(super) fn start(make: impl Fn() -> Command + Send + 'static, seed: u64) -> Supervisor {
        let stop = Arc::new(AtomicBool::new(false));
        let armed: Arc<Mutex<Option<EnvVars>>> = Arc::default();
        let kills = Arc::new(AtomicUsize::new(0));
        let current: Arc<Mutex<Option<u32>>> = Arc::default();
        let ours = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, armed, kills, current, ours) = (
                stop.clone(),
                armed.clone(),
                kills.clone(),
                current.clone(),
                ours.clone(),
            );
            std::thread::spawn(move || {
                let mut n: u64 = 0;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let mut cmd = make();
                    if let Some(vars) = armed.lock().unwrap().as_ref() {
                        cmd.envs(vars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                        cmd.env(
                            "COMMAND_LEDGER_CRASH_SEED",
                            (seed.wrapping_mul(1_000_003) + n).to_string(),
                        );
                    }
                    let mut child = cmd.spawn().expect("spawning a supervised process");
                    *current.lock().unwrap() = Some(child.id());
                    let status = child.wait().unwrap();
                    *current.lock().unwrap() = None;
                    let by_us = ours.swap(false, Ordering::SeqCst);
                    if status.signal() == Some(9) && !by_us {
                        kills.fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Supervisor {
            stop,
            armed,
            kills,
            current,
            ours,
            thread: Some(thread),
        }
    }

    pub(super) fn pid(&self) -> Option<u32> {
        *self.current.lock().unwrap()
    }

    /// Arms (or disarms) the next start; with `restart`, kills the current
    /// process so the change takes effect now.
    pub(super) fn arm(&self, vars: Option<Vec<(String, String)>>, restart: bool) {
        *self.armed.lock().unwrap() = vars;
        if !restart {
            return;
        }
        // The process may be between its spawn and its pid being known:
        // wait for it, so that the one running now is surely replaced.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.pid().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(pid) = self.pid() {
            self.ours.store(true, Ordering::SeqCst);
            signal(pid, "-KILL");
        }
    }

    pub(super) fn kills(&self) -> usize {
        self.kills.load(Ordering::SeqCst)
    }

    pub(super) fn shutdown(mut self) {
        self.stop_all();
    }

    /// Stops restarting, resumes the process (a zombie is SIGSTOPped) and
    /// kills it, and waits for the supervising thread.
    fn stop_all(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for _ in 0..50 {
            if let Some(pid) = self.pid() {
                self.ours.store(true, Ordering::SeqCst);
                signal(pid, "-CONT");
                signal(pid, "-KILL");
            }
            if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A campaign that fails (a panic) still stops what it supervises, a
/// paused zombie among them, instead of leaving it running.
impl Drop for Supervisor {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop_all();
        }
    }
}

pub(super) fn crash_vars(point: &str, probability: f64, action: &str) -> Vec<(String, String)> {
    vec![
        ("COMMAND_LEDGER_CRASH_AT".into(), point.into()),
        (
            "COMMAND_LEDGER_CRASH_PROBABILITY".into(),
            probability.to_string(),
        ),
        ("COMMAND_LEDGER_CRASH_ACTION".into(), action.into()),
    ]
}

/// The attempts the campaign's catalog allows a refund (its retry policy:
/// the demo sink's `503` means "not applied"): the sink's `busy` mode
/// applies at the third.
pub(super) const RETRY_ATTEMPTS: u32 = 3;

/// The processes of one campaign, around one database.
pub(super) struct World {
    pub(super) db_url: String,
    pub(super) pool: PgPool,
    pub(super) dir: PathBuf,
    pub(super) sink: Child,
    pub(super) api_url: String,
    pub(super) token: String,
    pub(super) seed: u64,
}

impl World {
    pub(super) async fn new(db_url: String, pool: PgPool, seed: u64) -> World {
        let dir = std::env::temp_dir().join(format!(
            "command-ledger-crash-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let sink_port = free_port();
        let sink = Command::new(BIN)
            .args([
                "demo-sink",
                "--listen",
                &format!("127.0.0.1:{sink_port}"),
                "--log",
            ])
            .arg(dir.join("sink.log"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let sink_url = format!("http://127.0.0.1:{sink_port}");
        std::fs::write(
            dir.join("ledger.toml"),
            format!(
                "[kinds.refund]\nurl = \"{sink_url}/refunds\"\ntimeout = \"2s\"\nprobe_margin = \"1s\"\nreconcile_url = \"{sink_url}/applied/{{key}}\"\n\
                 [kinds.refund.retry]\nmax_attempts = {RETRY_ATTEMPTS}\ninitial_interval = \"100ms\"\nmax_interval = \"1s\"\njitter = 0.0\nstatuses = [503]\n"
            ),
        )
        .unwrap();
        let token = command_ledger::cli::issue_token(
            &pool,
            "crash-client",
            command_ledger::db::Role::Device,
            None,
        )
        .await
        .unwrap();
        World {
            db_url,
            pool,
            dir,
            sink,
            api_url: String::new(),
            token,
            seed,
        }
    }

    pub(super) fn api(&mut self) -> Supervisor {
        let port = free_port();
        self.api_url = format!("http://127.0.0.1:{port}");
        let db_url = self.db_url.clone();
        Supervisor::start(
            move || {
                let mut cmd = Command::new(BIN);
                cmd.args([
                    "serve",
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                    "--max-connections",
                    "8",
                ])
                .env("DATABASE_URL", &db_url)
                .env("RUST_LOG", "error")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
                cmd
            },
            self.seed,
        )
    }

    pub(super) fn custodian(&self) -> Supervisor {
        let (db_url, catalog) = (self.db_url.clone(), self.dir.join("ledger.toml"));
        Supervisor::start(
            move || {
                let mut cmd = Command::new(BIN);
                cmd.args([
                    "custodian",
                    "--authority",
                    "payments",
                    "--lease-ttl",
                    "500ms",
                    "--heartbeat",
                    "150ms",
                    "--poll-interval",
                    "100ms",
                    "--recovery-interval",
                    "300ms",
                    "--batch-size",
                    "8",
                    "--catalog",
                ])
                .arg(&catalog)
                .env("DATABASE_URL", &db_url)
                .env("RUST_LOG", "error")
                .stdout(Stdio::null())
                .stderr(Stdio::null());
                cmd
            },
            self.seed ^ 0xc0ffee,
        )
    }

    pub(super) async fn wait_ready(&self) {
        let client = reqwest::Client::new();
        for _ in 0..200 {
            if client
                .get(format!("{}/readyz", self.api_url))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the API did not become ready");
    }

    pub(super) fn sink_log(&self) -> Vec<LogLine> {
        read_log(&self.dir.join("sink.log")).unwrap()
    }

    /// Waits until no command is left unfinished, or the bound passes;
    /// returns how many are left, and prints how long it took.
    pub(super) async fn wait_all_terminal(&self, bound: Duration) -> usize {
        let started = Instant::now();
        let deadline = started + bound;
        loop {
            let live: i64 = sqlx::query_scalar(
                "select count(*) from commands where state in ('pending', 'prepared', 'effect_started')",
            )
            .fetch_one(&self.pool)
            .await
            .unwrap_or(-1);
            if live == 0 || Instant::now() > deadline {
                eprintln!(
                    "all terminal {:?} after faults stopped ({live} left)",
                    started.elapsed()
                );
                return usize::try_from(live).unwrap_or(usize::MAX);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(super) fn cleanup(mut self) {
        let _ = self.sink.kill();
        let _ = self.sink.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A campaign that fails (a panic) still stops its demo sink; its
/// directory is left for a look.
impl Drop for World {
    fn drop(&mut self) {
        let _ = self.sink.kill();
        let _ = self.sink.wait();
    }
}

/// Acknowledged submissions: key → command id, as the client saw them.
pub(super) type Acked = Arc<Mutex<BTreeMap<String, String>>>;

/// Marks, in the client's log, a command the API recorded and then could
/// not read back (a commit that did not last).
pub(super) const VANISHED: &str = "vanished:";

/// Client tasks submitting under load, and the switch that stops them.
pub(super) struct Clients {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Clients {
    pub(super) fn start(
        world: &World,
        n: usize,
        prefix: &str,
        acked: &Acked,
        counter: &Arc<AtomicU64>,
    ) -> Clients {
        Clients::start_in_mode(world, n, prefix, acked, counter, None)
    }

    /// [`Clients::start`], each refund asking the demo sink for `mode`
    /// (`busy`: two `503`s before it applies, which the catalog's retry
    /// policy retries).
    pub(super) fn start_in_mode(
        world: &World,
        n: usize,
        prefix: &str,
        acked: &Acked,
        counter: &Arc<AtomicU64>,
        mode: Option<&'static str>,
    ) -> Clients {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..n)
            .map(|c| {
                tokio::spawn(client_load(
                    world.api_url.clone(),
                    world.token.clone(),
                    format!("{prefix}-{c}"),
                    acked.clone(),
                    stop.clone(),
                    counter.clone(),
                    mode,
                ))
            })
            .collect();
        Clients { stop, tasks }
    }

    /// Stops submitting; returns once every submission under way is acknowledged.
    pub(super) async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.unwrap();
        }
    }
}

/// Submits commands with fresh keys until `stop`, retrying each key until
/// it is acknowledged (a crash of the API after the commit is answered,
/// on retry, by a replay of the same command). A closed loop: each request
/// waits (`Prefer: wait=5`) for its outcome, so the load follows what the
/// custodian can do instead of piling up a backlog.
pub(super) async fn client_load(
    api: String,
    token: String,
    prefix: String,
    acked: Acked,
    stop: Arc<AtomicBool>,
    counter: Arc<AtomicU64>,
    mode: Option<&'static str>,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    while !stop.load(Ordering::SeqCst) {
        let i = counter.fetch_add(1, Ordering::SeqCst);
        let key = format!("{prefix}-{i}");
        let mut body = json!({"kind": "refund", "authority": "payments", "args": {"to": "ada@example.com", "amount_minor": i, "currency": "USD"}});
        if let Some(mode) = mode {
            body["args"]["mode"] = json!(mode);
        }
        let started = Instant::now();
        loop {
            let resp = client
                .post(format!("{api}/v1/commands"))
                .bearer_auth(&token)
                .header("Idempotency-Key", &key)
                .header("Prefer", "wait=5")
                .json(&body)
                .send()
                .await;
            match resp {
                Ok(r) if r.status().is_success() => {
                    let v: Value = r.json().await.unwrap_or(Value::Null);
                    if let Some(id) = v["id"].as_str() {
                        if let Some(previous) =
                            acked.lock().unwrap().insert(key.clone(), id.to_owned())
                        {
                            assert_eq!(previous, id, "a key was acknowledged with two ids");
                        }
                        break;
                    }
                }
                // Recorded, then gone when read back: the commit did not last.
                Ok(r) if r.status() == 404 => {
                    acked
                        .lock()
                        .unwrap()
                        .insert(format!("{VANISHED}{key}"), String::new());
                }
                // Over the principal's rate limit: nothing was recorded;
                // wait as told, as a client does, and send the key again.
                Ok(r) if r.status() == 429 => {
                    let wait = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .map_or(Duration::from_millis(200), Duration::from_secs);
                    tokio::time::sleep(wait.min(Duration::from_secs(2))).await;
                }
                Ok(r) if r.status().is_client_error() => {
                    panic!("unexpected {} for {key}", r.status())
                }
                _ => {}
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{key} never acknowledged"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Check {
    pub(super) commands: usize,
    /// Attempts the ledger made after a first one (retries).
    pub(super) retries: usize,
    pub(super) by_state: BTreeMap<String, usize>,
    pub(super) violations: Vec<String>,
}

/// The invariants.
pub(super) async fn check(world: &World, acked: &BTreeMap<String, String>) -> Check {
    let mut out = Check::default();
    let rows: Vec<(uuid::Uuid, String, String, Option<Value>)> =
        sqlx::query_as("select id, idempotency_key, state, error from commands")
            .fetch_all(&world.pool)
            .await
            .unwrap();
    // Attempt chains (a failure with nothing done, retried under the
    // catalog's policy): each attempt's chain, by the chain's first command.
    let attempts: Vec<(uuid::Uuid, i32, Option<uuid::Uuid>)> =
        sqlx::query_as("select id, attempt, retry_of from commands")
            .fetch_all(&world.pool)
            .await
            .unwrap();
    let first_of: HashMap<uuid::Uuid, uuid::Uuid> = attempts
        .iter()
        .map(|(id, attempt, retry_of)| {
            (
                *id,
                if *attempt > 1 {
                    retry_of.unwrap_or(*id)
                } else {
                    *id
                },
            )
        })
        .collect();
    let successors: std::collections::HashSet<(uuid::Uuid, i32)> = attempts
        .iter()
        .filter(|(_, attempt, _)| *attempt > 1)
        .map(|(id, attempt, _)| (first_of[id], attempt - 1))
        .collect();
    let attempt_of: HashMap<uuid::Uuid, i32> = attempts
        .iter()
        .map(|(id, attempt, _)| (*id, *attempt))
        .collect();
    let by_key: HashMap<&str, (&uuid::Uuid, &str, &Option<Value>)> = rows
        .iter()
        .map(|(id, k, s, e)| (k.as_str(), (id, s.as_str(), e)))
        .collect();
    out.commands = rows.len();
    out.retries = attempts
        .iter()
        .filter(|(_, attempt, _)| *attempt > 1)
        .count();
    for (_, _, state, _) in &rows {
        *out.by_state.entry(state.clone()).or_default() += 1;
    }
    // Every acknowledged command is present, under the id it was
    // acknowledged with: the key's command, or an attempt of its chain.
    for (key, id) in acked {
        if let Some(key) = key.strip_prefix(VANISHED) {
            out.violations.push(format!(
                "{key} was recorded and then vanished before the response"
            ));
            continue;
        }
        let in_chain = |stored: &uuid::Uuid| {
            stored.to_string() == *id
                || id
                    .parse::<uuid::Uuid>()
                    .is_ok_and(|acked| first_of.get(&acked) == Some(stored))
        };
        match by_key.get(key.as_str()) {
            None => out
                .violations
                .push(format!("acknowledged {key} ({id}) is missing")),
            Some((stored, _, _)) if !in_chain(stored) => {
                out.violations
                    .push(format!("{key} acknowledged as {id}, stored as {stored}"));
            }
            Some(_) => {}
        }
    }
    if by_key.len() != rows.len() {
        out.violations
            .push("two rows share one idempotency key".into());
    }
    // The sink: at most one dispatch and one application per command.
    let mut posts: HashMap<String, usize> = HashMap::new();
    let mut applied: HashMap<String, usize> = HashMap::new();
    for line in world.sink_log() {
        *posts.entry(line.key.clone()).or_default() += 1;
        if line.event == "applied" {
            *applied.entry(line.key.clone()).or_default() += 1;
        }
    }
    let mut chain_applied: HashMap<uuid::Uuid, usize> = HashMap::new();
    for (id, _, state, error) in &rows {
        let key = format!("cl-{id}");
        *chain_applied.entry(first_of[id]).or_default() += applied.get(&key).copied().unwrap_or(0);
        let (p, a) = (
            posts.get(&key).copied().unwrap_or(0),
            applied.get(&key).copied().unwrap_or(0),
        );
        if p > 1 {
            out.violations
                .push(format!("{id} was dispatched {p} times"));
        }
        let reason = error
            .as_ref()
            .and_then(|e| e["reason"].as_str())
            .unwrap_or("");
        match state.as_str() {
            "applied" if a != 1 => out
                .violations
                .push(format!("{id} is applied but the sink applied it {a} times")),
            "failed" if a != 0 && reason != "rejected" => {
                out.violations
                    .push(format!("{id} is failed ({reason}) but the sink applied it"));
            }
            "pending" | "prepared" | "effect_started" => {
                out.violations.push(format!("{id} is still {state}"));
            }
            "expired" | "cancelled" if p != 0 => out
                .violations
                .push(format!("{id} is {state} but was dispatched")),
            _ => {}
        }
        // A failure with nothing done, short of the policy's last attempt,
        // is followed by the next attempt: a crash between the two loses
        // neither.
        let attempt = attempt_of[id];
        if state == "failed"
            && matches!(reason, "not_applied" | "not_dispatched")
            && u32::try_from(attempt).unwrap_or(0) < RETRY_ATTEMPTS
            && !successors.contains(&(first_of[id], attempt))
        {
            out.violations.push(format!(
                "{id} failed ({reason}) at attempt {attempt} and its next attempt is missing"
            ));
        }
    }
    for (first, n) in &chain_applied {
        if *n > 1 {
            out.violations
                .push(format!("the chain of {first} was applied {n} times"));
        }
    }
    // Every history is a path of the state machine (an entry that names the
    // state it passed through, the claim's, is two steps of it).
    let history: Vec<(uuid::Uuid, Option<String>, Option<String>, String)> = sqlx::query_as(
        "select command_id, from_state, through, to_state from command_history order by id",
    )
    .fetch_all(&world.pool)
    .await
    .unwrap();
    let step = |f: &str, t: &str| {
        let (f, t): (CommandState, CommandState) = (f.parse().unwrap(), t.parse().unwrap());
        can_transition(f, t) || (f == CommandState::Prepared && t == CommandState::Prepared)
    };
    let mut last: HashMap<uuid::Uuid, String> = HashMap::new();
    for (id, from, through, to) in history {
        let ok = match (last.get(&id), from.as_deref(), through.as_deref()) {
            (None, None, None) => to == "pending",
            (Some(prev), Some(f), None) if prev == f => step(f, &to),
            (Some(prev), Some(f), Some(p)) if prev == f => step(f, p) && step(p, &to),
            _ => false,
        };
        if !ok {
            out.violations.push(format!(
                "{id}: illegal history step {from:?} -> {through:?} -> {to}"
            ));
        }
        last.insert(id, to);
    }
    out
}

pub(super) async fn count_commands(pool: &PgPool) -> usize {
    let n: i64 = sqlx::query_scalar("select count(*) from commands")
        .fetch_one(pool)
        .await
        .unwrap();
    usize::try_from(n).unwrap()
}

#[derive(Debug)]
pub(super) struct PointResult {
    pub(super) point: String,
    pub(super) kills: usize,
    pub(super) commands: usize,
}
