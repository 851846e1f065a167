//! Recovery: expire what is overdue, adopt what was only prepared, resolve
//! what was started by an executor that vanished (probe, else ambiguous),
//! never re-execute, and never overwrite a row that finished meanwhile.

use crate::harness::{TestApp, TestSink, custodian, refund};
use command_ledger::custodian::effects::Effects;
use command_ledger::custodian::http_executor::HttpExecutor;
use command_ledger::custodian::recovery::{Cursor, Recovery, RecoveryReport};
use command_ledger::custodian::{Custodian, StepReport};
use command_ledger::db::Role;
use command_ledger::demo_sink::Mode;
use command_ledger::domain::recovery::Decision;
use serde_json::{Value, json};
use sqlx::Row;
use std::sync::Arc;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);

/// `refund` to the sink, with the sink's reconcile probe when `probe`.
fn effects(sink: &TestSink, probe: bool) -> Effects {
    let mut effects = Effects::default();
    let executor = HttpExecutor::new(
        format!("{}/refunds", sink.url),
        Default::default(),
        5 * SECOND,
    )
    .unwrap()
    .with_reconcile_url(probe.then(|| format!("{}/applied/{{key}}", sink.url)));
    effects.register("refund", executor, 5 * SECOND);
    effects
}

/// `refund` to the sink with its probe, under a deadline of `timeout`
/// and a probe margin of `margin`.
fn effects_within(sink: &TestSink, timeout: Duration, margin: Duration) -> Effects {
    let mut effects = Effects::default();
    let executor = HttpExecutor::new(format!("{}/refunds", sink.url), Default::default(), timeout)
        .unwrap()
        .with_reconcile_url(Some(format!("{}/applied/{{key}}", sink.url)));
    effects.register_with_margin("refund", executor, timeout, margin);
    effects
}

fn recovery(app: &TestApp, effects: Effects) -> Recovery {
    Recovery::new(
        crate::harness::as_role(&app.pool, command_ledger::db::roles::ServiceRole::Custodian),
        crate::harness::ledger_backend(),
        Arc::new(effects),
        "recovery:test".into(),
    )
}

async fn row(app: &TestApp, id: &str) -> (String, Value, Value) {
    sqlx::query_as::<_, (String, Option<Value>, Option<Value>)>(
        "select state, result, error from commands where id = $1::uuid",
    )
    .bind(id)
    .fetch_one(&app.pool)
    .await
    .map(|(s, r, e)| (s, r.unwrap_or(Value::Null), e.unwrap_or(Value::Null)))
    .unwrap()
}

/// The custodian's process "dies": its lease lapses without a renewal.
async fn lease_dies(app: &TestApp, authority: &str) {
    sqlx::query(
        "update authorities set lease_expires_at = now() - interval '1 second' where id = $1",
    )
    .bind(authority)
    .execute(&app.pool)
    .await
    .unwrap();
}

/// A custodian that crashes after `effect_started` committed; `dispatch`
/// says whether it got to send the effect before dying.
async fn crash_after_start(app: &TestApp, c: &Custodian, dispatch: bool) {
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    let started = c.claim_and_start(10, &mut report).await.unwrap();
    assert_eq!(started.len(), 1);
    if dispatch {
        let _outcome_never_recorded = c.execute(started).await;
    }
    lease_dies(app, "payments").await;
}

#[tokio::test]
async fn overdue_pending_and_prepared_commands_expire_across_pages() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let mut body = refund(1);
    let deadline = chrono::Utc::now() + chrono::Duration::hours(1);
    body["deadline"] = json!(deadline.to_rfc3339());
    let mut ids = Vec::new();
    for i in 0..230 {
        ids.push(app.create(&token, &format!("k{i}"), &body).await);
    }
    // One of them is left prepared under a custodian's lease, never started.
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(&app.pool, &["payments"], effects(&sink, false), 10 * SECOND);
    c.heartbeat().await.unwrap();
    assert_eq!(crate::harness::prepare(&app.pool, &[&ids[0]]).await, 1);
    // Time passes: every deadline is now behind us (a live row's deadline may
    // change; its identity may not).
    sqlx::query("update commands set deadline_at = now() - interval '1 second'")
        .execute(&app.pool)
        .await
        .unwrap();

    let report = recovery(&app, Effects::default()).run_once().await.unwrap();
    assert_eq!(report.expired, 230, "{report:?}");
    let states: Vec<(String, i64)> =
        sqlx::query_as("select state, count(*) from commands group by state")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(states, [("expired".to_owned(), 230)]);
    assert_eq!(sink.requests(), 0);
    assert_eq!(
        recovery(&app, Effects::default()).run_once().await.unwrap(),
        RecoveryReport::default()
    );
}

#[tokio::test]
async fn a_prepared_command_of_a_dead_generation_is_adopted_and_run_once() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let ttl = Duration::from_millis(500);
    let a = custodian(&app.pool, &["payments"], effects(&sink, true), ttl);
    let id = app.create(&token, "k", &refund(1)).await;
    a.heartbeat().await.unwrap();
    // Left prepared under A's generation (by another writer: A's own claim
    // starts at once).
    assert_eq!(crate::harness::prepare(&app.pool, &[&id]).await, 1);

    // A dies; B takes the lease (generation 2), and recovery (not B's own
    // adoption) rebinds the row in this test: B's adoption is switched off
    // by taking the lease by hand.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    sqlx::query("update authorities set generation = generation + 1, lease_holder = 'someone', lease_expires_at = now() + interval '1 minute' where id = 'payments'")
        .execute(&app.pool)
        .await
        .unwrap();
    let report = recovery(&app, effects(&sink, true))
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.adopted, 1, "{report:?}");
    let (generation, reason): (i64, Option<String>) = sqlx::query_as(
        "select authority_generation, (select reason from command_history h where h.authority_id = c.authority_id and h.command_id = c.id order by h.seq desc limit 1) from commands c where id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        (generation, reason.as_deref()),
        (2, Some("adopted by generation 2"))
    );
    assert_eq!(sink.requests(), 0, "adoption runs nothing");
}

#[tokio::test]
async fn a_started_command_whose_executor_died_after_dispatch_is_resolved_applied_by_the_probe() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(&app.pool, &["payments"], effects(&sink, true), 10 * SECOND);
    let id = app.create(&token, "k", &refund(1)).await;
    crash_after_start(&app, &c, true).await;

    let report = recovery(&app, effects(&sink, true))
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.applied, 1, "{report:?}");
    let (state, result, _) = row(&app, &id).await;
    assert_eq!(state, "applied");
    assert_eq!(
        result["key"],
        format!("cl-{id}"),
        "the sink's own record of the effect"
    );
    assert_eq!(
        (sink.count("applied"), sink.requests()),
        (1, 1),
        "probed, never re-executed"
    );
}

/// The probe's "not found" counts once the effect's window (its deadline
/// plus the kind's probe margin, from `effect_started`) has closed, and not
/// before: until then the command stays `effect_started`.
#[tokio::test]
async fn a_started_command_that_was_never_dispatched_is_failed_not_applied_once_its_window_closes()
{
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let within = || effects_within(&sink, SECOND, SECOND);
    let c = custodian(&app.pool, &["payments"], within(), 10 * SECOND);
    let id = app.create(&token, "k", &refund(1)).await;
    crash_after_start(&app, &c, false).await;

    let early = recovery(&app, within()).run_once().await.unwrap();
    assert_eq!((early.waiting, early.failed), (1, 0), "{early:?}");
    assert_eq!(row(&app, &id).await.0, "effect_started");

    tokio::time::sleep(2 * SECOND).await;
    let report = recovery(&app, within()).run_once().await.unwrap();
    assert_eq!((report.failed, report.waiting), (1, 0), "{report:?}");
    let (state, _, error) = row(&app, &id).await;
    assert_eq!(
        (state.as_str(), error["reason"].as_str()),
        ("failed", Some("not_applied"))
    );
    assert_eq!(sink.count("applied"), 0);
}

/// A provider that finishes a request after its caller hung up (the demo
/// sink's `late` mode applies 3 s after it took the request; the caller
/// gave up after 1 s, then its custodian died): a probe asked before the
/// effect's window closes (1 s deadline + 3 s margin) finds nothing and
/// concludes nothing; asked after the provider applied, it finds the
/// refund. The command is never `failed` while the refund could still
/// happen, so nobody is invited to pay again.
#[tokio::test]
async fn a_probes_not_found_is_not_trusted_while_the_effect_may_still_take_hold() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Late).await;
    let within = || effects_within(&sink, SECOND, 3 * SECOND);
    let c = custodian(&app.pool, &["payments"], within(), 10 * SECOND);
    let id = app.create(&token, "k", &refund(1)).await;
    let dispatched = std::time::Instant::now();
    crash_after_start(&app, &c, true).await;

    // Asked while the provider still holds the request: "not found".
    assert!(dispatched.elapsed() < command_ledger::demo_sink::LATE_BY);
    let early = recovery(&app, within()).run_once().await.unwrap();
    assert_eq!(sink.count("applied"), 0, "the provider has not applied yet");
    assert_eq!(
        (early.waiting, early.failed, early.ambiguous),
        (1, 0, 0),
        "{early:?}"
    );
    assert_eq!(row(&app, &id).await.0, "effect_started");

    // The provider applies after its caller went away.
    let deadline = std::time::Instant::now() + 5 * SECOND;
    while sink.count("applied") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sink never applied"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let later = recovery(&app, within()).run_once().await.unwrap();
    assert_eq!(later.applied, 1, "{later:?}");
    let (state, result, _) = row(&app, &id).await;
    assert_eq!(state, "applied");
    assert_eq!(result["key"], format!("cl-{id}"));
    let states: Vec<String> = sqlx::query_scalar(
        "select to_state from command_history where command_id = $1::uuid order by seq",
    )
    .bind(&id)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(!states.iter().any(|s| s == "failed"), "{states:?}");
    assert_eq!(
        (sink.count("applied"), sink.requests()),
        (1, 1),
        "probed, never re-executed"
    );
}

#[tokio::test]
async fn without_a_probe_a_started_command_whose_executor_died_is_ambiguous() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(&app.pool, &["payments"], effects(&sink, false), 10 * SECOND);
    let id = app.create(&token, "k", &refund(1)).await;
    crash_after_start(&app, &c, true).await;

    let report = recovery(&app, effects(&sink, false))
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.ambiguous, 1, "{report:?}");
    let (state, _, error) = row(&app, &id).await;
    assert_eq!(
        (state.as_str(), error["reason"].as_str()),
        ("ambiguous", Some("executor_lost"))
    );
    assert_eq!(sink.requests(), 1, "never re-executed");
}

/// A pass reads what needs a decision, not the backlog (migration 0038):
/// behind 2,000 pending commands whose deadlines are ahead, one recorded
/// overdue and one whose deadline was moved back by hand, the pass's reads
/// scan neither table whole and fetch a handful of commands, not the
/// backlog; then it expires both. (Before, it joined every live command to `commands`.)
#[tokio::test]
async fn a_pass_reads_the_overdue_commands_not_the_backlog() {
    if crate::harness::lacks!(
        local_tables,
        "the counts read are the database's own, not its shards'"
    ) {
        return;
    }
    let app = TestApp::spawn().await;
    let scope = crate::harness::device_principal(&app.pool, "backlog").await;
    let insert = |n: i32, first: i32, deadline: &'static str| {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, \
                                   authority_id, args, canonical, deadline_at) \
             select gen_random_uuid(), $1, 'k-' || i, sha256(('k-' || i)::bytea), 2, 'noop', 'payments', \
                    '{{}}', '{{}}', {deadline} \
             from generate_series($2::int, $2 + $3 - 1) as i \
             returning id"
        )))
        .bind(scope)
        .bind(first)
        .bind(n)
    };
    insert(2_000, 1, "now() + interval '1 hour'")
        .execute(&app.pool)
        .await
        .unwrap();
    let recorded_late: uuid::Uuid = insert(1, 2_001, "now() - interval '1 second'")
        .fetch_one(&app.pool)
        .await
        .unwrap()
        .get(0);
    let moved_back: uuid::Uuid = insert(1, 2_002, "now() + interval '1 hour'")
        .fetch_one(&app.pool)
        .await
        .unwrap()
        .get(0);
    sqlx::query("update commands set deadline_at = now() - interval '1 second' where id = $1")
        .bind(moved_back)
        .execute(&app.pool)
        .await
        .unwrap();
    sqlx::query("analyze").execute(&app.pool).await.unwrap();

    let mut tx = app.pool.begin().await.unwrap();
    // PostgreSQL 15 keeps a backend's counts until it reports them, so the
    // reads' own are the difference.
    // (command_in_flight holds what the custodians hold: read whole, it is
    // not counted.)
    let counts = "select coalesce(sum(seq_scan), 0)::int8, \
                         coalesce(sum(idx_tup_fetch) filter (where relname = 'commands'), 0)::int8 \
                  from pg_stat_xact_user_tables \
                  where relname in ('commands', 'command_queue')";
    let (scans_before, fetched_before): (i64, i64) =
        sqlx::query_as(counts).fetch_one(&mut *tx).await.unwrap();
    let claimed = command_ledger::db::recovery::claimed(&mut *tx, None, 200, None)
        .await
        .unwrap();
    let overdue = command_ledger::db::recovery::overdue(&mut *tx, None, 200, None)
        .await
        .unwrap();
    let (scans, fetched): (i64, i64) = sqlx::query_as(counts).fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert!(claimed.is_empty());
    let mut found: Vec<_> = overdue.iter().map(|c| c.id).collect();
    found.sort();
    let mut expected = vec![recorded_late, moved_back];
    expected.sort();
    assert_eq!(found, expected);
    assert_eq!(
        scans - scans_before,
        0,
        "neither commands nor the queue read whole"
    );
    // The two overdue ones, and the planner's look at an index's ends.
    assert!(
        fetched - fetched_before <= 10,
        "{} commands fetched: the overdue ones are two",
        fetched - fetched_before
    );

    let report = recovery(&app, Effects::default()).run_once().await.unwrap();
    assert_eq!((report.examined, report.expired), (2, 2), "{report:?}");
}

/// The "rescuer overwrites a completed job" race: recovery reads a started
/// row whose lease looks dead, pauses, the original holder records the real
/// outcome, recovery resumes: its guarded write changes nothing.
#[tokio::test]
async fn recovery_paused_between_read_and_write_never_overwrites_a_finished_row() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(&app.pool, &["payments"], effects(&sink, false), 10 * SECOND);
    let id = app.create(&token, "k", &refund(1)).await;
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    let started = c.claim_and_start(10, &mut report).await.unwrap();
    lease_dies(&app, "payments").await;

    let rescuer = recovery(&app, effects(&sink, false));
    let (plan, _) = rescuer.plan(Cursor::Start, 100).await.unwrap();
    assert_eq!(plan.len(), 1);
    assert_eq!(plan[0].decision, Decision::Resolve);

    // Meanwhile the holder (paused, not dead) finishes and records: the
    // generation has not moved, so its write is legitimate.
    let done = c.execute(started).await;
    c.record_outcomes(done, &mut report).await;
    assert_eq!(row(&app, &id).await.0, "applied");

    let mut rescued = RecoveryReport::default();
    rescuer.apply(plan, &mut rescued).await.unwrap();
    assert_eq!((rescued.skipped, rescued.ambiguous), (1, 0));
    assert_eq!(
        row(&app, &id).await.0,
        "applied",
        "the finished row was not overwritten"
    );
}

/// And the other way round: once recovery resolved a row, the late holder's
/// outcome is refused (the row is no longer effect_started).
#[tokio::test]
async fn a_late_outcome_after_recovery_resolved_the_row_is_refused() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(&app.pool, &["payments"], effects(&sink, false), 10 * SECOND);
    let id = app.create(&token, "k", &refund(1)).await;
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();
    let started = c.claim_and_start(10, &mut report).await.unwrap();
    lease_dies(&app, "payments").await;
    recovery(&app, effects(&sink, false))
        .run_once()
        .await
        .unwrap();
    assert_eq!(row(&app, &id).await.0, "ambiguous");

    let done = c.execute(started).await;
    c.record_outcomes(done, &mut report).await;
    assert_eq!(report.fenced, 1);
    assert_eq!(
        row(&app, &id).await.0,
        "ambiguous",
        "an honest unknown stays unknown"
    );
}

/// Inside a custodian, recovery keeps to its own authorities: another
/// authority's started command is left for a custodian that has its executor
/// (and probe), or for the one-shot `recover`.
#[tokio::test]
async fn a_custodians_recovery_keeps_to_its_own_authorities() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(&app.pool, &["payments"], effects(&sink, false), 10 * SECOND);
    let id = app.create(&token, "k", &refund(1)).await;
    crash_after_start(&app, &c, false).await;

    let elsewhere = recovery(&app, effects(&sink, false)).for_authorities(vec!["agent-7".into()]);
    assert_eq!(
        elsewhere.run_once().await.unwrap(),
        RecoveryReport::default()
    );
    assert_eq!(row(&app, &id).await.0, "effect_started");
    let own = recovery(&app, effects(&sink, false)).for_authorities(vec!["payments".into()]);
    assert_eq!(own.run_once().await.unwrap().ambiguous, 1);
    assert_eq!(row(&app, &id).await.0, "ambiguous");
}

/// The one-shot `command-ledger recover`, as cron runs it after a crash: it
/// expires what is overdue and settles a started command through the
/// catalog's reconcile probe, never re-executing, and says what it did.
#[tokio::test]
async fn the_recover_command_expires_the_overdue_and_settles_the_started_by_the_probe() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(&app.pool, &["payments"], effects(&sink, true), 10 * SECOND);
    let started = app.create(&token, "started", &refund(1)).await;
    crash_after_start(&app, &c, true).await;
    let mut overdue = refund(2);
    overdue["deadline"] = json!((chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339());
    let overdue = app.create(&token, "overdue", &overdue).await;
    sqlx::query(
        "update commands set deadline_at = now() - interval '1 second' where id = $1::uuid",
    )
    .bind(&overdue)
    .execute(&app.pool)
    .await
    .unwrap();

    let dir = std::env::temp_dir().join(format!(
        "command-ledger-recover-{}",
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let catalog = dir.join("ledger.toml");
    std::fs::write(
        &catalog,
        format!(
            "[kinds.refund]\nurl = \"{0}/refunds\"\nreconcile_url = \"{0}/applied/{{key}}\"\n",
            sink.url
        ),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_command-ledger");
    let out = tokio::process::Command::new(bin)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["recover", "--catalog"])
        .arg(&catalog)
        .env("DATABASE_URL", &app.db_url)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("expired 1, adopted 0, resolved applied 1, failed 0, ambiguous 0"),
        "{stdout}"
    );
    assert_eq!(row(&app, &overdue).await.0, "expired");
    assert_eq!(row(&app, &started).await.0, "applied");
    assert_eq!(
        (sink.count("applied"), sink.requests()),
        (1, 1),
        "probed, never re-executed"
    );
    let actors: Vec<String> = sqlx::query_scalar(
        "select actor from command_history where to_state in ('expired', 'applied') order by id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(
        actors.iter().all(|a| a.starts_with("recovery:")),
        "{actors:?}"
    );
    // A second pass finds nothing left to do.
    let again = tokio::process::Command::new(bin)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("recover")
        .env("DATABASE_URL", &app.db_url)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(String::from_utf8_lossy(&again.stdout).starts_with("examined 0,"));
}
