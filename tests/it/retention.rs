//! Retention: `command-ledger prune` removes finished commands past the
//! window in batches, archives each with its history, and never touches a
//! live command or one a hold refers to; the database refuses every other
//! way of deleting them; the replay window is advertised to clients.

use command_ledger::db::Role;
use command_ledger::domain::admission::Policies;
use command_ledger::http::AppState;
use serde_json::Value;
use std::time::Duration;

use crate::harness::{TestApp, as_role, fresh_database, refund, serve_state};
use command_ledger::db::roles::ServiceRole;

const BIN: &str = env!("CARGO_BIN_EXE_command-ledger");

/// Ends a pending command as a custodian's recovery does (`expired`), as if
/// `days` ago: the guard keeps the `finished_at` a terminal transition
/// brings, so the command is old enough to prune without stepping around any
/// trigger, and its history entry is written and chained as any other.
async fn finish_days_ago(app: &TestApp, id: &str, days: i32) {
    let custodian = as_role(&app.pool, ServiceRole::Custodian);
    let changed = sqlx::query(
        "update commands set state = 'expired', error = '{\"reason\": \"deadline_passed\"}', \
         finished_at = now() - make_interval(days => $2) where id = $1::uuid and state = 'pending'",
    )
    .bind(id)
    .bind(days)
    .execute(&custodian)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(changed, 1, "{id} was pending");
    custodian.close().await;
}

/// `prune_commands` as `ledger_retention`, the one role granted it.
async fn prune(app: &TestApp, older_than: &str, max_rows: i32) -> i32 {
    let retention = as_role(&app.pool, ServiceRole::Retention);
    let n = sqlx::query_scalar("select prune_commands($1::interval, $2)")
        .bind(older_than)
        .bind(max_rows)
        .fetch_one(&retention)
        .await
        .unwrap();
    retention.close().await;
    n
}

async fn exists(app: &TestApp, id: &str) -> bool {
    sqlx::query_scalar("select exists (select 1 from commands where id = $1::uuid)")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

async fn sqlstate(app: &TestApp, sql: &str) -> String {
    let err = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&app.pool)
        .await
        .unwrap_err();
    err.as_database_error()
        .and_then(|d| d.code())
        .unwrap()
        .into_owned()
}

#[tokio::test]
async fn prune_archives_and_removes_only_finished_commands_past_the_window() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-7", Role::Device).await;
    let mut old = Vec::new();
    for i in 0..5 {
        let id = app.create(&token, &format!("old-{i}"), &refund(i)).await;
        finish_days_ago(&app, &id, 40).await;
        old.push(id);
    }
    let recent = app.create(&token, "recent", &refund(10)).await;
    app.post(&token, &format!("/v1/commands/{recent}/cancel"))
        .await;
    let live = app.create(&token, "live", &refund(11)).await;

    // Only the archive may delete, and only what it archived.
    let direct = format!("delete from commands where id = '{}'", old[0]);
    assert_eq!(sqlstate(&app, &direct).await, "CL002");
    let history = format!(
        "delete from command_history where command_id = '{}'",
        old[0]
    );
    assert_eq!(sqlstate(&app, &history).await, "CL003");
    let hasty = "select prune_commands(interval '10 seconds', 10)";
    assert_eq!(sqlstate(&app, hasty).await, "CL007");

    let out = tokio::process::Command::new(BIN)
        .args([
            "--database-url",
            &app.db_url,
            "prune",
            "--older-than",
            "30d",
            "--batch",
            "2",
        ])
        .env("RUST_LOG", "error")
        .env("USER", "ops-bob")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("pruned 5 finished command(s)"), "{stdout}");

    for id in &old {
        assert!(!exists(&app, id).await, "{id} was pruned");
    }
    assert!(
        exists(&app, &recent).await,
        "finished inside the window: kept"
    );
    assert!(exists(&app, &live).await, "live: kept, however old");
    let orphans: i64 = sqlx::query_scalar(
        "select count(*) from command_history h \
         where not exists (select 1 from commands c where c.authority_id = h.authority_id and c.id = h.command_id)",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(orphans, 0);

    // The archive keeps each command with its whole history and who pruned it.
    let (record, by): (Value, String) =
        sqlx::query_as("select record, pruned_by from pruned_commands where id = $1::uuid")
            .bind(&old[0])
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(by, "prune:ops-bob");
    assert_eq!(record["command"]["idempotency_key"], "old-0");
    let states: Vec<&str> = record["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["to_state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["pending", "expired"]);
    assert_eq!(sqlstate(&app, "delete from pruned_commands").await, "CL003");

    // Nothing was written around the triggers: every chain, live and archived, verifies.
    let verify = tokio::process::Command::new(BIN)
        .args(["--database-url", &app.db_url, "verify"])
        .env("RUST_LOG", "error")
        .output()
        .await
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    // The key was forgotten with its command: the same key now makes a new one.
    let again = app.submit(&token, Some("old-0"), &refund(0)).await;
    assert_eq!(again.status(), 202);
}

#[tokio::test]
async fn a_command_a_hold_refers_to_is_kept() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-7", Role::Device).await;
    let id = app.create(&token, "k", &refund(1)).await;
    finish_days_ago(&app, &id, 40).await;
    let scope: uuid::Uuid = sqlx::query_scalar("select scope from commands where id = $1::uuid")
        .bind(&id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    sqlx::query(
        "insert into holds (id, scope, kind, authority_id, args, canonical, request_digest, \
         intent_digest, digest_version, resembles) \
         select gen_random_uuid(), $2, kind, authority_id, args, canonical, request_digest, \
         request_digest, digest_version, id from commands where id = $1::uuid",
    )
    .bind(&id)
    .bind(scope)
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(prune(&app, "30 days", 100).await, 0);
    assert!(exists(&app, &id).await);
}

#[tokio::test]
async fn the_replay_window_is_advertised_when_configured() {
    let (_, pool) = fresh_database().await;
    let token = command_ledger::cli::issue_token(&pool, "kiosk-7", Role::Device, None)
        .await
        .unwrap();
    let mut state = AppState::new(
        as_role(&pool, ServiceRole::Api),
        crate::harness::ledger_backend(),
        Policies::default(),
    );
    state.retention = Some(Duration::from_secs(30 * 86_400));
    let addr = serve_state(state).await;
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/v1/commands"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "k")
        .json(&refund(1))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let expires = resp.headers()["idempotency-key-expires"].to_str().unwrap();
    let at = chrono::DateTime::parse_from_rfc2822(expires).unwrap();
    let days = (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_days();
    assert!((29..=30).contains(&days), "{expires}");

    // Without a configured window, nothing is promised.
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-8", Role::Device).await;
    let resp = app.submit(&token, Some("k"), &refund(1)).await;
    assert!(!resp.headers().contains_key("idempotency-key-expires"));
}

/// What a command was given to (requests coalesced into it) is append-only,
/// and leaves with its command into the archive when it is pruned.
#[tokio::test]
async fn coalesced_answers_are_kept_then_archived_with_their_command() {
    use command_ledger::domain::admission::NearDuplicate;
    let app = TestApp::spawn_with(crate::harness::refund_policy(
        Duration::from_secs(60),
        NearDuplicate::Hold,
    ))
    .await;
    let token = app.token("agent", Role::Device).await;
    let invoke = |run: &'static str| {
        app.client
            .post(app.url("/v1/invoke"))
            .bearer_auth(&token)
            .header("Prefer", "wait=0")
            .json(&serde_json::json!({"tool": "refund", "runId": run,
                                      "args": {"to": "ada@example.com", "amount": "3 EUR"}}))
            .send()
    };
    let first: Value = invoke("run-1").await.unwrap().json().await.unwrap();
    let id = first["command_id"].as_str().unwrap().to_owned();
    let second: Value = invoke("run-2").await.unwrap().json().await.unwrap();
    assert_eq!(second["command_id"], first["command_id"]);
    let run: String =
        sqlx::query_scalar("select run_id from coalesced_requests where command_id = $1::uuid")
            .bind(&id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(run, "run-2");
    for sql in [
        "update coalesced_requests set run_id = 'forged'".to_owned(),
        format!("delete from coalesced_requests where command_id = '{id}'"),
        "truncate coalesced_requests".to_owned(),
    ] {
        assert_eq!(sqlstate(&app, &sql).await, "CL003", "{sql}");
    }

    finish_days_ago(&app, &id, 40).await;
    assert_eq!(prune(&app, "30 days", 10).await, 1);
    let left: i64 = sqlx::query_scalar("select count(*) from coalesced_requests")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "the answers left with their command");
    let record: Value =
        sqlx::query_scalar("select record from pruned_commands where id = $1::uuid")
            .bind(&id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(record["coalesced"][0]["run_id"], "run-2", "{record}");
}

/// The count of ambiguous commands of all time is a counter: pruning the
/// command leaves it alone; what is open now is a gauge, and goes down.
#[tokio::test]
async fn pruning_an_ambiguous_command_leaves_the_ambiguous_counter_alone() {
    use crate::metrics::sample;
    let app = TestApp::spawn().await;
    let operator = app.token("ops", Role::Operator).await;
    let id = app.create(&operator, "unsure", &refund(4)).await;
    for state in ["prepared", "effect_started"] {
        sqlx::query("update commands set state = $2, authority_generation = 1 where id = $1::uuid")
            .bind(&id)
            .bind(state)
            .execute(&app.pool)
            .await
            .unwrap();
    }
    let custodian = as_role(&app.pool, ServiceRole::Custodian);
    sqlx::query(
        "update commands set state = 'ambiguous', error = '{\"reason\": \"timeout\"}', \
         finished_at = now() - interval '40 days' where id = $1::uuid",
    )
    .bind(&id)
    .execute(&custodian)
    .await
    .unwrap();
    custodian.close().await;
    let scrape = || async { app.get(&operator, "/metrics").await.text().await.unwrap() };

    let before = scrape().await;
    assert_eq!(sample(&before, "ledger_ambiguous_total"), 1.0);
    assert_eq!(sample(&before, "ledger_ambiguous_unresolved"), 1.0);
    assert!(
        before.contains("# TYPE ledger_ambiguous_total counter"),
        "{before}"
    );
    assert!(
        before.contains("# TYPE ledger_ambiguous_unresolved gauge"),
        "{before}"
    );

    assert_eq!(prune(&app, "30 days", 10).await, 1);
    assert!(!exists(&app, &id).await);
    let after = scrape().await;
    assert_eq!(
        sample(&after, "ledger_ambiguous_total"),
        1.0,
        "pruning lowered the counter"
    );
    assert_eq!(sample(&after, "ledger_ambiguous_unresolved"), 0.0);
}
