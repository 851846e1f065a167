//! Commands in time and in order of importance: `not_before` (recorded at
//! once, not claimed before its time, cancellable until then) and priority
//! (higher first within an authority, aged so nothing waits forever).

use crate::harness::{TestApp, TestSink, as_role, custodian, problem, refund, refund_effects};
use chrono::{DateTime, Duration as Span, SubsecRound as _, Utc};
use command_ledger::custodian::{Custodian, CustodianConfig, StepReport};
use command_ledger::db::Role;
use command_ledger::db::roles::ServiceRole;
use command_ledger::demo_sink::Mode;
use command_ledger::domain::admission::{KindPolicy, Policies};
use command_ledger::domain::schedule::{PriorityRule, claim_rank};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);

/// `refund` whose commands may ask for priorities up to 50.
fn prioritised() -> Policies {
    let mut policies = Policies::default();
    policies.set(
        "refund",
        KindPolicy {
            priority: PriorityRule::new(Some(0), Some(50)).unwrap(),
            ..KindPolicy::default()
        },
    );
    policies
}

async fn claimed_at(app: &TestApp, id: &str) -> Option<DateTime<Utc>> {
    sqlx::query_scalar(
        "select at from command_history where command_id = $1::uuid and 'prepared' in (to_state, through)",
    )
    .bind(id)
    .fetch_optional(&app.pool)
    .await
    .unwrap()
}

async fn state_of(app: &TestApp, id: &str) -> String {
    sqlx::query_scalar("select state from commands where id = $1::uuid")
        .bind(id)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

fn at(body: &mut Value, field: &str, t: DateTime<Utc>) {
    body[field] = json!(t.to_rfc3339());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_not_before_five_seconds_ahead_is_claimed_within_a_second_after_and_a_cancel_before_wins()
 {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    // A custodian that polls, renews its lease and runs recovery only each
    // 20-30 s: its time comes from the schedule, not from its other clocks.
    let mut config = CustodianConfig::new(vec!["payments".into()]);
    config.poll_interval = 30 * SECOND;
    config.lease_ttl = 60 * SECOND;
    config.heartbeat = 20 * SECOND;
    config.recovery_interval = 30 * SECOND;
    let c = Arc::new(Custodian::new(
        as_role(&app.pool, ServiceRole::Custodian),
        crate::harness::ledger_backend(),
        config,
        refund_effects(&sink.url, 5 * SECOND),
    ));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(Arc::clone(&c).run(async move {
        let _ = stopped.await;
    }));

    // Milliseconds: PostgreSQL keeps microseconds.
    let not_before = (Utc::now() + Span::seconds(5)).trunc_subsecs(3);
    let mut later = refund(1);
    at(&mut later, "not_before", not_before);
    let resp = app.submit(&token, Some("later"), &later).await;
    assert_eq!(resp.status(), 202);
    let view: Value = resp.json().await.unwrap();
    let id = view["id"].as_str().unwrap().to_owned();
    // Recorded pending at once, and shown as scheduled.
    assert_eq!(view["state"], "pending");
    assert_eq!(view["scheduled"], true);
    assert_eq!(view["priority"], 0);
    let shown: DateTime<Utc> = view["not_before"].as_str().unwrap().parse().unwrap();
    assert_eq!(shown, not_before);

    let mut cancelled = refund(2);
    at(&mut cancelled, "not_before", not_before);
    let doomed = app.create(&token, "doomed", &cancelled).await;
    let listed: Value = app
        .get(&token, "/v1/commands?scheduled=true")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["items"].as_array().unwrap().len(), 2, "{listed}");

    // Waiting answers with the command still scheduled.
    let waited: Value = app
        .get(&token, &format!("/v1/commands/{id}?wait=1"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (waited["state"].as_str(), waited["scheduled"].as_bool()),
        (Some("pending"), Some(true))
    );

    let resp = app
        .post(&token, &format!("/v1/commands/{doomed}/cancel"))
        .await;
    assert_eq!(resp.status(), 200);

    tokio::time::sleep(Span::seconds(7).to_std().unwrap()).await;
    let claimed = claimed_at(&app, &id).await.expect("claimed after its time");
    println!(
        "claimed {} ms after its not_before",
        (claimed - not_before).num_milliseconds()
    );
    assert!(
        claimed >= not_before,
        "claimed at {claimed}, before {not_before}"
    );
    assert!(
        claimed - not_before < Span::seconds(1),
        "claimed at {claimed}, {} ms after {not_before}",
        (claimed - not_before).num_milliseconds()
    );
    assert_eq!(state_of(&app, &id).await, "applied");
    assert_eq!(state_of(&app, &doomed).await, "cancelled");
    assert_eq!(claimed_at(&app, &doomed).await, None);
    assert_eq!(sink.requests(), 1, "only the command not cancelled ran");
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_deadline_not_after_not_before_and_a_priority_out_of_bounds_are_refused_and_record_nothing()
 {
    let app = TestApp::spawn_with(prioritised()).await;
    let token = app.token("dev", Role::Device).await;
    let now = Utc::now() + Span::minutes(5);

    let mut body = refund(1);
    at(&mut body, "not_before", now);
    at(&mut body, "deadline", now);
    let p = problem(
        app.submit(&token, Some("a"), &body).await,
        400,
        "/problems/invalid-body",
    )
    .await;
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("not after not_before"),
        "{p}"
    );

    let mut body = refund(1);
    body["priority"] = json!(51);
    let p = problem(
        app.submit(&token, Some("b"), &body).await,
        400,
        "/problems/invalid-body",
    )
    .await;
    assert!(
        p["detail"].as_str().unwrap().contains("max_priority"),
        "{p}"
    );

    let mut body = refund(1);
    body["priority"] = json!(-101);
    problem(
        app.submit(&token, Some("c"), &body).await,
        400,
        "/problems/invalid-body",
    )
    .await;

    let mut body = refund(1);
    body["priority"] = json!("high");
    problem(
        app.submit(&token, Some("d"), &body).await,
        400,
        "/problems/invalid-body",
    )
    .await;

    // A batch item is refused alone, as it would be on its own.
    let mut bad = refund(3);
    bad["idempotency_key"] = json!("e");
    bad["priority"] = json!(99);
    let resp = app
        .client
        .post(app.url("/v1/commands/batch"))
        .bearer_auth(&token)
        .json(&json!({"items": [bad]}))
        .send()
        .await
        .unwrap();
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["items"][0]["status"], 400, "{answer}");

    assert_eq!(app.command_count().await, 0);
}

#[tokio::test]
async fn higher_priorities_are_claimed_first_and_equal_ones_in_order_of_arrival() {
    let app = TestApp::spawn_with(prioritised()).await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let mut ids = Vec::new();
    for (n, priority) in [0, 10, 0, 50, 10, -5].into_iter().enumerate() {
        let mut body = refund(n as i64 + 1);
        body["priority"] = json!(priority);
        ids.push(app.create(&token, &format!("p{n}"), &body).await);
    }
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    );
    c.heartbeat().await.unwrap();
    let mut order = Vec::new();
    // Three claims of two: each takes the best two left.
    for _ in 0..3 {
        let mut report = StepReport::default();
        let batch = c.claim_and_start(2, &mut report).await.unwrap();
        let mut batch: Vec<String> = batch
            .iter()
            .map(|s| s.call.command_id.to_string())
            .collect();
        batch.sort_by_key(|id| ids.iter().position(|x| x == id));
        order.push(batch);
    }
    let want = |n: &[usize]| n.iter().map(|&i| ids[i].clone()).collect::<Vec<_>>();
    assert_eq!(order, vec![want(&[1, 3]), want(&[0, 4]), want(&[2, 5])]);
}

/// A priority-10 refund, recorded through the API.
async fn high(app: &TestApp, token: &str, n: i64) -> String {
    let mut body = refund(100 + n);
    body["priority"] = json!(10);
    app.create(token, &format!("high-{n}"), &body).await
}

#[tokio::test]
async fn a_steady_stream_of_high_priorities_does_not_hold_a_low_one_back_past_its_gap() {
    let app = TestApp::spawn_with(prioritised()).await;
    let token = app.token("dev", Role::Device).await;
    let sink = TestSink::start(Mode::Ok).await;
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects(&sink.url, 5 * SECOND),
        10 * SECOND,
    );
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();

    // A priority-0 command recorded just before is overtaken by priority 10.
    let fresh = app.create(&token, "low-fresh", &refund(1)).await;
    let first_high = high(&app, &token, 1).await;
    let got = c.claim_and_start(1, &mut report).await.unwrap();
    assert_eq!(got[0].call.command_id.to_string(), first_high);

    // One recorded 101 s ago has waited past the gap (10 levels x 10 s): it
    // goes before every priority-10 command that keeps arriving. (Recorded
    // with SQL, the only way to have been recorded in the past.)
    let waited = crate::harness::recorded_101_s_ago(&app.pool, &fresh, "low-waited").await;
    for n in 2..7 {
        high(&app, &token, n).await;
    }
    let got = c.claim_and_start(1, &mut report).await.unwrap();
    assert_eq!(
        got[0].call.command_id.to_string(),
        waited,
        "the one that waited past the gap"
    );
    // The fresh one still waits behind the stream's five.
    let got = c.claim_and_start(5, &mut report).await.unwrap();
    assert!(got.iter().all(|s| s.call.command_id.to_string() != fresh));
    let got = c.claim_and_start(1, &mut report).await.unwrap();
    assert_eq!(got[0].call.command_id.to_string(), fresh);
}

#[tokio::test]
async fn the_database_ranks_as_the_domain_does() {
    let app = TestApp::spawn().await;
    let base: DateTime<Utc> = "2026-12-03T10:00:00.123456Z".parse().unwrap();
    for (created, not_before, priority) in [
        (base, None, 0_i16),
        (base, Some(base + Span::milliseconds(1500)), 0),
        (base, Some(base - Span::seconds(30)), 7),
        (base, None, 100),
        (base, None, -100),
        (
            base + Span::microseconds(999),
            Some(base + Span::days(400)),
            -3,
        ),
    ] {
        let db: i64 = sqlx::query_scalar("select ledger_claim_rank($1, $2, $3)")
            .bind(created)
            .bind(not_before)
            .bind(priority)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        assert_eq!(
            db,
            claim_rank(created, not_before, priority),
            "{created} {not_before:?} {priority}"
        );
    }
}

#[tokio::test]
async fn not_before_and_priority_are_fixed_once_recorded() {
    let app = TestApp::spawn_with(prioritised()).await;
    let token = app.token("dev", Role::Device).await;
    let mut body = refund(1);
    body["priority"] = json!(5);
    at(&mut body, "not_before", Utc::now() + Span::hours(1));
    let id = app.create(&token, "fixed", &body).await;
    for change in [
        "update commands set priority = 50 where id = $1::uuid",
        "update commands set not_before = now() where id = $1::uuid",
        "update commands set not_before = null where id = $1::uuid",
    ] {
        let e = sqlx::query(change)
            .bind(&id)
            .execute(&app.pool)
            .await
            .expect_err(change);
        assert_eq!(
            e.as_database_error().and_then(|d| d.code()).as_deref(),
            Some("CL003"),
            "{change}: {e}"
        );
    }
    // What the row and its queue entry say.
    let (priority, rank_matches): (i16, bool) = sqlx::query_as(
        "select c.priority, q.rank = ledger_claim_rank(c.created_at, c.not_before, c.priority)
           and q.ready_at = c.not_before
         from commands c join command_queue q on q.authority_id = c.authority_id and q.id = c.id
         where c.id = $1::uuid",
    )
    .bind(&id)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((priority, rank_matches), (5, true));
}

/// A `not_before` (or `deadline`) that is no instant is refused naming the
/// field, alone and as a batch item; a key sent again with another schedule
/// is a replay of the first command and keeps the schedule it was recorded
/// with (the schedule is not part of the request's digest: the scheduling
/// page says so).
#[tokio::test]
async fn a_malformed_instant_names_its_field_and_a_new_schedule_under_an_old_key_replays() {
    let app = TestApp::spawn_with(prioritised()).await;
    let token = app.token("kiosk", Role::Device).await;
    for (field, value) in [
        ("not_before", "tomorrow"),
        ("deadline", "2026-13-01T00:00:00Z"),
    ] {
        let mut body = refund(1);
        body[field] = json!(value);
        let p = problem(
            app.submit(&token, Some("bad-time"), &body).await,
            400,
            "/problems/invalid-body",
        )
        .await;
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains(field) && detail.contains("RFC 3339"),
            "{detail}"
        );
        let mut item = body.clone();
        item["idempotency_key"] = json!("bad-time-item");
        let resp = app
            .client
            .post(app.url("/v1/commands/batch"))
            .bearer_auth(&token)
            .json(&json!({"items": [item]}))
            .send()
            .await
            .unwrap();
        let answer: Value = resp.json().await.unwrap();
        let item = &answer["items"][0];
        assert_eq!(item["status"], 400, "{answer}");
        assert!(
            item["problem"]["detail"].as_str().unwrap().contains(field),
            "{answer}"
        );
    }
    assert_eq!(app.command_count().await, 0);

    let at = (Utc::now() + Span::hours(1)).round_subsecs(0);
    let mut first = refund(2);
    first["not_before"] = json!(at.to_rfc3339());
    first["priority"] = json!(5);
    let resp = app.submit(&token, Some("sched-1"), &first).await;
    assert_eq!(resp.status(), 202);
    let mut again = first.clone();
    again["not_before"] = json!((at + Span::hours(1)).to_rfc3339());
    again["priority"] = json!(9);
    let resp = app.submit(&token, Some("sched-1"), &again).await;
    assert_eq!(resp.status(), 200, "a replay");
    let shown: Value = resp.json().await.unwrap();
    assert_eq!(shown["disposition"], "replay");
    assert_eq!(shown["priority"], 5);
    let kept: DateTime<Utc> = shown["not_before"].as_str().unwrap().parse().unwrap();
    assert_eq!(kept, at);
    assert_eq!(app.command_count().await, 1);
}
