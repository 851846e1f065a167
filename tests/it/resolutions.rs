//! Resolving what is ambiguous: an operator asks the reconcile probe again
//! now, or records what the provider said (over HTTP, or with `commands
//! resolve` on the command line); the command stays ambiguous, the
//! resolution is kept beside it, append-only, and nothing is retried.

use command_ledger::custodian::effects::{Effect, EffectCall, EffectFuture, Effects, ProbeFuture};
use command_ledger::db::Role;
use command_ledger::domain::EffectOutcome;
use command_ledger::domain::admission::Policies;
use command_ledger::domain::recovery::ProbeAnswer;
use command_ledger::http::AppState;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::harness::{cli, custodian, fresh_database, serve_state};

/// Every call ends ambiguous; the probe answers `answer`; calls are counted.
#[derive(Debug)]
struct Unsure {
    answer: ProbeAnswer,
    calls: Arc<AtomicUsize>,
}

impl Effect for Unsure {
    fn execute<'a>(&'a self, _call: &'a EffectCall) -> EffectFuture<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            EffectOutcome::Ambiguous {
                reason: "uncertain_response",
                detail: json!("the provider answered 502"),
            }
        })
    }

    fn reconcile<'a>(&'a self, _call: &'a EffectCall) -> Option<ProbeFuture<'a>> {
        let answer = self.answer.clone();
        Some(Box::pin(async move { answer }))
    }
}

/// The `never` kind's deadline, and so its window.
const NEVER_WINDOW: Duration = Duration::from_secs(2);

struct Setup {
    base: String,
    db_url: String,
    pool: sqlx::PgPool,
    operator: String,
    device: String,
    client: reqwest::Client,
    calls: Arc<AtomicUsize>,
    /// Ids of the commands made, all ambiguous (kinds `sure`: the probe says
    /// applied; `never`: it says not applied; `dunno`: it cannot tell).
    ids: Vec<(String, String)>,
}

impl Setup {
    async fn new() -> Setup {
        let (db_url, pool) = fresh_database().await;
        let calls = Arc::new(AtomicUsize::new(0));
        let mut effects = Effects::default();
        for (kind, answer) in [
            ("sure", ProbeAnswer::Applied(json!({"refund_id": "rf_123"}))),
            ("never", ProbeAnswer::NotApplied),
            ("dunno", ProbeAnswer::Unknown("the provider is down".into())),
        ] {
            let effect = Unsure {
                answer,
                calls: Arc::clone(&calls),
            };
            // `never`'s "not found" counts once 2 s have passed since
            // effect_started (its deadline, no margin): the effect can no
            // longer take hold then.
            let timeout = if kind == "never" {
                NEVER_WINDOW
            } else {
                Duration::from_secs(5)
            };
            effects.register_with_margin(kind, effect, timeout, Duration::ZERO);
        }
        let mut state = AppState::new(
            pool.clone(),
            crate::harness::ledger_backend(),
            Policies::default(),
        );
        state.probes = Some(Arc::new(effects.clone()));
        let addr = serve_state(state).await;
        let operator = command_ledger::cli::issue_token(&pool, "ops", Role::Operator, None)
            .await
            .unwrap();
        let device = command_ledger::cli::issue_token(&pool, "kiosk", Role::Device, None)
            .await
            .unwrap();
        let client = reqwest::Client::new();
        let base = format!("http://{addr}");
        let mut ids = Vec::new();
        for (i, kind) in ["sure", "never", "dunno", "sure"].iter().enumerate() {
            let resp: Value = client
                .post(format!("{base}/v1/commands"))
                .bearer_auth(&operator)
                .header("Idempotency-Key", format!("k{i}"))
                .json(&json!({"kind": kind, "authority": "payments"}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            ids.push(((*kind).to_owned(), resp["id"].as_str().unwrap().to_owned()));
        }
        let runner = custodian(&pool, &["payments"], effects, Duration::from_secs(10));
        assert_eq!(runner.run_once().await.unwrap().ambiguous, 4);
        Setup {
            base,
            db_url,
            pool,
            operator,
            device,
            client,
            calls,
            ids,
        }
    }

    async fn post(&self, token: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        (
            resp.status().as_u16(),
            resp.json().await.unwrap_or(Value::Null),
        )
    }

    async fn command(&self, id: &str) -> Value {
        self.client
            .get(format!("{}/v1/commands/{id}", self.base))
            .bearer_auth(&self.operator)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    fn id(&self, i: usize) -> &str {
        &self.ids[i].1
    }
}

#[tokio::test]
async fn an_operator_records_what_the_provider_said_and_the_command_stays_ambiguous() {
    let s = Setup::new().await;
    let id = s.id(2);
    let path = format!("/v1/commands/{id}/resolution");
    let body =
        json!({"outcome": "applied", "evidence": "provider says applied", "reference": "rf_123"});

    // Devices may not; bad input changes nothing.
    let (status, problem) = s.post(&s.device, &path, Some(body.clone())).await;
    assert_eq!(status, 403, "{problem}");
    for bad in [
        json!({"outcome": "maybe", "evidence": "x"}),
        json!({"outcome": "applied", "evidence": "   "}),
        json!({"outcome": "applied"}),
        json!({"outcome": "applied", "evidence": "x", "reference": ""}),
        json!({"outcome": "applied", "evidence": "x", "colour": "red"}),
        json!({"outcome": "applied", "evidence": "x".repeat(2001)}),
    ] {
        let (status, problem) = s.post(&s.operator, &path, Some(bad.clone())).await;
        assert_eq!(status, 400, "{bad} -> {problem}");
        assert_eq!(problem["type"], "/problems/invalid-body", "{problem}");
    }
    assert!(s.command(id).await.get("resolution").is_none());

    let (status, answer) = s.post(&s.operator, &path, Some(body.clone())).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["command"]["state"], "ambiguous");
    assert_eq!(answer["resolution"]["outcome"], "applied");
    assert_eq!(answer["resolution"]["reference"], "rf_123");
    assert_eq!(answer["resolution"]["source"], "operator");
    assert_eq!(answer["resolution"]["actor"], "operator:ops");

    let shown = s.command(id).await;
    assert_eq!(shown["state"], "ambiguous", "terminal, as it was");
    assert_eq!(shown["resolution"], answer["resolution"]);

    // The command line shows it too.
    let show = |json: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_command-ledger"));
        cmd.args(["--database-url", &s.db_url, "commands", "show", id])
            .env("RUST_LOG", "error");
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let doc: Value = serde_json::from_str(&show(true)).unwrap();
    assert_eq!(doc["resolution"], answer["resolution"]);
    let text = show(false);
    assert!(
        text.contains("resolved  applied (operator, by operator:ops at ")
            && text.contains("provider says applied [ref rf_123]"),
        "{text}"
    );
    assert!(text.contains(&format!("downstream key cl-{id}")), "{text}");

    // Once only; and never for a command that is not ambiguous.
    let (status, problem) = s.post(&s.operator, &path, Some(body.clone())).await;
    assert_eq!(status, 409, "{problem}");
    assert_eq!(problem["type"], "/problems/already-resolved");
    let other: Value = s
        .client
        .post(format!("{}/v1/commands", s.base))
        .bearer_auth(&s.operator)
        .header("Idempotency-Key", "live")
        .json(&json!({"kind": "noop", "authority": "elsewhere"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let other = other["id"].as_str().unwrap();
    let (status, problem) = s
        .post(
            &s.operator,
            &format!("/v1/commands/{other}/resolution"),
            Some(body),
        )
        .await;
    assert_eq!(status, 409, "{problem}");
    assert_eq!(problem["type"], "/problems/not-ambiguous");
    assert_eq!(problem["state"], "pending");

    // The record is append-only in the database too.
    for sql in [
        "update command_resolutions set outcome = 'not_applied'",
        "delete from command_resolutions",
        "truncate command_resolutions",
    ] {
        let err = sqlx::query(sql).execute(&s.pool).await.unwrap_err();
        assert_eq!(
            err.as_database_error().unwrap().code().as_deref(),
            Some("CL003"),
            "{sql}"
        );
    }
    assert_eq!(s.calls.load(Ordering::SeqCst), 4, "nothing was retried");

    // verify recomputes it; an edit behind the triggers' back is named.
    let verify = command_ledger::db::verify::resolutions;
    assert_eq!(verify(&s.pool, None, None).await.unwrap(), vec![]);
    crate::harness::tamper(
        &s.pool,
        "update command_resolutions set outcome = 'not_applied'",
    )
    .await;
    let breaks = verify(&s.pool, None, None).await.unwrap();
    assert_eq!(breaks.len(), 1, "{breaks:?}");
    assert_eq!(breaks[0].kind, "resolution_edited");
    assert_eq!(breaks[0].command_id.to_string(), id);
}

#[tokio::test]
async fn probing_now_records_a_definite_answer_and_never_retries() {
    let s = Setup::new().await;
    let (status, answer) = s
        .post(
            &s.operator,
            &format!("/v1/commands/{}/probe", s.id(0)),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["answer"], "applied");
    assert_eq!(answer["resolution"]["source"], "probe");
    assert_eq!(s.command(s.id(0)).await["resolution"]["outcome"], "applied");

    let (status, answer) = s
        .post(
            &s.operator,
            &format!("/v1/commands/{}/probe", s.id(2)),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["answer"], "unknown");
    assert_eq!(answer["detail"], "the provider is down");
    assert!(answer["resolution"].is_null());
    assert!(s.command(s.id(2)).await.get("resolution").is_none());

    // The rest of the authority: the two unresolved the probe can answer,
    // and the one it cannot (still unresolved); `never`'s window closed.
    tokio::time::sleep(NEVER_WINDOW).await;
    let (status, all) = s
        .post(
            &s.operator,
            "/v1/authorities/payments/probe-ambiguous",
            None,
        )
        .await;
    assert_eq!(status, 200, "{all}");
    let answers: Vec<(&str, &str)> = all["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["command_id"].as_str().unwrap(),
                r["answer"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            (s.id(1), "not_applied"),
            (s.id(2), "unknown"),
            (s.id(3), "applied")
        ]
    );
    assert_eq!(all["more"], false);
    let (status, problem) = s
        .post(
            &s.operator,
            &format!("/v1/commands/{}/probe", s.id(0)),
            None,
        )
        .await;
    assert_eq!(status, 409, "{problem}");
    let (status, _) = s
        .post(&s.device, "/v1/authorities/payments/probe-ambiguous", None)
        .await;
    assert_eq!(status, 403);
    let states: Vec<String> = sqlx::query_scalar("select state from commands order by id")
        .fetch_all(&s.pool)
        .await
        .unwrap();
    assert!(states.iter().all(|st| st == "ambiguous"), "{states:?}");
    assert_eq!(s.calls.load(Ordering::SeqCst), 4, "probes never execute");
}

/// A probe's "not found" while the effect could still take hold (before
/// its deadline plus the kind's probe margin, from `effect_started`)
/// records nothing and says when to ask again; asked then, it records
/// `not_applied`.
#[tokio::test]
async fn probing_now_records_not_applied_only_once_the_effect_can_no_longer_take_hold() {
    let s = Setup::new().await;
    let path = format!("/v1/commands/{}/probe", s.id(1));
    let (status, early) = s.post(&s.operator, &path, None).await;
    assert_eq!(status, 200, "{early}");
    assert_eq!(early["answer"], "unknown", "{early}");
    assert!(early["resolution"].is_null(), "{early}");
    let detail = early["detail"].as_str().unwrap();
    assert!(detail.contains("may still take hold"), "{detail}");
    let again: chrono::DateTime<chrono::Utc> =
        early["ask_again_at"].as_str().unwrap().parse().unwrap();
    assert!(s.command(s.id(1)).await.get("resolution").is_none());

    let wait = (again - chrono::Utc::now()).to_std().unwrap_or_default();
    assert!(wait <= NEVER_WINDOW, "{again}");
    tokio::time::sleep(wait + Duration::from_millis(200)).await;
    let (status, later) = s.post(&s.operator, &path, None).await;
    assert_eq!(status, 200, "{later}");
    assert_eq!(later["answer"], "not_applied", "{later}");
    assert!(later["ask_again_at"].is_null(), "{later}");
    assert_eq!(
        s.command(s.id(1)).await["resolution"]["outcome"],
        "not_applied"
    );
}

/// The command line's `commands resolve` records a resolution through the
/// same use case as `POST /v1/commands/{id}/resolution`: the same row (an
/// operator's, by `cli:<user>`), chained so that `verify` accepts it, the
/// same checks and refusals; and it prints the API's views.
#[tokio::test]
async fn the_command_line_resolves_an_ambiguous_command_as_the_api_does() {
    let s = Setup::new().await;
    let (by_api, by_cli, untouched) = (s.id(0), s.id(1), s.id(2));
    let (status, answer) = s
        .post(
            &s.operator,
            &format!("/v1/commands/{by_api}/resolution"),
            Some(
                json!({"outcome": "not_applied", "evidence": " provider: no such refund ",
                        "reference": "case-7"}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let resolve = |id: &str, outcome: &str, evidence: &str| {
        let args: Vec<String> = [
            "commands",
            "resolve",
            id,
            "--outcome",
            outcome,
            "--evidence",
            evidence,
            "--reference",
            "case-7",
            "--json",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        let db_url = s.db_url.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli(&db_url, &args).await
        }
    };
    let (ok, out, err) = resolve(by_cli, "not_applied", " provider: no such refund ").await;
    assert!(ok, "{err}");
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(printed["command"]["id"], by_cli);
    assert_eq!(
        printed["command"]["state"], "ambiguous",
        "terminal, as it was"
    );
    assert_eq!(printed["resolution"], s.command(by_cli).await["resolution"]);

    let row = |id: &str| {
        let (pool, id) = (s.pool.clone(), id.to_owned());
        async move {
            sqlx::query_as::<_, (String, String, Option<String>, String, String)>(
                "select outcome, evidence, reference, source, actor from command_resolutions
                 where command_id = $1::uuid",
            )
            .bind(&id)
            .fetch_optional(&pool)
            .await
            .unwrap()
        }
    };
    let resolved_by = |actor: &str| {
        Some((
            "not_applied".to_owned(),
            "provider: no such refund".to_owned(),
            Some("case-7".to_owned()),
            "operator".to_owned(),
            actor.to_owned(),
        ))
    };
    assert_eq!(row(by_api).await, resolved_by("operator:ops"));
    assert_eq!(row(by_cli).await, resolved_by("cli:ops-alice"));
    let verify = command_ledger::db::verify::resolutions;
    assert_eq!(verify(&s.pool, None, None).await.unwrap(), vec![]);

    // The same refusals, and nothing recorded by them.
    for (outcome, evidence, refusal) in [
        (
            "maybe",
            "x",
            "outcome must be \"applied\" or \"not_applied\"",
        ),
        ("applied", "   ", "evidence must be 1-2000 characters"),
    ] {
        let (ok, _, err) = resolve(untouched, outcome, evidence).await;
        assert!(!ok && err.contains(refusal), "{err}");
    }
    assert_eq!(row(untouched).await, None);
    let (ok, _, err) = resolve(by_cli, "applied", "second thoughts").await;
    assert!(!ok && err.contains("resolution already"), "{err}");
    assert_eq!(row(by_cli).await, resolved_by("cli:ops-alice"));
    let live: Value = s
        .client
        .post(format!("{}/v1/commands", s.base))
        .bearer_auth(&s.operator)
        .header("Idempotency-Key", "live")
        .json(&json!({"kind": "noop", "authority": "elsewhere"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (ok, _, err) = resolve(live["id"].as_str().unwrap(), "applied", "x").await;
    assert!(!ok && err.contains("pending, not ambiguous"), "{err}");
    assert_eq!(s.calls.load(Ordering::SeqCst), 4, "nothing was retried");
}

/// `unresolved=true` lists the ambiguous commands nobody has resolved yet
/// (the console's ambiguous list): a resolved one leaves it.
#[tokio::test]
async fn the_unresolved_ambiguous_list_drops_a_command_once_it_is_resolved() {
    let s = Setup::new().await;
    let listed = |query: &'static str| {
        let (client, base, operator) = (s.client.clone(), s.base.clone(), s.operator.clone());
        async move {
            let resp = client
                .get(format!("{base}/v1/commands?{query}"))
                .bearer_auth(&operator)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap();
            (status, body)
        }
    };
    let ids = |body: &Value| -> Vec<String> {
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, before) = listed("unresolved=true").await;
    assert_eq!(ids(&before).len(), 4, "{before}");
    let (status, _) = s
        .post(
            &s.operator,
            &format!("/v1/commands/{}/probe", s.id(0)),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (_, after) = listed("state=ambiguous&unresolved=true").await;
    let after = ids(&after);
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(!after.iter().any(|i| i == s.id(0)), "{after:?}");
    let (_, all) = listed("state=ambiguous").await;
    assert_eq!(
        ids(&all).len(),
        4,
        "without the filter, every ambiguous one"
    );
    let (status, problem) = listed("state=applied&unresolved=true").await;
    assert_eq!(status, 400, "{problem}");
}
