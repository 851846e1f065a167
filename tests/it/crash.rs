//! The crash campaign: real processes (API, custodian, demo sink with its
//! durable log, PostgreSQL), SIGKILL at each named crash point with seeded
//! randomness, zombies (SIGSTOP past the lease, then SIGCONT), PostgreSQL
//! crashes (`pg_ctl stop -m immediate`) under load; then the invariants,
//! checked from the ledger joined with the sink's log and the client's log of
//! acknowledged submissions.
//!
//! A fast subset runs with `cargo test`. The full campaign, with its table:
//!
//! ```sh
//! CRASH_KILLS=200 CRASH_ZOMBIES=50 CRASH_PG=20 \
//!   cargo test --release --test it crash -- --ignored --nocapture
//! ```
//!
//! `CRASH_SEED=<n>` replays a run (the seed is printed).

use command_ledger::demo_sink::{LogLine, read_log};
use command_ledger::domain::{State, can_transition};
use command_ledger::embedded_pg::{Cluster, ClusterOptions};
use serde_json::{Value, json};
use sqlx::PgPool;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_command-ledger");

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

fn is_stopped(pid: u32) -> bool {
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
type EnvVars = Vec<(String, String)>;

/// Keeps one process running: restarts it whenever it dies, counting the
/// deaths by SIGKILL it did not cause itself.
struct Supervisor {
    stop: Arc<AtomicBool>,
    armed: Arc<Mutex<Option<EnvVars>>>,
    kills: Arc<AtomicUsize>,
    current: Arc<Mutex<Option<u32>>>,
    ours: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Supervisor {
    fn start(make: impl Fn() -> Command + Send + 'static, seed: u64) -> Supervisor {
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

    fn pid(&self) -> Option<u32> {
        *self.current.lock().unwrap()
    }

    /// Arms (or disarms) the next start; with `restart`, kills the current
    /// process so the change takes effect now.
    fn arm(&self, vars: Option<Vec<(String, String)>>, restart: bool) {
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

    fn kills(&self) -> usize {
        self.kills.load(Ordering::SeqCst)
    }

    fn shutdown(mut self) {
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

fn crash_vars(point: &str, probability: f64, action: &str) -> Vec<(String, String)> {
    vec![
        ("COMMAND_LEDGER_CRASH_AT".into(), point.into()),
        (
            "COMMAND_LEDGER_CRASH_PROBABILITY".into(),
            probability.to_string(),
        ),
        ("COMMAND_LEDGER_CRASH_ACTION".into(), action.into()),
    ]
}

/// The processes of one campaign, around one database.
struct World {
    db_url: String,
    pool: PgPool,
    dir: PathBuf,
    sink: Child,
    api_url: String,
    token: String,
    seed: u64,
}

impl World {
    async fn new(db_url: String, pool: PgPool, seed: u64) -> World {
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
                "[kinds.refund]\nurl = \"{sink_url}/refunds\"\ntimeout = \"2s\"\nreconcile_url = \"{sink_url}/applied/{{key}}\"\n"
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

    fn api(&mut self) -> Supervisor {
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

    fn custodian(&self) -> Supervisor {
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

    async fn wait_ready(&self) {
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

    fn sink_log(&self) -> Vec<LogLine> {
        read_log(&self.dir.join("sink.log")).unwrap()
    }

    /// Waits until no command is left unfinished, or the bound passes;
    /// returns how many are left, and prints how long it took.
    async fn wait_all_terminal(&self, bound: Duration) -> usize {
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

    fn cleanup(mut self) {
        let _ = self.sink.kill();
        let _ = self.sink.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Acknowledged submissions: key → command id, as the client saw them.
type Acked = Arc<Mutex<BTreeMap<String, String>>>;

/// Marks, in the client's log, a command the API recorded and then could
/// not read back (a commit that did not last).
const VANISHED: &str = "vanished:";

/// Client tasks submitting under load, and the switch that stops them.
struct Clients {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Clients {
    fn start(
        world: &World,
        n: usize,
        prefix: &str,
        acked: &Acked,
        counter: &Arc<AtomicU64>,
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
                ))
            })
            .collect();
        Clients { stop, tasks }
    }

    /// Stops submitting; returns once every submission under way is acknowledged.
    async fn stop(self) {
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
async fn client_load(
    api: String,
    token: String,
    prefix: String,
    acked: Acked,
    stop: Arc<AtomicBool>,
    counter: Arc<AtomicU64>,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    while !stop.load(Ordering::SeqCst) {
        let i = counter.fetch_add(1, Ordering::SeqCst);
        let key = format!("{prefix}-{i}");
        let body = json!({"kind": "refund", "authority": "payments", "args": {"to": "ada@example.com", "amount_minor": i, "currency": "USD"}});
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
struct Check {
    commands: usize,
    by_state: BTreeMap<String, usize>,
    violations: Vec<String>,
}

/// The invariants.
async fn check(world: &World, acked: &BTreeMap<String, String>) -> Check {
    let mut out = Check::default();
    let rows: Vec<(uuid::Uuid, String, String, Option<Value>)> =
        sqlx::query_as("select id, idempotency_key, state, error from commands")
            .fetch_all(&world.pool)
            .await
            .unwrap();
    let by_key: HashMap<&str, (&uuid::Uuid, &str, &Option<Value>)> = rows
        .iter()
        .map(|(id, k, s, e)| (k.as_str(), (id, s.as_str(), e)))
        .collect();
    out.commands = rows.len();
    for (_, _, state, _) in &rows {
        *out.by_state.entry(state.clone()).or_default() += 1;
    }
    // Every acknowledged command is present, under the id it was acknowledged with.
    for (key, id) in acked {
        if let Some(key) = key.strip_prefix(VANISHED) {
            out.violations.push(format!(
                "{key} was recorded and then vanished before the response"
            ));
            continue;
        }
        match by_key.get(key.as_str()) {
            None => out
                .violations
                .push(format!("acknowledged {key} ({id}) is missing")),
            Some((stored, _, _)) if stored.to_string() != *id => {
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
    for (id, _, state, error) in &rows {
        let key = format!("cl-{id}");
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
    }
    // Every history is a path of the state machine.
    let history: Vec<(uuid::Uuid, Option<String>, String)> =
        sqlx::query_as("select command_id, from_state, to_state from command_history order by id")
            .fetch_all(&world.pool)
            .await
            .unwrap();
    let mut last: HashMap<uuid::Uuid, String> = HashMap::new();
    for (id, from, to) in history {
        let ok = match (last.get(&id), from.as_deref()) {
            (None, None) => to == "pending",
            (Some(prev), Some(f)) if prev == f => {
                let (f, t): (State, State) = (f.parse().unwrap(), to.parse().unwrap());
                can_transition(f, t) || (f == State::Prepared && t == State::Prepared)
            }
            _ => false,
        };
        if !ok {
            out.violations
                .push(format!("{id}: illegal history step {from:?} -> {to}"));
        }
        last.insert(id, to);
    }
    out
}

async fn count_commands(pool: &PgPool) -> usize {
    let n: i64 = sqlx::query_scalar("select count(*) from commands")
        .fetch_one(pool)
        .await
        .unwrap();
    usize::try_from(n).unwrap()
}

#[derive(Debug)]
struct PointResult {
    point: String,
    kills: usize,
    commands: usize,
}

/// SIGKILL at each crash point, `kills_per_point` times, under load; then
/// faults stop, and everything must be terminal within lease + 2 recovery
/// intervals (plus slack for restarts).
async fn kill_campaign(
    points: &[&str],
    kills_per_point: usize,
    budget: Duration,
) -> (Vec<PointResult>, Check) {
    let seed = seed();
    eprintln!("crash campaign seed {seed} (CRASH_SEED={seed} replays it)");
    let (db_url, pool) = crate::harness::fresh_database().await;
    let mut world = World::new(db_url, pool, seed).await;
    let api = world.api();
    let custodian = world.custodian();
    world.wait_ready().await;
    let acked: Acked = Arc::default();
    let counter = Arc::new(AtomicU64::new(0));
    let mut results = Vec::new();

    for point in points {
        let target = if *point == "CP0" { &api } else { &custodian };
        let before = count_commands(&world.pool).await;
        let kills_before = target.kills();
        target.arm(Some(crash_vars(point, 0.25, "kill")), true);
        let clients = Clients::start(&world, 6, point, &acked, &counter);
        let started = Instant::now();
        while target.kills() - kills_before < kills_per_point && started.elapsed() < budget {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        target.arm(None, true);
        clients.stop().await;
        let after = count_commands(&world.pool).await;
        results.push(PointResult {
            point: (*point).to_owned(),
            kills: target.kills() - kills_before,
            commands: after - before,
        });
    }
    // Faults stopped: lease 0.5 s + 2 × recovery 0.3 s, with slack for restarts.
    let live = world.wait_all_terminal(Duration::from_secs(15)).await;
    let acked = acked.lock().unwrap().clone();
    let mut report = check(&world, &acked).await;
    if live > 0 {
        report.violations.push(format!(
            "{live} commands not terminal 15 s after faults stopped"
        ));
    }
    api.shutdown();
    custodian.shutdown();
    world.cleanup();
    (results, report)
}

fn print_table(results: &[PointResult], check: &Check) {
    eprintln!("\n| crash point | kills | commands |");
    eprintln!("|---|---|---|");
    for r in results {
        eprintln!("| {} | {} | {} |", r.point, r.kills, r.commands);
    }
    eprintln!(
        "\noutcomes: {:?} over {} commands; violations: {}",
        check.by_state,
        check.commands,
        check.violations.len()
    );
    for v in check.violations.iter().take(20) {
        eprintln!("  violation: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kills_at_every_crash_point_lose_nothing_and_execute_nothing_twice() {
    let (results, check) = kill_campaign(
        &["CP0", "CP1", "CP2", "CP3", "CP4"],
        2,
        Duration::from_secs(20),
    )
    .await;
    print_table(&results, &check);
    assert!(check.violations.is_empty(), "{:?}", check.violations);
    for r in &results {
        assert!(r.kills >= 1, "no kill happened at {}", r.point);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the full campaign: minutes; run with --ignored"]
async fn full_kill_campaign() {
    let kills = env_or("CRASH_KILLS", 200);
    let (results, check) = kill_campaign(
        &["CP0", "CP1", "CP2", "CP3", "CP4"],
        kills,
        Duration::from_secs(60 * 30),
    )
    .await;
    print_table(&results, &check);
    assert!(check.violations.is_empty(), "{:?}", check.violations);
}

/// A custodian pauses (SIGSTOP) right after committing `effect_started`,
/// past its lease; another takes over and works; the first resumes
/// (SIGCONT) and dispatches with its stale generation. The sink refuses it,
/// its outcome write is refused, recovery resolves the row: no double
/// effect, no stale write.
async fn zombie_campaign(trials: usize) -> Check {
    let seed = seed();
    let (db_url, pool) = crate::harness::fresh_database().await;
    let mut world = World::new(db_url, pool, seed).await;
    let api = world.api();
    world.wait_ready().await;
    let acked: Acked = Arc::default();
    let client = reqwest::Client::new();
    let submit = |key: String| {
        let (client, api, token, acked) = (
            client.clone(),
            world.api_url.clone(),
            world.token.clone(),
            acked.clone(),
        );
        async move {
            let body = json!({"kind": "refund", "authority": "payments", "args": {"key": key}});
            let r = client
                .post(format!("{api}/v1/commands"))
                .bearer_auth(&token)
                .header("Idempotency-Key", &key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let v: Value = r.json().await.unwrap();
            let id = v["id"].as_str().unwrap().to_owned();
            acked.lock().unwrap().insert(key, id.clone());
            id
        }
    };
    let state_of = |id: String| {
        let pool = world.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>("select state from commands where id = $1::uuid")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let (mut paused, mut attempts) = (0, 0);
    while paused < trials {
        attempts += 1;
        assert!(
            attempts <= trials * 2,
            "only {paused} of {attempts} attempts paused a zombie"
        );
        let t = attempts;
        let zombie = world.custodian();
        zombie.arm(Some(crash_vars("CP2", 1.0, "stop")), true);
        let victim = submit(format!("z{t}-victim")).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !zombie.pid().is_some_and(is_stopped) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !zombie.pid().is_some_and(is_stopped) {
            // Not a zombie trial after all (say the victim was started by a
            // process the arming replaced): say what happened, try again.
            let history: Vec<(Option<String>, String, String)> = sqlx::query_as(
                "select from_state, to_state, actor from command_history where command_id = $1::uuid order by id",
            )
            .bind(&victim)
            .fetch_all(&world.pool)
            .await
            .unwrap();
            eprintln!(
                "zombie attempt {t}: no pause within 10 s; victim {victim} history {history:?}"
            );
            zombie.shutdown();
            continue;
        }
        paused += 1;
        // Another custodian takes over once the lease lapses, and works.
        let successor = world.custodian();
        let fresh = submit(format!("z{t}-fresh")).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while state_of(fresh.clone()).await != "applied" {
            assert!(
                Instant::now() < deadline,
                "the successor never ran the fresh command"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The zombie resumes and dispatches with its stale generation.
        signal(zombie.pid().unwrap(), "-CONT");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = state_of(victim.clone()).await;
            let dispatched = world
                .sink_log()
                .iter()
                .any(|l| l.key == format!("cl-{victim}"));
            if dispatched && s != "effect_started" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the zombie's command was never settled ({s})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        zombie.shutdown();
        successor.shutdown();
        // How the zombie's dispatch ended at the sink, and in the ledger.
        let events: Vec<String> = world
            .sink_log()
            .iter()
            .filter(|l| l.key == format!("cl-{victim}"))
            .map(|l| format!("{} at generation {}", l.event, l.generation))
            .collect();
        let (state, error, generation): (String, Option<Value>, Option<i64>) = sqlx::query_as(
            "select state, error, authority_generation from commands where id = $1::uuid",
        )
        .bind(&victim)
        .fetch_one(&world.pool)
        .await
        .unwrap();
        if events.len() != 1 || !events[0].starts_with("fenced") {
            let history: Vec<(Option<String>, String, String, Option<i64>)> = sqlx::query_as(
                "select from_state, to_state, actor, authority_generation from command_history \
                 where command_id in ($1::uuid, $2::uuid) order by id",
            )
            .bind(&victim)
            .bind(&fresh)
            .fetch_all(&world.pool)
            .await
            .unwrap();
            let fresh_events: Vec<String> = world
                .sink_log()
                .iter()
                .filter(|l| l.key == format!("cl-{fresh}"))
                .map(|l| format!("{} at generation {}", l.event, l.generation))
                .collect();
            eprintln!(
                "zombie trial {t}: victim {victim} {state} {error:?} (generation {generation:?}), sink: {events:?}; \
                 fresh {fresh} sink: {fresh_events:?}; history (victim, fresh): {history:?}"
            );
        }
    }
    let acked = acked.lock().unwrap().clone();
    let report = check(&world, &acked).await;
    let fenced = world
        .sink_log()
        .iter()
        .filter(|l| l.event == "fenced")
        .count();
    eprintln!(
        "zombie trials: {paused} paused of {attempts} attempts; stale dispatches refused by the sink: {fenced}; outcomes {:?}; violations {}",
        report.by_state,
        report.violations.len()
    );
    api.shutdown();
    world.cleanup();
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zombie_custodian_cannot_execute_twice_or_write_stale_outcomes() {
    let report = zombie_campaign(1).await;
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the full campaign: minutes; run with --ignored"]
async fn full_zombie_campaign() {
    let report = zombie_campaign(env_or("CRASH_ZOMBIES", 50)).await;
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// The custodian's database connections are cut (`pg_terminate_backend`)
/// again and again under load, so some commits, `effect_started` ones
/// included, die with an unknown outcome. The custodian must re-read and
/// never dispatch on uncertainty: any dispatch of a row whose start did not
/// commit would show up as a second dispatch after it is claimed again.
async fn connection_cut_campaign(cuts: usize) -> (usize, Check) {
    let seed = seed();
    let (db_url, pool) = crate::harness::fresh_database().await;
    let mut world = World::new(db_url, pool, seed).await;
    let api = world.api();
    let custodian = world.custodian();
    world.wait_ready().await;
    let acked: Acked = Arc::default();
    let counter = Arc::new(AtomicU64::new(0));
    let clients = Clients::start(&world, 3, "cut", &acked, &counter);
    let mut terminated = 0;
    for i in 0..cuts {
        tokio::time::sleep(Duration::from_millis(
            60 + (seed.wrapping_add(i as u64) % 90),
        ))
        .await;
        let n: i64 = sqlx::query_scalar(
            "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity \
             where application_name = 'command-ledger-custodian' and datname = current_database()) t",
        )
        .fetch_one(&world.pool)
        .await
        .unwrap();
        terminated += usize::try_from(n).unwrap();
    }
    clients.stop().await;
    let live = world.wait_all_terminal(Duration::from_secs(20)).await;
    let acked = acked.lock().unwrap().clone();
    let mut report = check(&world, &acked).await;
    if live > 0 {
        report.violations.push(format!(
            "{live} commands not terminal 20 s after faults stopped"
        ));
    }
    eprintln!(
        "connection cuts: {cuts} rounds, {terminated} custodian connections terminated; outcomes {:?}; violations {}",
        report.by_state,
        report.violations.len()
    );
    api.shutdown();
    custodian.shutdown();
    world.cleanup();
    (terminated, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cutting_the_custodians_connections_mid_commit_never_dispatches_on_uncertainty() {
    let (terminated, report) = connection_cut_campaign(10).await;
    assert!(terminated > 0, "no connection was cut");
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the full campaign: minutes; run with --ignored"]
async fn full_connection_cut_campaign() {
    let (_, report) = connection_cut_campaign(env_or("CRASH_CUTS", 300)).await;
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// PostgreSQL itself crashes (`pg_ctl stop -m immediate`) under load, on a
/// durable cluster of its own, and restarts; nothing acknowledged may be
/// missing. With `synchronous_commit = off` (the negative control) the same
/// checker must find acknowledged commands missing.
async fn pg_crash_campaign(crashes: usize, synchronous_commit: bool) -> Check {
    let seed = seed();
    let root = std::env::temp_dir().join(format!(
        "command-ledger-pgcrash-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let options = ClusterOptions {
        data_dir: root.join("pg"),
        password: None,
        durable: true,
        port: Some(free_port()),
    };
    let cluster = tokio::task::spawn_blocking({
        let o = options.clone();
        move || Cluster::start(&o)
    })
    .await
    .unwrap()
    .unwrap();
    cluster.stop_when_process_exits(Some(&root)).unwrap();
    let admin = cluster.url("postgres");
    command_ledger::db::ensure_database(&admin, "ledger")
        .await
        .unwrap();
    let db_url = cluster.url("ledger");
    let pool = command_ledger::db::connect(&db_url, 8).await.unwrap();
    command_ledger::db::migrate(&pool).await.unwrap();
    if !synchronous_commit {
        sqlx::query("alter system set synchronous_commit = off")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("select pg_reload_conf()")
            .execute(&pool)
            .await
            .unwrap();
    }
    let mut world = World::new(db_url, pool.clone(), seed).await;
    let api = world.api();
    let custodian = world.custodian();
    world.wait_ready().await;

    let acked: Acked = Arc::default();
    let counter = Arc::new(AtomicU64::new(0));
    let clients = Clients::start(&world, 4, "pg", &acked, &counter);
    let mut cluster = cluster;
    for _ in 0..crashes {
        tokio::time::sleep(Duration::from_millis(700)).await;
        cluster = tokio::task::spawn_blocking({
            let o = options.clone();
            move || {
                cluster.crash().unwrap();
                Cluster::start(&o).unwrap()
            }
        })
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    clients.stop().await;
    let live = world.wait_all_terminal(Duration::from_secs(20)).await;
    let acked = acked.lock().unwrap().clone();
    let mut report = check(&world, &acked).await;
    if live > 0 {
        report.violations.push(format!(
            "{live} commands not terminal 20 s after faults stopped"
        ));
    }
    eprintln!(
        "PostgreSQL crashes: {crashes} (synchronous_commit {}); acknowledged {}; outcomes {:?}; violations {}",
        if synchronous_commit { "on" } else { "off" },
        acked.len(),
        report.by_state,
        report.violations.len()
    );
    api.shutdown();
    custodian.shutdown();
    pool.close().await;
    world.cleanup();
    let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_crash_under_load_loses_nothing_acknowledged() {
    // Crashing and restarting PostgreSQL needs its server binaries here: a
    // container backend (`--features testcontainers`) cannot be crashed.
    if command_ledger::embedded_pg::find_bin_dir().is_err() {
        eprintln!("skipped: no PostgreSQL server binaries on this machine to crash and restart");
        return;
    }
    let report = pg_crash_campaign(2, true).await;
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the full campaign: minutes; run with --ignored"]
async fn full_postgres_crash_campaign() {
    let report = pg_crash_campaign(env_or("CRASH_PG", 20), true).await;
    assert!(report.violations.is_empty(), "{:?}", report.violations);
}

/// The negative control: the checker is not blind. With synchronous commit
/// off, PostgreSQL acknowledges commits it has not flushed, and crashes lose
/// them; the checker must say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the negative control: run with --ignored"]
async fn negative_control_synchronous_commit_off_is_caught() {
    let report = pg_crash_campaign(env_or("CRASH_PG", 10), false).await;
    assert!(
        !report.violations.is_empty(),
        "the checker missed the losses of synchronous_commit=off"
    );
    eprintln!(
        "negative control: {} violations found, e.g. {:?}",
        report.violations.len(),
        report.violations.first()
    );
}
