//! The quickstart as a new user runs it: the real binary, no DATABASE_URL, a
//! private cluster under the state directory, Ctrl-C, and a second start that
//! finds everything again.

use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_command-ledger");

fn command(state_dir: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_remove("DATABASE_URL")
        .env("COMMAND_LEDGER_STATE_DIR", state_dir)
        .env("RUST_LOG", "warn");
    cmd
}

/// Starts `serve` on a free port and returns it with the API URL it printed.
fn start_serve(state_dir: &Path) -> (Child, String) {
    let mut child = command(state_dir)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if let Some(url) = line.trim().strip_prefix("API:") {
                let _ = tx.send(url.trim().to_owned());
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("serve printed its API URL");
    (child, url)
}

/// A `serve` that is stopped with Ctrl-C if the test ends early (a failed
/// assertion), so that neither it nor its cluster outlives the test.
struct Stopped(Option<Child>);

impl Stopped {
    fn interrupt_and_wait(mut self) {
        if let Some(child) = self.0.take() {
            interrupt_and_wait(child);
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            for _ in 0..300 {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
        }
    }
}

fn interrupt_and_wait(mut child: Child) {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    for _ in 0..600 {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "serve exited with {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("serve did not stop within 60 s of Ctrl-C");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_no_database_url_runs_its_own_cluster_end_to_end() {
    if command_ledger::embedded_pg::find_bin_dir().is_err() {
        eprintln!("skipped: no PostgreSQL server binaries on this machine");
        return;
    }
    let root = std::env::temp_dir().join(format!(
        "command-ledger-serve-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let state_dir = root.join("state");
    let client = reqwest::Client::new();

    let (serve, api) = start_serve(&state_dir);
    let operator = std::fs::read_to_string(state_dir.join("operator-token"))
        .unwrap()
        .trim()
        .to_owned();
    let ready = client.get(format!("{api}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    // A second process (the CLI) attaches to the running cluster.
    let out = command(&state_dir)
        .args([
            "token",
            "create",
            "--principal",
            "dev-1",
            "--role",
            "device",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let device = String::from_utf8(out.stdout).unwrap().trim().to_owned();

    // The in-process custodian runs the refund at the demo sink; the
    // submitter waits for the outcome.
    let body = json!({"kind": "refund", "authority": "payments", "args": {"to": "ada@example.com", "amount": "12.00 USD"}});
    let created = client
        .post(format!("{api}/v1/commands"))
        .bearer_auth(&device)
        .header("Idempotency-Key", "try-1")
        .header("Prefer", "wait=20")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 202);
    let created: Value = created.json().await.unwrap();
    assert_eq!(created["state"], "applied", "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let history: Value = client
        .get(format!("{api}/v1/commands/{id}/history"))
        .bearer_auth(&device)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let path: Vec<&str> = history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["to"].as_str().unwrap())
        .collect();
    assert_eq!(path, ["pending", "prepared", "effect_started", "applied"]);
    let sink_log = command_ledger::demo_sink::read_log(&state_dir.join("demo-sink.log")).unwrap();
    assert_eq!(sink_log.iter().filter(|l| l.event == "applied").count(), 1);
    interrupt_and_wait(serve);
    let data_dir = state_dir.join("pg");
    assert!(
        data_dir.join("PG_VERSION").exists(),
        "the cluster lives in the state dir"
    );
    assert!(
        !data_dir.join("postmaster.pid").exists(),
        "Ctrl-C stopped the cluster too"
    );

    // The next start reuses the cluster: the command, the tokens, no new operator token.
    let (serve, api) = start_serve(&state_dir);
    let again = std::fs::read_to_string(state_dir.join("operator-token"))
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(again, operator);
    let replay = client
        .post(format!("{api}/v1/commands"))
        .bearer_auth(&device)
        .header("Idempotency-Key", "try-1")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["id"], id.as_str());
    let seen = client
        .get(format!("{api}/v1/commands/{id}"))
        .bearer_auth(&operator)
        .send()
        .await
        .unwrap();
    assert_eq!(seen.status(), 200);
    interrupt_and_wait(serve);
    let _ = std::fs::remove_dir_all(&root);
}

/// Separate processes: a demo sink, a custodian (configured by a catalog
/// file, on the test database), and the API; the custodian is woken across
/// processes and stops gracefully on SIGTERM, releasing its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custodian_process_executes_what_the_api_records() {
    use crate::harness::{TestApp, refund};
    use command_ledger::db::Role;

    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let dir = std::env::temp_dir().join(format!(
        "command-ledger-procs-{}",
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();

    let mut sink = Command::new(BIN)
        .args(["demo-sink", "--listen", "127.0.0.1:0", "--log"])
        .arg(dir.join("sink.log"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(sink.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let sink_url = line.split_whitespace().nth(3).unwrap().to_owned();
    std::fs::write(
        dir.join("ledger.toml"),
        format!("[kinds.refund]\nurl = \"{sink_url}/refunds\"\ntimeout = \"5s\"\n"),
    )
    .unwrap();

    let custodian = Command::new(BIN)
        .args([
            "custodian",
            "--authority",
            "payments",
            "--poll-interval",
            "2m",
            "--catalog",
        ])
        .arg(dir.join("ledger.toml"))
        .env("DATABASE_URL", &app.db_url)
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    // Wait for its lease.
    for _ in 0..100 {
        let holder: Option<(Option<String>,)> =
            sqlx::query_as("select lease_holder from authorities where id = 'payments'")
                .fetch_optional(&app.pool)
                .await
                .unwrap();
        if holder.is_some_and(|h| h.0.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = std::time::Instant::now();
    let resp = app
        .client
        .post(app.url("/v1/commands"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "p1")
        .header("Prefer", "wait=20")
        .json(&refund(700))
        .send()
        .await
        .unwrap();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["state"], "applied", "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken across processes, not by the 2 minute poll"
    );

    interrupt_and_wait_term(custodian);
    let holder: (Option<String>,) =
        sqlx::query_as("select lease_holder from authorities where id = 'payments'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(
        holder.0, None,
        "the custodian released its lease on SIGTERM"
    );
    let log = command_ledger::demo_sink::read_log(&dir.join("sink.log")).unwrap();
    assert_eq!(log.iter().filter(|l| l.event == "applied").count(), 1);
    let _ = sink.kill();
    let _ = sink.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

pub(crate) fn interrupt_and_wait_term(mut child: Child) {
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    for _ in 0..300 {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "exited with {status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("the process did not stop within 30 s of SIGTERM");
}

/// With its database stopped (connections refused at once), `serve` fails
/// closed fast: `503 /problems/unavailable` with `Retry-After: 1` within
/// about a second, `/readyz` too, rather than after the pool's patience;
/// and it recovers on its own when the database is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_its_database_stopped_serve_answers_503_within_a_second_and_recovers() {
    use command_ledger::embedded_pg::{Cluster, ClusterOptions};
    if command_ledger::embedded_pg::find_bin_dir().is_err() {
        eprintln!("skipped: no PostgreSQL server binaries on this machine");
        return;
    }
    let root = std::env::temp_dir().join(format!(
        "command-ledger-down-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let options = ClusterOptions {
        data_dir: root.join("pg"),
        password: None,
        durable: false,
        port: None,
    };
    let cluster = tokio::task::spawn_blocking({
        let options = options.clone();
        move || Cluster::start(&options)
    })
    .await
    .unwrap()
    .unwrap();
    cluster.stop_when_process_exits(Some(&root)).unwrap();
    let (db_url, port) = (cluster.url("postgres"), cluster.port());

    let port_free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let serve = KillOnDrop(Some(
        Command::new(BIN)
            .args(["serve", "--listen", &port_free.to_string()])
            .env("DATABASE_URL", &db_url)
            .env("COMMAND_LEDGER_STATE_DIR", root.join("state"))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    ));
    let api = format!("http://{port_free}");
    let client = reqwest::Client::new();
    let mut up = false;
    for _ in 0..600 {
        if client.get(format!("{api}/healthz")).send().await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(up, "serve did not start listening on {api}");
    let pool = command_ledger::db::connect(&db_url, 2).await.unwrap();
    let token =
        command_ledger::cli::issue_token(&pool, "dev", command_ledger::db::Role::Device, None)
            .await
            .unwrap();
    pool.close().await;
    let submit = |key: &'static str| {
        client
            .post(format!("{api}/v1/commands"))
            .bearer_auth(&token)
            .header("Idempotency-Key", key)
            .json(&json!({"kind": "noop", "authority": "payments", "args": {}}))
            .send()
    };
    assert_eq!(submit("before").await.unwrap().status(), 202);

    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
    for attempt in 0..2 {
        let started = std::time::Instant::now();
        let resp = submit("while-down").await.unwrap();
        let submit_took = started.elapsed();
        assert_eq!(resp.headers()["retry-after"], "1");
        crate::harness::problem(resp, 503, "/problems/unavailable").await;
        let started = std::time::Instant::now();
        let ready = client.get(format!("{api}/readyz")).send().await.unwrap();
        let ready_took = started.elapsed();
        assert_eq!(ready.status(), 503);
        eprintln!(
            "database down, attempt {attempt}: submit 503 in {submit_took:?}, /readyz 503 in {ready_took:?}"
        );
        for (what, took) in [("submit", submit_took), ("/readyz", ready_took)] {
            assert!(
                took < Duration::from_millis(2000),
                "{what} answered 503 after {took:?}: the database refuses at once, so should we"
            );
        }
    }

    // The database comes back on the same port: serve recovers by itself.
    let restarted = tokio::task::spawn_blocking(move || {
        Cluster::start(&ClusterOptions {
            port: Some(port),
            ..options
        })
    })
    .await
    .unwrap()
    .unwrap();
    let mut ready = false;
    for _ in 0..150 {
        let status = client
            .get(format!("{api}/readyz"))
            .send()
            .await
            .unwrap()
            .status();
        if status == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        ready,
        "serve did not become ready again after the database returned"
    );
    assert_eq!(submit("after").await.unwrap().status(), 202);
    interrupt_and_wait(serve.take());
    tokio::task::spawn_blocking(move || restarted.stop())
        .await
        .unwrap()
        .unwrap();
    let _ = std::fs::remove_dir_all(&root);
}

/// A child process killed if the test fails before it stops it.
struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    fn take(mut self) -> Child {
        self.0.take().expect("taken once")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The book's crash session (docs/start/first-crash.md): `serve` is killed
/// (SIGKILL) while two refunds are `effect_started`, one the demo sink
/// applied and one it never did.
/// The next `serve` adopts the cluster the dead one left running, and its
/// recovery settles both through the sink's reconcile probe instead of
/// calling them ambiguous; its Ctrl-C then stops the adopted cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_serve_is_settled_by_the_probe_and_its_cluster_adopted() {
    if command_ledger::embedded_pg::find_bin_dir().is_err() {
        eprintln!("skipped: no PostgreSQL server binaries on this machine");
        return;
    }
    let root = std::env::temp_dir().join(format!(
        "command-ledger-crash-serve-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let state_dir = root.join("state");
    let client = reqwest::Client::new();
    let (serve, api) = start_serve(&state_dir);
    let mut first = Stopped(Some(serve));
    let operator = std::fs::read_to_string(state_dir.join("operator-token"))
        .unwrap()
        .trim()
        .to_owned();
    let submit = |key: &'static str, mode: &'static str| {
        let (client, api, operator) = (client.clone(), api.clone(), operator.clone());
        async move {
            let body = json!({"kind": "refund", "authority": "payments",
                              "args": {"to": "cy@example.com", "amount": "7.00 USD", "mode": mode}});
            let r: Value = client
                .post(format!("{api}/v1/commands"))
                .bearer_auth(&operator)
                .header("Idempotency-Key", key)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            r["id"].as_str().unwrap().to_owned()
        }
    };
    let hung = submit("crash-hang", "hang").await;
    let stalled = submit("crash-stall", "stall").await;
    let state = |id: String| {
        let (client, api, operator) = (client.clone(), api.clone(), operator.clone());
        async move {
            let r: Value = client
                .get(format!("{api}/v1/commands/{id}"))
                .bearer_auth(&operator)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            r
        }
    };
    // Kill only once both effects started and the hung one reached the sink.
    let sink_log = state_dir.join("demo-sink.log");
    let applied_at_sink = |key: &str| {
        command_ledger::demo_sink::read_log(&sink_log)
            .unwrap()
            .iter()
            .filter(|l| l.event == "applied" && l.key == key)
            .count()
    };
    for _ in 0..100 {
        let (h, s) = (state(hung.clone()).await, state(stalled.clone()).await);
        if h["state"] == "effect_started"
            && s["state"] == "effect_started"
            && applied_at_sink(&format!("cl-{hung}")) == 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(state(hung.clone()).await["state"], "effect_started");
    assert_eq!(state(stalled.clone()).await["state"], "effect_started");
    let mut serve = first.0.take().expect("the first serve runs");
    serve.kill().unwrap();
    serve.wait().unwrap();
    let data_dir = state_dir.join("pg");
    assert!(
        data_dir.join("postmaster.pid").exists(),
        "SIGKILL left the cluster running"
    );

    let (serve, api) = start_serve(&state_dir);
    let serve = Stopped(Some(serve));
    let settled = |id: String| {
        let (client, api, operator) = (client.clone(), api.clone(), operator.clone());
        async move {
            let r: Value = client
                .get(format!("{api}/v1/commands/{id}?wait=40"))
                .bearer_auth(&operator)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            r
        }
    };
    let h = settled(hung.clone()).await;
    assert_eq!(h["state"], "applied", "the probe found it applied: {h}");
    assert_eq!(h["result"]["key"], format!("cl-{hung}"), "{h}");
    let s = settled(stalled.clone()).await;
    assert_eq!(s["state"], "failed", "the probe found it not applied: {s}");
    assert_eq!(s["error"]["reason"], "not_applied", "{s}");
    assert_eq!(applied_at_sink(&format!("cl-{hung}")), 1, "never run again");
    assert_eq!(applied_at_sink(&format!("cl-{stalled}")), 0, "never run");
    serve.interrupt_and_wait();
    assert!(
        !data_dir.join("postmaster.pid").exists(),
        "the second serve adopted the cluster and its Ctrl-C stopped it"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A checkout the postgres user cannot reach (under a 0700 directory, as
/// root) keeps its private cluster under /var/tmp, named after the state
/// directory's path. A fresh clone at that path (a new, empty state
/// directory) adopts that cluster; one whose password is gone (made by an
/// older version, its keeper lost) is not started over: the start fails in
/// one line naming `database reset`, leaves no server running, and
/// `database reset --yes` clears the way for a new cluster.
#[tokio::test]
async fn a_fresh_clone_at_a_path_used_before_adopts_its_cluster_or_says_how_to_reset_it() {
    if command_ledger::embedded_pg::find_bin_dir().is_err() {
        eprintln!("skipped: no PostgreSQL server binaries on this machine");
        return;
    }
    use std::os::unix::fs::PermissionsExt as _;
    let root = std::env::temp_dir().join(format!(
        "command-ledger-clone-{}",
        uuid::Uuid::now_v7().simple()
    ));
    // As root, a 0700 directory the postgres user cannot traverse.
    std::fs::create_dir_all(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
    let state_dir = root.join("checkout").join(".command-ledger");
    let data_dir = command_ledger::embedded_pg::data_dir_for(&state_dir);
    let run = |args: &[&str]| {
        let out = command(&state_dir).args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = run(&["migrate"]);
    assert!(ok, "{out}{err}");
    assert!(
        data_dir.join("PG_VERSION").exists(),
        "{}",
        data_dir.display()
    );
    let first_password = std::fs::read_to_string(state_dir.join("pg-password")).unwrap();

    // A fresh clone at the same path: the state directory is new.
    std::fs::remove_dir_all(&state_dir).unwrap();
    let (ok, out, err) = run(&["migrate"]);
    assert!(ok, "a fresh clone adopts the cluster: {out}{err}");
    assert_eq!(
        std::fs::read_to_string(state_dir.join("pg-password")).unwrap(),
        first_password
    );

    let outside = data_dir != state_dir.join("pg");
    if outside {
        // An older version kept no copy of the password beside the cluster.
        std::fs::remove_file(data_dir.parent().unwrap().join("pg-password")).unwrap();
        std::fs::remove_dir_all(&state_dir).unwrap();
        let (ok, out, err) = run(&["migrate"]);
        assert!(!ok, "{out}");
        let said: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(said.len(), 1, "{err}");
        assert!(said[0].contains("database reset --yes"), "{err}");
        assert!(said[0].contains(&data_dir.display().to_string()), "{err}");
        assert!(
            !data_dir.join("postmaster.pid").exists(),
            "the failed start stopped the server it started"
        );
    }

    // Refused without --yes; with it, the cluster is gone and a new one comes.
    let (ok, _, err) = run(&["database", "reset"]);
    assert!(!ok && err.contains("--yes"), "{err}");
    assert!(data_dir.exists());
    let (ok, out, err) = run(&["database", "reset", "--yes"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("removed the private cluster"), "{out}");
    assert!(!data_dir.exists());
    assert!(!state_dir.join("pg-password").exists());
    let (ok, out, err) = run(&["migrate"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = run(&["database", "reset", "--yes"]);
    assert!(ok, "{out}{err}");
    let _ = std::fs::remove_dir_all(&root);
}
