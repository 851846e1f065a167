//! Outcome webhooks (docs/WEBHOOKS.md): an endpoint registered over the
//! API receives each terminal outcome of its scope's commands, signed,
//! retried with backoff until a 2xx or the event's expiry, every attempt
//! recorded; an event is written in the outcome's own transaction, so a
//! deliverer that dies (or none running) loses nothing; the URL rule keeps
//! the ledger from being turned against its own network.
//!
//! Receivers here listen on 127.0.0.1, so the API and the deliverers run
//! with private targets allowed, except where that rule is what is tested.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use command_ledger::db::Role;
use command_ledger::db::roles::ServiceRole;
use command_ledger::domain::admission::Policies;
use command_ledger::domain::webhook::{self, Backoff};
use command_ledger::telemetry::LogFormat;
use command_ledger::webhooks::{Deliverer, DelivererConfig};
use serde_json::{Value, json};
use sqlx::{PgPool, Row as _};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::harness::{TestApp, as_role, problem, refund};
use crate::telemetry::Captured;

/// What a receiver answers to one request.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Status(u16),
    /// Never answers (the deliverer's timeout ends the attempt).
    Hang,
}

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Received {
    event_id: String,
    attempt: String,
    signature: String,
    /// The Standard Webhooks headers: webhook-id, -timestamp, -signature.
    standard: (String, String, String),
    content_type: String,
    traceparent: String,
    body: Vec<u8>,
    at: Instant,
}

type Shared = (Arc<Mutex<Vec<Received>>>, Arc<Mutex<VecDeque<Answer>>>);

/// A webhook receiver on loopback answering by a script (then 200).
#[derive(Debug)]
struct Receiver {
    url: String,
    received: Arc<Mutex<Vec<Received>>>,
}

async fn receive(
    State((received, script)): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    received.lock().unwrap().push(Received {
        event_id: header("ledger-event-id"),
        attempt: header("ledger-attempt"),
        signature: header("ledger-signature"),
        standard: (
            header("webhook-id"),
            header("webhook-timestamp"),
            header("webhook-signature"),
        ),
        content_type: header("content-type"),
        traceparent: header("traceparent"),
        body: body.to_vec(),
        at: Instant::now(),
    });
    let answer = script.lock().unwrap().pop_front();
    match answer.unwrap_or(Answer::Status(200)) {
        Answer::Status(s) => StatusCode::from_u16(s).unwrap(),
        Answer::Hang => std::future::pending().await,
    }
}

impl Receiver {
    async fn start(script: &[Answer]) -> Receiver {
        let received = Arc::new(Mutex::new(Vec::new()));
        let shared: Shared = (
            Arc::clone(&received),
            Arc::new(Mutex::new(script.iter().copied().collect())),
        );
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { url, received }
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

/// Settings that make a test take seconds, not hours.
fn quick() -> DelivererConfig {
    DelivererConfig {
        allow_private: true,
        timeout: Duration::from_millis(300),
        expiry: Duration::from_secs(30),
        backoff: Backoff {
            first: Duration::from_millis(150),
            cap: Duration::from_millis(600),
        },
        poll_interval: Duration::from_millis(25),
        lease_margin: Duration::ZERO,
        ..DelivererConfig::default()
    }
}

/// The API with private targets allowed (receivers are on loopback).
async fn app() -> TestApp {
    TestApp::spawn_configured(Policies::default(), |s| s.webhooks = quick()).await
}

/// A deliverer acting as the API role (as `serve` runs it).
fn deliverer(app: &TestApp, config: DelivererConfig) -> Deliverer {
    Deliverer::new(as_role(&app.pool, ServiceRole::Api), config)
}

/// Registers `url` for `token`'s fleet; returns the answer.
async fn register(app: &TestApp, token: &str, body: &Value) -> reqwest::Response {
    app.client
        .post(app.url("/v1/webhooks"))
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Registers `url`, asserting 201; returns (endpoint id, secret).
async fn registered(app: &TestApp, token: &str, url: &str) -> (String, String) {
    let resp = register(app, token, &json!({"url": url})).await;
    assert_eq!(resp.status(), 201);
    let body: Value = resp.json().await.unwrap();
    (
        body["id"].as_str().unwrap().to_owned(),
        body["secret"].as_str().unwrap().to_owned(),
    )
}

/// Records a refund and cancels it: a terminal outcome of `token`'s scope.
async fn cancelled(app: &TestApp, token: &str) -> String {
    let id = app
        .create(token, &Uuid::now_v7().to_string(), &refund(100))
        .await;
    let resp = app.post(token, &format!("/v1/commands/{id}/cancel")).await;
    assert_eq!(resp.status(), 200);
    id
}

/// The events of a command: (id, state, attempts, last_error).
async fn events_of(pool: &PgPool, command: &str) -> Vec<(Uuid, String, i32, Option<String>)> {
    sqlx::query_as(
        "select id, state, attempts, last_error from webhook_events where command_id = $1::uuid order by id",
    )
    .bind(command)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The attempts at an event: (n, status, error).
async fn attempts_of(pool: &PgPool, event: Uuid) -> Vec<(i32, Option<i32>, Option<String>)> {
    sqlx::query_as("select n, status, error from webhook_attempts where event_id = $1 order by n")
        .bind(event)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// Runs the deliverer turn after turn until the command's only event is in
/// `state` (or fails after `within`). When each turn started, read just
/// before it (so at or before the deliverer's own clock for the turn).
async fn deliver_until(
    d: &Deliverer,
    pool: &PgPool,
    command: &str,
    state: &str,
    within: Duration,
) -> Vec<chrono::DateTime<chrono::Utc>> {
    let until = Instant::now() + within;
    let mut turns = Vec::new();
    loop {
        turns.push(chrono::Utc::now());
        d.run_once().await.unwrap();
        let events = events_of(pool, command).await;
        if events.len() == 1 && events[0].1 == state {
            return turns;
        }
        assert!(
            Instant::now() < until,
            "the event is not {state} after {within:?}: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A deliverer with `config` takes the event up and dies mid-send (its
/// task is dropped, as a process killed there would be, once `receiver` got
/// the request): nothing of the attempt is recorded.
async fn dies_mid_send(app: &TestApp, receiver: &Receiver, config: DelivererConfig) {
    let dying = tokio::spawn(deliverer(app, config).run(std::future::pending()));
    let until = Instant::now() + Duration::from_secs(10);
    while receiver.received().is_empty() {
        assert!(Instant::now() < until, "the first deliverer sent nothing");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    dying.abort();
    let _ = dying.await;
}

#[tokio::test]
async fn a_receiver_that_fails_twice_gets_three_attempts_and_one_delivery() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let receiver = Receiver::start(&[Answer::Status(500), Answer::Status(500)]).await;
    registered(&app, &token, &receiver.url).await;
    let command = cancelled(&app, &token).await;
    let d = deliverer(&app, quick());
    deliver_until(
        &d,
        &app.pool,
        &command,
        "delivered",
        Duration::from_secs(20),
    )
    .await;

    let got = receiver.received();
    assert_eq!(got.len(), 3, "three requests: {got:?}");
    let ids: Vec<&str> = got.iter().map(|r| r.event_id.as_str()).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "one event id: {ids:?}");
    let numbers: Vec<&str> = got.iter().map(|r| r.attempt.as_str()).collect();
    assert_eq!(numbers, ["1", "2", "3"]);
    // The backoff: 150 ms after the first failure, 300 ms after the second.
    assert!(
        got[1].at - got[0].at >= Duration::from_millis(150),
        "{got:?}"
    );
    assert!(
        got[2].at - got[1].at >= Duration::from_millis(300),
        "{got:?}"
    );
    let events = events_of(&app.pool, &command).await;
    assert_eq!(events[0].1, "delivered");
    assert_eq!(events[0].0.to_string(), ids[0]);
    assert_eq!(
        attempts_of(&app.pool, events[0].0).await,
        [
            (1, Some(500), Some("the receiver answered 500".to_owned())),
            (2, Some(500), Some("the receiver answered 500".to_owned())),
            (3, Some(200), None),
        ]
    );
    // Delivered is final: another turn sends nothing.
    d.run_once().await.unwrap();
    assert_eq!(receiver.received().len(), 3);
}

#[tokio::test]
async fn a_receiver_that_never_answers_is_retried_with_backoff_until_the_event_expires() {
    let logs = Captured::default();
    let _logging = tracing::dispatcher::set_default(&logs.subscriber(LogFormat::Text));
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let receiver = Receiver::start(&[Answer::Hang; 50]).await;
    registered(&app, &token, &receiver.url).await;
    let command = cancelled(&app, &token).await;
    let config = DelivererConfig {
        timeout: Duration::from_millis(200),
        // Room for at least three attempts on a slow machine.
        expiry: Duration::from_millis(3000),
        backoff: Backoff {
            first: Duration::from_millis(100),
            cap: Duration::from_millis(400),
        },
        ..quick()
    };
    let d = deliverer(&app, config);
    let turns = deliver_until(&d, &app.pool, &command, "expired", Duration::from_secs(30)).await;

    let events = events_of(&app.pool, &command).await;
    let (event, _, started, last_error) = events[0].clone();
    let attempts = attempts_of(&app.pool, event).await;
    assert!(attempts.len() >= 3, "retried: {attempts:?}");
    assert_eq!(attempts.len(), usize::try_from(started).unwrap());
    for (n, status, error) in &attempts {
        assert_eq!(*status, None, "attempt {n}");
        assert_eq!(
            error.as_deref(),
            Some("no answer within 200 ms"),
            "attempt {n}"
        );
    }
    assert_eq!(last_error.as_deref(), Some("no answer within 200 ms"));
    // Each wait at least the backoff's (100 ms doubling to 400 ms), after
    // the attempt's own 200 ms timeout.
    let got = receiver.received();
    assert_eq!(got.len(), attempts.len());
    for (i, pair) in got.windows(2).enumerate() {
        let waited = pair[1].at - pair[0].at;
        let backoff = Duration::from_millis((100u64 << i.min(2)).min(400));
        // The timeout ran from just before the request arrived.
        assert!(
            waited >= backoff + Duration::from_millis(150),
            "attempt {} came {waited:?} after the one before",
            i + 2
        );
    }
    // When the event expires, and when its last attempt was sent.
    let (expires_at, last_at): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as(
            "select e.expires_at, max(a.at) from webhook_events e \
             join webhook_attempts a on a.authority_id = e.authority_id and a.event_id = e.id \
             where e.id = $1 group by e.expires_at",
        )
        .bind(event)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    // No attempt taken up after the expiry: the turn that made the last one
    // (turns run one after the other, each waits for its sends) started
    // before it. The send itself starts a few statements later, which may
    // fall after the expiry on a loaded machine.
    let its_turn = turns.iter().rev().find(|t| **t <= last_at).unwrap();
    assert!(
        *its_turn < expires_at,
        "the last attempt (at {last_at}) was taken up by a turn started at {its_turn}, \
         at or after the expiry ({expires_at})"
    );
    // The log says each failure, and that the event expired.
    let lines = logs.lines();
    let retried = lines
        .iter()
        .filter(|l| {
            l.contains("webhook attempt failed; trying again") && l.contains(&event.to_string())
        })
        .count();
    // The last attempt either found no time left for another (expired
    // there), or scheduled one that came due after the expiry (expired by
    // the next turn): which one depends on how fast the turns ran.
    let expired_after_the_last = lines.iter().any(|l| {
        l.contains("the event expired: no more attempts") && l.contains(&event.to_string())
    });
    let expired_before_the_next = lines.iter().any(|l| {
        l.contains("its expiry passed before its next attempt") && l.contains(&event.to_string())
    });
    assert!(
        expired_after_the_last != expired_before_the_next,
        "{lines:#?}"
    );
    assert_eq!(
        retried,
        attempts.len() - usize::from(expired_after_the_last),
        "{lines:#?}"
    );
    // Expired is final.
    d.run_once().await.unwrap();
    assert_eq!(receiver.received().len(), attempts.len());
}

#[tokio::test]
async fn a_retry_that_comes_due_after_the_expiry_expires_the_event_keeping_the_last_error() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let receiver = Receiver::start(&[Answer::Status(503); 5]).await;
    registered(&app, &token, &receiver.url).await;
    let command = cancelled(&app, &token).await;
    // The retry (300 ms after the failure) is due before the expiry (3 s
    // after the event was taken up: room for a slow attempt on a loaded
    // cluster), but no turn runs until both have passed.
    let config = DelivererConfig {
        expiry: Duration::from_secs(3),
        backoff: Backoff {
            first: Duration::from_millis(300),
            cap: Duration::from_millis(300),
        },
        ..quick()
    };
    let d = deliverer(&app, config);
    let first = d.run_once().await.unwrap();
    assert_eq!((first.attempted, first.retried), (1, 1), "{first:?}");
    // The expiry was set from the turn's start, before it returned.
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let second = d.run_once().await.unwrap();
    assert_eq!((second.attempted, second.expired), (0, 1), "{second:?}");

    let events = events_of(&app.pool, &command).await;
    let (event, state, started, last_error) = events[0].clone();
    assert_eq!((state.as_str(), started), ("expired", 1));
    // The event says what its last attempt met, not that a deliverer died.
    assert_eq!(last_error.as_deref(), Some("the receiver answered 503"));
    assert_eq!(
        attempts_of(&app.pool, event).await,
        [(1, Some(503), Some("the receiver answered 503".to_owned()))]
    );
    assert_eq!(receiver.received().len(), 1);
}

#[tokio::test]
async fn an_event_whose_deliverer_died_holding_it_past_its_expiry_expires_saying_so() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let receiver = Receiver::start(&[Answer::Hang]).await;
    registered(&app, &token, &receiver.url).await;
    let command = cancelled(&app, &token).await;
    // Held for 2 s (the dying deliverer's timeout); expires 500 ms after it
    // was taken up.
    let config = DelivererConfig {
        timeout: Duration::from_secs(2),
        expiry: Duration::from_millis(500),
        ..quick()
    };
    dies_mid_send(&app, &receiver, config).await;

    let restarted = deliverer(&app, quick());
    deliver_until(
        &restarted,
        &app.pool,
        &command,
        "expired",
        Duration::from_secs(10),
    )
    .await;
    let events = events_of(&app.pool, &command).await;
    let (event, _, started, last_error) = events[0].clone();
    assert_eq!(started, 1);
    assert_eq!(
        last_error.as_deref(),
        Some("expired before another attempt (its deliverer stopped while it was in flight)")
    );
    assert!(attempts_of(&app.pool, event).await.is_empty());
    assert_eq!(receiver.received().len(), 1, "not sent again");
}

#[tokio::test]
async fn the_signature_verifies_with_the_secret_over_the_body_as_sent() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let receiver = Receiver::start(&[]).await;
    let (_, secret) = registered(&app, &token, &receiver.url).await;
    assert!(
        secret.starts_with("whsec_") && secret.len() == 70,
        "{secret}"
    );
    let command = cancelled(&app, &token).await;
    deliver_until(
        &deliverer(&app, quick()),
        &app.pool,
        &command,
        "delivered",
        Duration::from_secs(10),
    )
    .await;

    let got = receiver.received().remove(0);
    assert_eq!(got.content_type, "application/json");
    let now = chrono::Utc::now().timestamp();
    assert_eq!(
        webhook::verify(
            &secret,
            &got.signature,
            &got.body,
            now,
            webhook::DEFAULT_TOLERANCE
        ),
        Ok(())
    );
    // The receiver's check of docs/WEBHOOKS.md, by hand: the header's t,
    // then HMAC-SHA256 under the whole secret of "t.body".
    let (t, v1) = got
        .signature
        .split_once(',')
        .map(|(t, v)| (&t[2..], &v[3..]))
        .unwrap();
    {
        use hmac::{KeyInit as _, Mac as _};
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(t.as_bytes());
        mac.update(b".");
        mac.update(&got.body);
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            v1,
            "v1 is HMAC-SHA256 over t.body"
        );
    }
    assert!((now - t.parse::<i64>().unwrap()).abs() < 60);
    // Another secret, or one changed byte, does not verify.
    assert_eq!(
        webhook::verify(
            "whsec_other",
            &got.signature,
            &got.body,
            now,
            webhook::DEFAULT_TOLERANCE
        ),
        Err(webhook::VerifyError::Mismatch)
    );
    let mut changed = got.body.clone();
    changed[0] ^= 1;
    assert_eq!(
        webhook::verify(
            &secret,
            &got.signature,
            &changed,
            now,
            webhook::DEFAULT_TOLERANCE
        ),
        Err(webhook::VerifyError::Mismatch)
    );
    // The Standard Webhooks headers: the event's id, the attempt's time (the
    // same as Ledger-Signature's), and v1 over "id.timestamp.body" under the
    // base64 key after whsec_ (scripts/webhooks-test checks a delivery with
    // the specification's own libraries).
    let (id, timestamp, signature) = &got.standard;
    assert_eq!(id, &got.event_id);
    assert_eq!(timestamp, t);
    assert!(signature.starts_with("v1,"), "{signature}");
    let standard = |body: &[u8], now: i64| {
        webhook::standard::verify(
            &secret,
            id,
            timestamp,
            signature,
            body,
            now,
            webhook::DEFAULT_TOLERANCE,
        )
    };
    assert_eq!(standard(&got.body, now), Ok(()));
    assert_eq!(standard(&changed, now), Err(webhook::VerifyError::Mismatch));
    assert!(matches!(
        standard(&got.body, now + 3600),
        Err(webhook::VerifyError::OutsideTolerance { .. })
    ));
    // What is sent: the outcome, the event id, and the terminal history
    // entry's hash.
    let body: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(body["event_id"], got.event_id.as_str());
    assert_eq!(body["command_id"], command.as_str());
    assert_eq!(body["state"], "cancelled");
    assert_eq!(body["kind"], "refund");
    assert_eq!(body["authority"], "payments");
    let hash: Vec<u8> = sqlx::query_scalar(
        "select hash from command_history where command_id = $1::uuid and to_state = 'cancelled'",
    )
    .bind(&command)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(body["history_hash"], hex::encode(hash));
    // Its times are written as every other time of the API: UTC, with Z.
    for field in ["finished_at", "created_at"] {
        let t = body[field].as_str().unwrap();
        assert!(t.ends_with('Z'), "{field}: {t}");
        t.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    }
}

#[tokio::test]
async fn an_outcome_whose_deliverer_died_before_sending_is_delivered_after_a_restart() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    // The first request is never answered: its deliverer dies meanwhile.
    let receiver = Receiver::start(&[Answer::Hang]).await;
    registered(&app, &token, &receiver.url).await;
    // No deliverer runs: the outcome commits, and its event with it.
    let command = cancelled(&app, &token).await;
    let events = events_of(&app.pool, &command).await;
    assert_eq!(events.len(), 1, "written with the outcome");
    assert_eq!((events[0].1.as_str(), events[0].2), ("pending", 0));

    // A deliverer takes it up and dies mid-send (its task is dropped, as a
    // process killed there would be): nothing of the attempt is recorded.
    let config = DelivererConfig {
        timeout: Duration::from_secs(2),
        ..quick()
    };
    dies_mid_send(&app, &receiver, config).await;
    let died_at = Instant::now();
    let events = events_of(&app.pool, &command).await;
    assert_eq!((events[0].1.as_str(), events[0].2), ("pending", 1));
    assert!(attempts_of(&app.pool, events[0].0).await.is_empty());

    // A new deliverer leaves it alone while the dead one's lease (its
    // timeout) runs, then sends it.
    let restarted = deliverer(&app, quick());
    restarted.run_once().await.unwrap();
    assert_eq!(receiver.received().len(), 1, "still leased to the dead one");
    deliver_until(
        &restarted,
        &app.pool,
        &command,
        "delivered",
        Duration::from_secs(10),
    )
    .await;
    assert!(died_at.elapsed() >= Duration::from_millis(1500));
    let got = receiver.received();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].event_id, got[1].event_id);
    assert_eq!(got[0].body, got[1].body, "the same event, byte for byte");
    assert_eq!(
        attempts_of(&app.pool, events[0].0).await,
        [(2, Some(200), None)]
    );
}

#[tokio::test]
async fn a_url_to_loopback_is_refused_unless_private_targets_are_allowed() {
    let receiver = Receiver::start(&[]).await;
    let port = receiver
        .url
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let strict = TestApp::spawn().await;
    let token = strict.token("kiosk", Role::Device).await;
    for url in [
        receiver.url.clone(),
        format!("http://localhost:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://2130706433:{port}/hook"),
        "http://10.0.0.7/hook".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let resp = register(&strict, &token, &json!({"url": url})).await;
        let p = problem(resp, 400, "/problems/invalid-body").await;
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains("not sent into the ledger's own network"),
            "{url}: {detail}"
        );
    }
    let stored: i64 = sqlx::query_scalar("select count(*) from webhook_endpoints")
        .fetch_one(&strict.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0, "nothing registered");

    // Allowed by the operator: registered, and delivered.
    let open = app().await;
    let token = open.token("kiosk", Role::Device).await;
    registered(&open, &token, &receiver.url).await;
    let command = cancelled(&open, &token).await;
    // A deliverer that does not allow private targets refuses at send time
    // too (a name may resolve elsewhere by then): nothing reaches the
    // receiver, and the attempt says why.
    let strict_deliverer = deliverer(
        &open,
        DelivererConfig {
            allow_private: false,
            ..quick()
        },
    );
    strict_deliverer.run_once().await.unwrap();
    assert!(receiver.received().is_empty());
    let events = events_of(&open.pool, &command).await;
    let attempts = attempts_of(&open.pool, events[0].0).await;
    assert_eq!(attempts.len(), 1);
    let error = attempts[0].2.as_deref().unwrap();
    assert!(
        error.starts_with("refused by the URL rule: 127.0.0.1 is a loopback address"),
        "{error}"
    );
    deliver_until(
        &deliverer(&open, quick()),
        &open.pool,
        &command,
        "delivered",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(receiver.received().len(), 1);
}

#[tokio::test]
async fn an_event_keeps_its_id_across_retries_and_redeliveries() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    let receiver = Receiver::start(&[Answer::Status(503)]).await;
    let other = Receiver::start(&[]).await;
    registered(&app, &token, &receiver.url).await;
    registered(&app, &token, &other.url).await;
    let command = cancelled(&app, &token).await;
    let d = deliverer(&app, quick());
    let until = Instant::now() + Duration::from_secs(10);
    while events_of(&app.pool, &command)
        .await
        .iter()
        .any(|e| e.1 != "delivered")
    {
        assert!(Instant::now() < until);
        d.run_once().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // One event per endpoint, each with its own id.
    let events = events_of(&app.pool, &command).await;
    assert_eq!(events.len(), 2);
    assert_ne!(events[0].0, events[1].0);
    let mine = receiver.received()[0].event_id.clone();

    // A device may not redeliver; an operator may, and the receiver gets
    // the same id again (its key for dropping the copy).
    let path = format!("/v1/webhooks/events/{mine}/redeliver");
    problem(app.post(&token, &path).await, 403, "/problems/forbidden").await;
    let resp = app.post(&operator, &path).await;
    assert_eq!(resp.status(), 200);
    let redelivered: Value = resp.json().await.unwrap();
    assert_eq!(redelivered["state"], "pending");
    assert_eq!(redelivered["attempts"].as_array().unwrap().len(), 2);
    let until = Instant::now() + Duration::from_secs(10);
    while receiver.received().len() < 3 {
        assert!(Instant::now() < until);
        d.run_once().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = receiver.received();
    assert!(got.iter().all(|r| r.event_id == mine), "{got:?}");
    assert!(got.iter().all(|r| r.body == got[0].body));
    assert_eq!(
        other.received().len(),
        1,
        "the other endpoint's event was not redelivered"
    );
    problem(
        app.post(
            &operator,
            &format!("/v1/webhooks/events/{}/redeliver", Uuid::now_v7()),
        )
        .await,
        404,
        "/problems/not-found",
    )
    .await;

    // Disabled, the endpoint is sent nothing more: a redelivery of its
    // event expires at once, saying why.
    let endpoint: Uuid =
        sqlx::query_scalar("select endpoint_id from webhook_events where id = $1::uuid")
            .bind(&mine)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let resp = app
        .client
        .delete(app.url(&format!("/v1/webhooks/{endpoint}")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = app.post(&operator, &path).await;
    assert_eq!(resp.status(), 200);
    let redelivered: Value = resp.json().await.unwrap();
    assert_eq!(redelivered["state"], "expired", "{redelivered}");
    assert_eq!(redelivered["last_error"], "the endpoint was disabled");
    let before = receiver.received().len();
    d.run_once().await.unwrap();
    assert_eq!(receiver.received().len(), before, "nothing sent");
}

#[tokio::test]
async fn only_terminal_outcomes_of_the_scope_kinds_and_states_asked_for_become_events() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let stranger = app.token("stranger", Role::Device).await;
    let receiver = Receiver::start(&[]).await;
    let only_failed = register(
        &app,
        &token,
        &json!({"url": receiver.url, "states": ["failed", "applied"]}),
    )
    .await;
    assert_eq!(only_failed.status(), 201);
    let only_steer = register(
        &app,
        &token,
        &json!({"url": receiver.url, "kinds": ["steer"]}),
    )
    .await;
    assert_eq!(only_steer.status(), 201);
    let everything = register(&app, &token, &json!({"url": receiver.url})).await;
    let everything: Value = everything.json().await.unwrap();
    // A pending command is no outcome; a cancelled refund is one, of the
    // endpoint that asks for every kind and state alone.
    let pending = app.create(&token, "pending-1", &refund(1)).await;
    assert!(events_of(&app.pool, &pending).await.is_empty());
    let command = cancelled(&app, &token).await;
    let events: Vec<String> = sqlx::query_scalar(
        "select endpoint_id::text from webhook_events where command_id = $1::uuid",
    )
    .bind(&command)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(events, [everything["id"].as_str().unwrap()]);
    // Another principal's (another fleet's) outcome is not this scope's.
    let theirs = cancelled(&app, &stranger).await;
    assert!(events_of(&app.pool, &theirs).await.is_empty());
}

#[tokio::test]
async fn an_applied_outcome_recorded_by_a_custodian_is_pushed_with_its_result() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let receiver = Receiver::start(&[]).await;
    let (_, secret) = registered(&app, &token, &receiver.url).await;
    let sink = crate::harness::TestSink::start(command_ledger::demo_sink::Mode::Ok).await;
    let command = app.create(&token, "applied-1", &refund(1200)).await;
    let c = crate::harness::custodian(
        &app.pool,
        &["payments"],
        crate::harness::refund_effects(&sink.url, Duration::from_secs(5)),
        Duration::from_secs(10),
    );
    assert_eq!(c.run_once().await.unwrap().applied, 1);
    deliver_until(
        &deliverer(&app, quick()),
        &app.pool,
        &command,
        "delivered",
        Duration::from_secs(10),
    )
    .await;
    let got = receiver.received().remove(0);
    let now = chrono::Utc::now().timestamp();
    assert_eq!(
        webhook::verify(
            &secret,
            &got.signature,
            &got.body,
            now,
            webhook::DEFAULT_TOLERANCE
        ),
        Ok(())
    );
    let body: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(body["state"], "applied");
    assert_eq!(body["key"], "applied-1");
    assert!(body["result"].is_object(), "{body}");
    let row = sqlx::query(
        "select h.hash, c.result from command_history h \
         join commands c on c.authority_id = h.authority_id and c.id = h.command_id \
         where h.command_id = $1::uuid and h.to_state = 'applied'",
    )
    .bind(&command)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        body["history_hash"],
        hex::encode(row.get::<Vec<u8>, _>("hash"))
    );
    assert_eq!(body["result"], row.get::<Value, _>("result"));
}

/// A command submitted with a W3C trace context has its outcome delivered
/// with it (`traceparent`, `tracestate`): the receiver's work joins the
/// caller's trace. One submitted without has none.
#[tokio::test]
async fn an_outcome_is_delivered_in_the_trace_its_command_was_submitted_with() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let receiver = Receiver::start(&[]).await;
    registered(&app, &token, &receiver.url).await;
    let traced = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let resp = app
        .client
        .post(app.url("/v1/commands"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "traced-hook-1")
        .header("traceparent", traced)
        .json(&refund(100))
        .send()
        .await
        .unwrap();
    let command = resp.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = app
        .post(&token, &format!("/v1/commands/{command}/cancel"))
        .await;
    assert_eq!(resp.status(), 200);
    let untraced = cancelled(&app, &token).await;
    let d = deliverer(&app, quick());
    deliver_until(
        &d,
        &app.pool,
        &command,
        "delivered",
        Duration::from_secs(10),
    )
    .await;
    deliver_until(
        &d,
        &app.pool,
        &untraced,
        "delivered",
        Duration::from_secs(10),
    )
    .await;
    let got = receiver.received();
    let of = |id: &str| {
        got.iter()
            .find(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["command_id"] == id)
            .unwrap_or_else(|| panic!("a delivery of {id}"))
            .traceparent
            .clone()
    };
    assert_eq!(of(&command), traced);
    assert_eq!(of(&untraced), "");
}

#[tokio::test]
async fn bad_registrations_are_refused_and_change_nothing() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    for (body, why) in [
        (json!({}), "missing field `url`"),
        (
            json!({"url": "http://127.0.0.1:9/", "colour": "red"}),
            "unknown field",
        ),
        (
            json!({"url": "ftp://127.0.0.1/"}),
            "scheme must be http or https",
        ),
        (
            json!({"url": "http://u:p@127.0.0.1/"}),
            "user name or password",
        ),
        (json!({"url": "not a url"}), "not a valid absolute URL"),
        (
            json!({"url": "http://127.0.0.1/", "states": ["pending"]}),
            "not a terminal state",
        ),
        (
            json!({"url": "http://127.0.0.1/", "states": []}),
            "1-5 values",
        ),
        (
            json!({"url": "http://127.0.0.1/", "kinds": ["Refund!"]}),
            "kinds:",
        ),
        (
            json!({"url": "http://127.0.0.1/", "scope": "everyone"}),
            "unknown variant",
        ),
        (json!({"url": "http://0.0.0.0/"}), "no receiver answers at"),
    ] {
        let p = problem(
            register(&app, &token, &body).await,
            400,
            "/problems/invalid-body",
        )
        .await;
        assert!(p["detail"].as_str().unwrap().contains(why), "{body}: {p}");
    }
    let stored: i64 = sqlx::query_scalar("select count(*) from webhook_endpoints")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0);
    // Ten live endpoints per scope at most.
    for _ in 0..10 {
        registered(&app, &token, "http://127.0.0.1:9/").await;
    }
    let p = problem(
        register(&app, &token, &json!({"url": "http://127.0.0.1:9/"})).await,
        409,
        "/problems/too-many-webhooks",
    )
    .await;
    assert_eq!(p["limit"], 10);
}

#[tokio::test]
async fn a_principal_sees_and_disables_its_own_endpoints_and_never_a_secret() {
    let app = app().await;
    let token = app.token("kiosk", Role::Device).await;
    let stranger = app.token("stranger", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    let receiver = Receiver::start(&[]).await;
    let (id, secret) = registered(&app, &token, &receiver.url).await;
    let listed = |t: String| {
        let app = &app;
        async move {
            let body: Value = app.get(&t, "/v1/webhooks").await.json().await.unwrap();
            body["items"].as_array().unwrap().clone()
        }
    };
    let mine = listed(token.clone()).await;
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["id"], id.as_str());
    assert!(mine[0].get("secret").is_none(), "{}", mine[0]);
    assert!(!serde_json::to_string(&mine).unwrap().contains(&secret));
    assert!(listed(stranger.clone()).await.is_empty());
    assert_eq!(listed(operator.clone()).await.len(), 1);
    // Another fleet's endpoint is not found, to read or to disable.
    let events = format!("/v1/webhooks/{id}/events");
    problem(
        app.get(&stranger, &events).await,
        404,
        "/problems/not-found",
    )
    .await;
    let disable = |t: &str| {
        app.client
            .delete(app.url(&format!("/v1/webhooks/{id}")))
            .bearer_auth(t.to_owned())
            .send()
    };
    problem(
        disable(&stranger).await.unwrap(),
        404,
        "/problems/not-found",
    )
    .await;
    // An outcome while it is live is an event; disabled, the pending one
    // expires and later outcomes make none.
    let first = cancelled(&app, &token).await;
    assert_eq!(events_of(&app.pool, &first).await.len(), 1);
    let resp = disable(&token).await.unwrap();
    assert_eq!(resp.status(), 200);
    let shown: Value = resp.json().await.unwrap();
    assert!(shown["disabled_at"].is_string());
    assert_eq!(
        disable(&token).await.unwrap().status(),
        200,
        "again: a no-op"
    );
    let expired = events_of(&app.pool, &first).await;
    assert_eq!(expired[0].1, "expired");
    assert_eq!(expired[0].3.as_deref(), Some("the endpoint was disabled"));
    let later = cancelled(&app, &token).await;
    assert!(events_of(&app.pool, &later).await.is_empty());
    deliverer(&app, quick()).run_once().await.unwrap();
    assert!(receiver.received().is_empty());
    // Its events stay readable, by its owner.
    let body: Value = app.get(&token, &events).await.json().await.unwrap();
    assert_eq!(body["items"].as_array().unwrap().len(), 1);
    // The inspector reads endpoints, but not their secrets.
    let inspector = as_role(&app.pool, ServiceRole::Inspector);
    let urls: i64 = sqlx::query_scalar("select count(url) from webhook_endpoints")
        .fetch_one(&inspector)
        .await
        .unwrap();
    assert_eq!(urls, 1);
    let refused = sqlx::query("select secret from webhook_endpoints")
        .fetch_all(&inspector)
        .await
        .unwrap_err();
    assert_eq!(
        refused
            .as_database_error()
            .and_then(|d| d.code())
            .as_deref(),
        Some("42501"),
        "{refused}"
    );
}

/// The host's own addresses are refused whatever their range: the check
/// asks the host (an address it can bind is its own), so a public address
/// of its own interface is caught where no range names it.
#[test]
fn an_address_of_the_ledgers_own_host_is_refused_unless_private_targets_are_allowed() {
    use command_ledger::domain::webhook::{AddressClass, UrlError};
    use command_ledger::webhooks::send::check_not_this_host;
    let own: Vec<std::net::IpAddr> =
        vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()];
    for ip in own {
        assert_eq!(
            check_not_this_host(ip, false),
            Err(UrlError::PrivateAddress {
                address: ip,
                class: AddressClass::ThisHost
            }),
            "{ip}"
        );
        assert_eq!(check_not_this_host(ip, true), Ok(()));
    }
    // Not this host's: left to the range rules.
    for ip in ["203.0.113.10", "192.0.2.200"] {
        assert_eq!(
            check_not_this_host(ip.parse().unwrap(), false),
            Ok(()),
            "{ip}"
        );
    }
}
