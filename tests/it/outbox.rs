//! The device outbox: a command is written down before it is sent, and a
//! device that dies at any step of a flush (killed as a power loss would),
//! or finds the network down, resends on its next flush and ends with each
//! command in the ledger exactly once.

use command_ledger::db::Role;
use command_ledger_client::outbox::Outbox;
use command_ledger_client::{Client, RetryPolicy, Submission};
use serde_json::{Value, json};
use std::time::Duration;

use crate::harness::TestApp;

/// A temporary folder that goes when the test does.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "command-ledger-outbox-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn outbox_cli(
    app: &TestApp,
    token: &str,
    db: &std::path::Path,
    args: &[&str],
    crash_at: Option<&str>,
) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_command-ledger"));
    cmd.arg("outbox")
        .arg("--db")
        .arg(db)
        .args(args)
        .env("COMMAND_LEDGER_URL", &app.base)
        .env("COMMAND_LEDGER_TOKEN", token)
        .env_remove("COMMAND_LEDGER_OUTBOX_CRASH_AT");
    if let Some(step) = crash_at {
        cmd.env("COMMAND_LEDGER_OUTBOX_CRASH_AT", step);
    }
    cmd.output().await.unwrap()
}

/// Kills a flush of batches of one at each step (the first command's), then
/// lets it finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_killed_at_every_step_of_a_flush_ends_with_each_command_once() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let scratch = Scratch::new();
    let db = scratch.0.join("outbox.sqlite");

    let mut keys = Vec::new();
    for direction in ["left", "right", "up"] {
        let arg = format!("direction={direction}");
        let out = outbox_cli(
            &app,
            &token,
            &db,
            &["add", "steer", "--authority", "agent-7", "--arg", &arg],
            None,
        )
        .await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        keys.push(String::from_utf8(out.stdout).unwrap().trim().to_owned());
    }
    assert_eq!(
        app.command_count().await,
        0,
        "recorded on the device, nothing sent"
    );

    // Power lost before the first send: nothing reached the ledger.
    let out = outbox_cli(
        &app,
        &token,
        &db,
        &["flush", "--batch", "1"],
        Some("before_send"),
    )
    .await;
    assert!(!out.status.success(), "the flush was killed");
    assert_eq!(app.command_count().await, 0);
    // Power lost after the server committed the first and answered, before
    // the device wrote the answer down.
    let out = outbox_cli(
        &app,
        &token,
        &db,
        &["flush", "--batch", "1"],
        Some("after_answer"),
    )
    .await;
    assert!(!out.status.success());
    assert_eq!(app.command_count().await, 1);
    // Power lost right after writing the first answer down: the first is
    // resent (a replay) and recorded, the rest not yet sent.
    let out = outbox_cli(
        &app,
        &token,
        &db,
        &["flush", "--batch", "1"],
        Some("after_record"),
    )
    .await;
    assert!(!out.status.success());
    assert_eq!(app.command_count().await, 1);
    // Power back: everything left goes, once.
    let out = outbox_cli(&app, &token, &db, &["flush", "--batch", "1"], None).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "answered 2, refused 0, still pending 0"
    );
    assert_eq!(app.command_count().await, 3, "each command exactly once");

    let out = outbox_cli(&app, &token, &db, &["list"], None).await;
    let entries: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let listed: Vec<&str> = entries.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(listed, keys.iter().map(String::as_str).collect::<Vec<_>>());
    let dispositions: Vec<&str> = entries
        .iter()
        .map(|e| e["answer"]["disposition"].as_str().unwrap())
        .collect();
    assert_eq!(
        dispositions,
        ["replay", "new", "new"],
        "the first was resent after its answer was lost"
    );
    // A further flush sends nothing.
    let out = outbox_cli(&app, &token, &db, &["flush"], None).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "answered 0, refused 0, still pending 0"
    );
    assert_eq!(app.command_count().await, 3);
}

#[tokio::test]
async fn with_the_network_down_a_flush_keeps_everything_for_the_next_one() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let scratch = Scratch::new();
    let outbox = Outbox::open(&scratch.0.join("outbox.sqlite")).unwrap();
    for direction in ["left", "right"] {
        outbox
            .record(&Submission::new("steer", "agent-7").args(json!({"direction": direction})))
            .unwrap();
    }
    // Nothing listens here: every attempt is refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let offline = Client::new(dead, &token).with_retry(RetryPolicy {
        max_attempts: 2,
        max_elapsed: Duration::from_secs(2),
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        attempt_timeout: Duration::from_secs(2),
    });
    let report = outbox.flush(&offline).await.unwrap();
    assert_eq!((report.answered, report.pending), (0, 2));
    assert!(report.stopped_by.is_some());
    assert_eq!(app.command_count().await, 0);

    let report = outbox.flush(&Client::new(&app.base, &token)).await.unwrap();
    assert_eq!((report.answered, report.refused, report.pending), (2, 0, 0));
    assert_eq!(app.command_count().await, 2);
    // A definite refusal is an answer too, recorded and not resent.
    let key = outbox
        .record(
            &Submission::new("steer", "agent-7")
                .args(json!({"direction": "down"}))
                .key(outbox.entries().unwrap()[0].key.clone() + "-x"),
        )
        .unwrap();
    outbox
        .record(
            &Submission::new("steer", "agent-7")
                .args(json!({"direction": "other"}))
                .key(&key),
        )
        .expect_err("one key, one entry");
    let report = outbox.flush(&Client::new(&app.base, &token)).await.unwrap();
    assert_eq!(report.answered, 1);
    assert_eq!(outbox.answer(&key).unwrap().unwrap()["state"], "pending");
}

#[tokio::test]
async fn a_flush_sends_its_commands_in_one_batch_and_one_commit() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let scratch = Scratch::new();
    let outbox = Outbox::open(&scratch.0.join("outbox.sqlite")).unwrap();
    for i in 0..25 {
        outbox
            .record(&Submission::new("steer", "agent-7").args(json!({"step": i})))
            .unwrap();
    }
    // A refusal inside the batch is that entry's answer alone.
    outbox
        .record(&Submission::new("Bad Kind", "agent-7").args(json!({})))
        .unwrap();
    let report = outbox.flush(&Client::new(&app.base, &token)).await.unwrap();
    assert_eq!(
        (report.answered, report.refused, report.pending),
        (25, 1, 0)
    );
    let (rows, commits): (i64, i64) =
        sqlx::query_as("select count(*), count(distinct xmin::text) from commands")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!((rows, commits), (25, 1), "one batch, one commit");
    let refused: Vec<Value> = outbox
        .entries()
        .unwrap()
        .into_iter()
        .filter_map(|e| e.answer.filter(|a| a.get("refused").is_some()))
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["refused"]["type"], "/problems/invalid-body");
}

/// The same with the whole queue in one batch: a kill after the server
/// answered loses the answers of all of it; the next flush resends the
/// batch and gets each command back as a replay, never a second command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_killed_after_a_batch_was_answered_resends_it_as_replays() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk", Role::Device).await;
    let scratch = Scratch::new();
    let db = scratch.0.join("outbox.sqlite");
    for direction in ["left", "right", "up"] {
        let arg = format!("direction={direction}");
        let out = outbox_cli(
            &app,
            &token,
            &db,
            &["add", "steer", "--authority", "agent-7", "--arg", &arg],
            None,
        )
        .await;
        assert!(out.status.success());
    }
    let out = outbox_cli(&app, &token, &db, &["flush"], Some("after_answer")).await;
    assert!(!out.status.success(), "the flush was killed");
    assert_eq!(app.command_count().await, 3, "the batch committed");
    let out = outbox_cli(&app, &token, &db, &["flush"], None).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "answered 3, refused 0, still pending 0"
    );
    assert_eq!(app.command_count().await, 3, "each command exactly once");
    let out = outbox_cli(&app, &token, &db, &["list"], None).await;
    let dispositions: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["answer"]["disposition"].to_string())
        .collect();
    assert_eq!(dispositions, [r#""replay""#; 3]);
}
