//! Limits per provider (`domain::limits`, migration 0048), through the
//! custodians' own loops against a provider that counts what it is sent:
//! the in-flight limit and the token bucket hold across custodian
//! processes, a command over a limit waits in its place, and priorities
//! (with aging) still apply within a group.

use command_ledger::custodian::StepReport;
use command_ledger::db::Role;
use command_ledger::db::roles::ServiceRole;
use command_ledger::domain::limits::ProviderLimit;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{TestApp, as_role, custodian, refund, refund_effects};

/// A provider that answers after `delay`, counting the requests it holds
/// at once and when each arrived.
#[derive(Clone, Default)]
struct Provider {
    delay: Duration,
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Provider {
    async fn start(delay: Duration) -> (Provider, String) {
        let provider = Provider {
            delay,
            ..Provider::default()
        };
        let router = axum::Router::new()
            .route("/refunds", axum::routing::post(answer))
            .with_state(provider.clone());
        let url = crate::harness::serve_router(router).await;
        (provider, url)
    }

    fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().unwrap().clone()
    }
}

async fn answer(axum::extract::State(p): axum::extract::State<Provider>) -> axum::Json<Value> {
    p.arrivals.lock().unwrap().push(Instant::now());
    let now = p.now.fetch_add(1, Ordering::SeqCst) + 1;
    p.most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(p.delay).await;
    p.now.fetch_sub(1, Ordering::SeqCst);
    axum::Json(json!({"refund": "done"}))
}

/// Four custodians, one for each of [`AUTHORITIES`], running their loops,
/// `refund` going to `url` under `limit`; they stop when the senders are
/// used or dropped.
fn four_custodians(
    app: &TestApp,
    url: &str,
    limit: &ProviderLimit,
) -> Vec<tokio::sync::oneshot::Sender<()>> {
    AUTHORITIES
        .iter()
        .map(|a| {
            let mut effects = refund_effects(url, Duration::from_secs(10));
            effects.limit_providers(vec![limit.clone()]);
            crate::harness::running_custodian(&app.pool, &[a], effects).1
        })
        .collect()
}

fn stripe(max_in_flight: Option<u32>, rate: Option<f64>, burst: Option<u32>) -> ProviderLimit {
    let mut limit = ProviderLimit::new("stripe", max_in_flight, rate, burst).unwrap();
    limit.kinds = vec!["refund".into()];
    limit
}

/// Submits `n` refunds spread over `authorities`, up to 500 a batch.
async fn submit(app: &TestApp, token: &str, authorities: &[&str], n: usize) {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let mut body = refund(1000 + i as i64);
            body["authority"] = json!(authorities[i % authorities.len()]);
            body["idempotency_key"] = json!(format!("r-{i}-{}", authorities[0]));
            body
        })
        .collect();
    for chunk in items.chunks(500) {
        let resp = app
            .client
            .post(app.url("/v1/commands/batch"))
            .bearer_auth(token)
            .json(&json!({ "items": chunk }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let answer: Value = resp.json().await.unwrap();
        assert!(
            answer["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(|i| i["status"] == 202),
            "{answer}"
        );
    }
}

async fn count(app: &TestApp, state: &str) -> i64 {
    sqlx::query_scalar("select count(*) from commands where state = $1")
        .bind(state)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// Waits up to `within` for `n` commands in `state`.
async fn until(app: &TestApp, state: &str, n: i64, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if count(app, state).await >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

const AUTHORITIES: [&str; 4] = ["pay-1", "pay-2", "pay-3", "pay-4"];

#[tokio::test]
async fn four_custodians_under_a_limit_of_5_in_flight_never_send_more_than_5_at_once() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let (provider, url) = Provider::start(Duration::from_millis(200)).await;
    let limit = stripe(Some(5), None, None);
    submit(&app, &token, &AUTHORITIES, 40).await;
    let stops = four_custodians(&app, &url, &limit);

    // Commands of a kind under no limit, queued behind the refunds, are not
    // held back by them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (i, a) in AUTHORITIES.iter().enumerate() {
        let ping = json!({"kind": "noop", "authority": a, "args": {"n": i}});
        app.create(&token, &format!("ping-{i}"), &ping).await;
    }
    let pings_done = until(&app, "applied", 4, Duration::from_secs(2)).await;
    let pending = count(&app, "pending").await;

    assert!(
        until(&app, "applied", 44, Duration::from_secs(30)).await,
        "every command applied"
    );
    for stop in stops {
        let _ = stop.send(());
    }
    let most = provider.most.load(Ordering::SeqCst);
    assert!(most <= 5, "the provider held {most} requests at once");
    assert_eq!(most, 5, "the limit was reached, not merely respected");
    assert_eq!(provider.arrivals().len(), 40, "each refund sent once");
    assert!(
        pings_done,
        "the commands under no limit ran while refunds waited"
    );
    assert!(
        pending > 0,
        "refunds were still waiting for the limit ({pending})"
    );
}

#[tokio::test]
async fn a_rate_of_50_a_second_with_a_burst_of_10_starts_at_most_510_in_10_seconds() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let (provider, url) = Provider::start(Duration::ZERO).await;
    let limit = stripe(None, Some(50.0), Some(10));
    submit(&app, &token, &AUTHORITIES, 700).await;
    let stops = four_custodians(&app, &url, &limit);
    tokio::time::sleep(Duration::from_secs(11)).await;
    for stop in stops {
        let _ = stop.send(());
    }
    let arrivals = provider.arrivals();
    let first = *arrivals.first().expect("the provider was called");
    let window = Duration::from_secs(10);
    let within = arrivals
        .iter()
        .filter(|t| t.duration_since(first) < window)
        .count();
    // The bucket bounds the claims; the provider sees each a dispatch's
    // latency later, which varies: a window of its arrivals may hold the
    // claims of 10 s plus that variation (allowed: 100 ms, 5 at 50/s).
    let bound = limit.most_started(window).unwrap();
    let slack = limit
        .most_started(window + Duration::from_millis(100))
        .unwrap()
        - bound;
    let mut per_second = [0usize; 10];
    for t in &arrivals {
        if let Some(n) = per_second
            .get_mut(usize::try_from(t.duration_since(first).as_secs()).unwrap_or(usize::MAX))
        {
            *n += 1;
        }
    }
    eprintln!(
        "{within} requests in the first 10 s (bound {bound} + {slack}; 50/s configured); each second: {per_second:?}"
    );
    assert!(
        within as u64 <= bound + slack,
        "{within} requests in 10 s, bound {bound} + {slack}"
    );
    // The limit slows the custodians to the rate, not far below it, once
    // they run: the first second also holds their start (on Citus, a
    // worker's first call of each step on each connection). Half the rate
    // at least: the suite runs this beside other tests on a few cores, and
    // on Citus a claim of a group's commands makes several hops; how close
    // to the rate it comes is measured on its own
    // (accuracy_of_the_rate_limit_under_four_custodians).
    let steady: usize = per_second[1..].iter().sum();
    assert!(
        steady >= 225,
        "only {steady} requests in the 9 s after the first at 50/s: {per_second:?}"
    );
}

#[tokio::test]
async fn within_a_group_at_its_limit_a_low_priority_command_still_goes_first_once_past_its_gap() {
    let mut policies = command_ledger::domain::admission::Policies::default();
    policies.set(
        "refund",
        command_ledger::domain::admission::KindPolicy {
            priority: command_ledger::domain::schedule::PriorityRule::new(Some(0), Some(50))
                .unwrap(),
            ..Default::default()
        },
    );
    let app = TestApp::spawn_with(policies).await;
    let token = app.token("dev", Role::Device).await;
    let (_provider, url) = Provider::start(Duration::ZERO).await;
    let mut effects = refund_effects(&url, Duration::from_secs(5));
    effects.limit_providers(vec![stripe(Some(1), None, None)]);
    let c = custodian(&app.pool, &["payments"], effects, Duration::from_secs(10));
    c.write_providers().await.unwrap();
    c.heartbeat().await.unwrap();
    let mut report = StepReport::default();

    let high = |n: i64| {
        let mut body = refund(100 + n);
        body["priority"] = json!(10);
        body
    };
    // One recorded 101 s ago at priority 0 has waited past the gap (10
    // levels x 10 s), behind a stream of priority-10 commands. (Recorded
    // with SQL, the only way to have been recorded in the past.)
    let fresh = app.create(&token, "low-fresh", &refund(1)).await;
    for n in 0..3 {
        app.create(&token, &format!("high-{n}"), &high(n)).await;
    }
    let waited = crate::harness::recorded_101_s_ago(&app.pool, &fresh, "low-waited").await;
    for n in 3..6 {
        app.create(&token, &format!("high-{n}"), &high(n)).await;
    }

    // One place: the one that waited past its gap takes it.
    let got = c.claim_and_start(10, &mut report).await.unwrap();
    let ids: Vec<_> = got.iter().map(|s| s.call.command_id.to_string()).collect();
    assert_eq!(ids, [waited], "one started, the one that waited");
    // The place is taken: nothing more starts, and nothing fails for it.
    assert!(c.claim_and_start(10, &mut report).await.unwrap().is_empty());
    assert_eq!(count(&app, "pending").await, 7);
    // Once it is recorded, the next is a priority-10 one; the fresh
    // priority-0 command keeps its place behind them.
    let done = c.execute(got).await;
    c.record_outcomes(done, &mut report).await;
    let got = c.claim_and_start(10, &mut report).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_ne!(got[0].call.command_id.to_string(), fresh);
}

#[tokio::test]
async fn a_catalog_change_moves_the_queued_commands_of_a_kind_to_its_new_group() {
    let app = TestApp::spawn().await;
    let token = app.token("dev", Role::Device).await;
    let queued = || async {
        sqlx::query_scalar::<_, Option<String>>("select provider from command_queue order by id")
            .fetch_all(&app.pool)
            .await
            .unwrap()
    };
    // Queued before any custodian named a group: under no limit.
    submit(&app, &token, &["payments"], 3).await;
    assert_eq!(queued().await, [None, None, None]);
    let mut effects = refund_effects("http://127.0.0.1:9", Duration::from_secs(5));
    effects.limit_providers(vec![stripe(Some(1), None, None)]);
    let c = custodian(&app.pool, &["payments"], effects, Duration::from_secs(10));
    c.write_providers().await.unwrap();
    let stripe = Some("stripe".to_owned());
    assert_eq!(
        queued().await,
        [stripe.clone(), stripe.clone(), stripe.clone()]
    );
    // A new command takes its kind's group when it is queued.
    let resp = app
        .client
        .post(app.url("/v1/commands"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "r-new")
        .json(&refund(5000))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    assert_eq!(queued().await.iter().filter(|p| p.is_some()).count(), 4);
    // A catalog without it: the group goes, and its commands are free.
    let c = custodian(
        &app.pool,
        &["payments"],
        refund_effects("http://127.0.0.1:9", Duration::from_secs(5)),
        Duration::from_secs(10),
    );
    c.write_providers().await.unwrap();
    assert!(queued().await.iter().all(Option::is_none));
    let groups: i64 = sqlx::query_scalar("select count(*) from provider_limits")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(groups, 0);
}

#[tokio::test]
async fn only_the_custodian_writes_the_limits() {
    let app = TestApp::spawn().await;
    let mut effects = refund_effects("http://127.0.0.1:9", Duration::from_secs(5));
    effects.limit_providers(vec![stripe(Some(2), Some(5.0), None)]);
    let c = custodian(&app.pool, &["payments"], effects, Duration::from_secs(10));
    c.write_providers().await.unwrap();
    for role in [
        ServiceRole::Api,
        ServiceRole::Custodian,
        ServiceRole::Inspector,
        ServiceRole::Owner,
    ] {
        let pool = as_role(&app.pool, role);
        for sql in [
            "update provider_limits set tokens = 1000",
            "delete from provider_kinds",
            "insert into provider_kinds values ('ping', 'stripe')",
            "truncate provider_limits cascade",
            // A custodian may lock a group's row, not change it.
            "update provider_limits set updated_at = now()",
            // Each authority's groups, on its shards on Citus (0049).
            "delete from authority_provider_kinds",
            "insert into authority_provider_kinds values ('payments', 'ping', 'stripe')",
        ] {
            let e = sqlx::query(sql).execute(&pool).await.unwrap_err();
            let code = e
                .as_database_error()
                .and_then(|d| d.code())
                .unwrap_or_default()
                .into_owned();
            assert!(code == "CL017" || code == "42501", "{role:?}: {sql}: {e}");
        }
    }
    let tokens: f64 = sqlx::query_scalar("select tokens from provider_limits")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(tokens, 5.0, "a new bucket starts full");
}

/// The limit's accuracy, a measurement rather than a check of the default
/// suite: for each configured rate, four custodians (one per authority)
/// drain a backlog through a provider that answers at once, and the rate
/// the provider saw over `LIMITS_SECONDS` (default 10) after its first
/// request is printed against the configured one. `LIMITS_RATES` (default
/// `20,50,200,1000`) lists the rates. Run with `--release --ignored
/// --nocapture` (docs/runs/limits-accuracy.txt).
#[tokio::test]
#[ignore = "a measurement: run it on its own, in a release build"]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
async fn accuracy_of_the_rate_limit_under_four_custodians() {
    let seconds: u64 = std::env::var("LIMITS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let rates: Vec<f64> = std::env::var("LIMITS_RATES")
        .unwrap_or_else(|_| "20,50,200,1000".into())
        .split(',')
        .map(|r| r.trim().parse().unwrap())
        .collect();
    println!(
        "rate limit accuracy: 4 custodians, one authority each, burst = one second of rate, {seconds} s each"
    );
    println!(
        "configured/s  seen/s  seen/configured  requests  bound(burst+rate*t)  max_in_flight_seen"
    );
    for rate in rates {
        let app = TestApp::spawn().await;
        let token = app.token("dev", Role::Device).await;
        let (provider, url) = Provider::start(Duration::ZERO).await;
        let limit = stripe(None, Some(rate), None);
        // Enough to outlast the window: the burst, the rate's worth, a fifth more.
        let backlog = (f64::from(limit.burst) + rate * seconds as f64 * 1.2) as usize;
        submit(&app, &token, &AUTHORITIES, backlog).await;
        let stops = four_custodians(&app, &url, &limit);
        tokio::time::sleep(Duration::from_secs(seconds + 1)).await;
        for stop in stops {
            let _ = stop.send(());
        }
        let arrivals = provider.arrivals();
        let first = arrivals[0];
        let window = Duration::from_secs(seconds);
        let within = arrivals
            .iter()
            .filter(|t| t.duration_since(first) < window)
            .count();
        // The burst is spent at once: the rate is what follows it.
        let seen = (within as f64 - f64::from(limit.burst)) / seconds as f64;
        println!(
            "{rate:>12}  {seen:>6.1}  {:>15.3}  {within:>8}  {:>19}  {:>18}",
            seen / rate,
            limit.most_started(window).unwrap(),
            provider.most.load(Ordering::SeqCst),
        );
        // Let the custodians stop before the next database.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
