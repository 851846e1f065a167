//! Who may do what: every endpoint against {no token, revoked token, another
//! device, the owning device, an operator}. 401 without a live token; 404
//! for another principal's object (never an existence oracle); 403 for what
//! a device may never do; nothing else changes.

use crate::harness::{TestApp, refund, refund_policy};
use command_ledger::db::Role;
use command_ledger::domain::admission::NearDuplicate;
use serde_json::{Value, json};
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
enum Caller {
    Nobody,
    Revoked,
    OtherDevice,
    Owner,
    Operator,
}

const CALLERS: [Caller; 5] = [
    Caller::Nobody,
    Caller::Revoked,
    Caller::OtherDevice,
    Caller::Owner,
    Caller::Operator,
];

struct Tokens {
    revoked: String,
    other: String,
    owner: String,
    operator: String,
}

impl Tokens {
    fn of(&self, c: Caller) -> Option<&str> {
        match c {
            Caller::Nobody => None,
            Caller::Revoked => Some(&self.revoked),
            Caller::OtherDevice => Some(&self.other),
            Caller::Owner => Some(&self.owner),
            Caller::Operator => Some(&self.operator),
        }
    }
}

async fn call(
    app: &TestApp,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> u16 {
    let mut req = app.client.request(method.parse().unwrap(), app.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req
            .header("Idempotency-Key", uuid::Uuid::now_v7().to_string())
            .json(b);
    }
    req.send().await.unwrap().status().as_u16()
}

/// A held request of the owner, for the hold endpoints.
async fn hold_of(app: &TestApp, owner: &str, n: usize) -> String {
    let body = json!({"tool": "refund", "runId": format!("first-{n}"), "args": {"amount": format!("{n} USD"), "to": "a@b.co"}});
    let post = |body: Value| async move {
        let r = app
            .client
            .post(app.url("/v1/invoke"))
            .bearer_auth(owner)
            .header("Prefer", "wait=0")
            .json(&body)
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()
    };
    post(body.clone()).await;
    let mut again = body;
    again["runId"] = json!(format!("second-{n}"));
    post(again).await["hold_id"]
        .as_str()
        .expect("held")
        .to_owned()
}

#[tokio::test]
async fn every_endpoint_answers_each_kind_of_caller_as_documented() {
    let app = TestApp::spawn_with(refund_policy(Duration::ZERO, NearDuplicate::Hold)).await;
    let tokens = Tokens {
        revoked: app.token("gone", Role::Device).await,
        other: app.token("other", Role::Device).await,
        owner: app.token("owner", Role::Device).await,
        operator: app.token("ops", Role::Operator).await,
    };
    command_ledger::db::principals::revoke(&app.pool, Some("gone"), None)
        .await
        .unwrap();
    sqlx::query("insert into authorities (id, generation) values ('payments', 3)")
        .execute(&app.pool)
        .await
        .unwrap();
    let id = app.create(&tokens.owner, "mine", &refund(1)).await;

    // (method, path, body, expected for Nobody, Revoked, OtherDevice, Owner, Operator)
    let reads: Vec<(&str, String, [u16; 5])> = vec![
        (
            "GET",
            format!("/v1/commands/{id}"),
            [401, 401, 404, 200, 200],
        ),
        ("GET", "/v1/commands".into(), [401, 401, 200, 200, 200]),
        (
            "GET",
            format!("/v1/commands/{id}/history"),
            [401, 401, 404, 200, 200],
        ),
        (
            "GET",
            "/v1/authorities/payments".into(),
            [401, 401, 200, 200, 200],
        ),
        ("GET", "/v1/kinds".into(), [401, 401, 200, 200, 200]),
        ("GET", "/v1/holds".into(), [401, 401, 403, 403, 200]),
        ("GET", "/v1/state".into(), [401, 401, 403, 403, 200]),
        ("GET", "/metrics".into(), [401, 401, 403, 403, 200]),
        ("GET", "/healthz".into(), [200, 200, 200, 200, 200]),
        ("GET", "/readyz".into(), [200, 200, 200, 200, 200]),
    ];
    for (method, path, expected) in &reads {
        for (caller, want) in CALLERS.iter().zip(expected) {
            let got = call(&app, tokens.of(*caller), method, path, None).await;
            assert_eq!(got, *want, "{method} {path} as {caller:?}");
        }
    }

    // Writes: a fresh object for each caller, so one caller's success does
    // not change what the next one sees.
    for (caller, want) in CALLERS.iter().zip([401, 401, 404, 200, 200]) {
        let target = app
            .create(&tokens.owner, &format!("cancel-{caller:?}"), &refund(2))
            .await;
        let got = call(
            &app,
            tokens.of(*caller),
            "POST",
            &format!("/v1/commands/{target}/cancel"),
            None,
        )
        .await;
        assert_eq!(got, want, "cancel as {caller:?}");
        let state: String = sqlx::query_scalar("select state from commands where id = $1::uuid")
            .bind(&target)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        assert_eq!(
            state == "cancelled",
            want == 200,
            "cancel as {caller:?} changed the row only when allowed"
        );
    }
    for (caller, want) in CALLERS.iter().zip([401, 401, 202, 202, 202]) {
        let body = json!({"kind": "steer", "authority": "agent-7", "args": {"n": 1}});
        assert_eq!(
            call(
                &app,
                tokens.of(*caller),
                "POST",
                "/v1/commands",
                Some(&body)
            )
            .await,
            want,
            "submit as {caller:?}"
        );
    }
    for (caller, want) in CALLERS.iter().zip([401, 401, 202, 202, 202]) {
        let body = json!({"tool": "refund", "runId": format!("{caller:?}"), "args": {"amount": "9 EUR", "to": format!("{caller:?}@x.io")}});
        let mut req = app
            .client
            .post(app.url("/v1/invoke"))
            .header("Prefer", "wait=0")
            .json(&body);
        if let Some(t) = tokens.of(*caller) {
            req = req.bearer_auth(t);
        }
        assert_eq!(
            req.send().await.unwrap().status().as_u16(),
            want,
            "invoke as {caller:?}"
        );
    }
    for (n, (caller, want)) in CALLERS.iter().zip([401, 401, 404, 200, 200]).enumerate() {
        let hold = hold_of(&app, &tokens.owner, 100 + n).await;
        assert_eq!(
            call(
                &app,
                tokens.of(*caller),
                "GET",
                &format!("/v1/holds/{hold}"),
                None
            )
            .await,
            want,
            "read hold as {caller:?}"
        );
    }
    for action in ["release", "reject"] {
        for (n, (caller, want)) in CALLERS.iter().zip([401, 401, 403, 403, 200]).enumerate() {
            let hold = hold_of(
                &app,
                &tokens.owner,
                200 + n + if action == "reject" { 10 } else { 0 },
            )
            .await;
            let got = call(
                &app,
                tokens.of(*caller),
                "POST",
                &format!("/v1/holds/{hold}/{action}"),
                None,
            )
            .await;
            assert_eq!(got, want, "{action} as {caller:?}");
            let state: String = sqlx::query_scalar("select state from holds where id = $1::uuid")
                .bind(&hold)
                .fetch_one(&app.pool)
                .await
                .unwrap();
            assert_eq!(
                state == "open",
                want != 200,
                "{action} as {caller:?} decided only when allowed"
            );
        }
    }
}
