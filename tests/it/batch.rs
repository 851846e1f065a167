//! `POST /v1/commands/batch` (one commit for a device's whole queue, one
//! answer per item) and the group commit behind `POST /v1/commands`
//! (concurrent submissions share a statement; one bad row never fails its
//! neighbours).

use crate::harness::{TestApp, fresh_pool, problem, refund};
use command_ledger::db::NewCommand;
use command_ledger::db::group_commit::GroupCommit;
use command_ledger::db::{self, Request, Role};
use serde_json::{Value, json};
use uuid::Uuid;

fn item(key: &str, amount: i64) -> Value {
    let mut v = refund(amount);
    v["idempotency_key"] = json!(key);
    v
}

async fn batch(app: &TestApp, token: &str, items: Vec<Value>) -> reqwest::Response {
    app.client
        .post(app.url("/v1/commands/batch"))
        .bearer_auth(token)
        .json(&json!({ "items": items }))
        .send()
        .await
        .unwrap()
}

async fn answers(resp: reqwest::Response) -> Vec<Value> {
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    body["items"].as_array().unwrap().clone()
}

/// How many transactions wrote these commands.
async fn transactions(pool: &sqlx::PgPool, ids: &[Uuid]) -> i64 {
    sqlx::query_scalar("select count(distinct xmin::text) from commands where id = any($1)")
        .bind(ids)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn id_of(answer: &Value) -> Uuid {
    answer["command"]["id"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_batch_records_its_new_items_in_one_commit_and_answers_each_in_order() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-1", Role::Device).await;
    let mut bad_kind = item("q-3", 300);
    bad_kind["kind"] = json!("Not A Kind");
    let items = vec![
        item("q-1", 100),
        item("q-2", 200),
        bad_kind,
        json!({"kind": "refund", "authority": "payments"}),
        json!({"kind": "refund", "authority": "payments", "idempotency_key": null}),
        item("q-4", 400),
    ];
    let got = answers(batch(&app, &token, items).await).await;
    assert_eq!(got.len(), 6);
    for (i, a) in got.iter().enumerate() {
        assert_eq!(a["index"], i, "{a}");
    }
    for i in [0, 1, 5] {
        assert_eq!(got[i]["status"], 202, "{}", got[i]);
        assert_eq!(got[i]["disposition"], "new");
        assert_eq!(got[i]["command"]["state"], "pending");
        assert_eq!(got[i]["command"]["disposition"], "new");
    }
    assert_eq!(got[0]["command"]["idempotency_key"], "q-1");
    assert_eq!(got[5]["command"]["args"]["amount_minor"], 400);
    assert_eq!(got[2]["disposition"], "invalid");
    assert_eq!(got[2]["status"], 400);
    assert_eq!(got[2]["problem"]["type"], "/problems/invalid-body");
    assert_eq!(
        got[3]["problem"]["type"],
        "/problems/missing-idempotency-key"
    );
    assert_eq!(got[4]["disposition"], "invalid");
    assert!(got[2].get("command").is_none());

    let ids: Vec<Uuid> = [0, 1, 5].iter().map(|&i| id_of(&got[i])).collect();
    assert_eq!(
        app.command_count().await,
        3,
        "only the valid items are recorded"
    );
    assert_eq!(transactions(&app.pool, &ids).await, 1, "one commit");
    // Each history entry names the device.
    let actors: Vec<String> =
        sqlx::query_scalar("select distinct actor from command_history where command_id = any($1)")
            .bind(&ids)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(actors, vec!["device:kiosk-1".to_owned()]);
}

#[tokio::test]
async fn the_same_batch_sent_again_answers_the_same_commands_as_replays() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-1", Role::Device).await;
    let items = || vec![item("r-1", 1), item("r-2", 2), item("r-3", 3)];
    let first = answers(batch(&app, &token, items()).await).await;
    let again = answers(batch(&app, &token, items()).await).await;
    for (a, b) in first.iter().zip(&again) {
        assert_eq!(a["disposition"], "new");
        assert_eq!(b["disposition"], "replay");
        assert_eq!(b["status"], 200);
        assert_eq!(id_of(a), id_of(b));
    }
    assert_eq!(app.command_count().await, 3);

    // A single submission with one of the keys replays the same command.
    let single: Value = app
        .submit(&token, Some("r-2"), &refund(2))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(single["disposition"], "replay");
    assert_eq!(single["id"], first[1]["command"]["id"]);
}

#[tokio::test]
async fn a_key_reused_for_another_request_is_a_conflict_for_that_item_only() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-1", Role::Device).await;
    app.create(&token, "c-1", &refund(100)).await;
    let got = answers(
        batch(
            &app,
            &token,
            vec![
                item("c-1", 999),
                item("c-2", 5),
                // The same key twice in one batch: the same request is one
                // command; a different one is a conflict.
                item("c-2", 5),
                item("c-2", 6),
            ],
        )
        .await,
    )
    .await;
    assert_eq!(got[0]["disposition"], "conflict");
    assert_eq!(got[0]["status"], 422);
    assert_eq!(
        got[0]["problem"]["type"],
        "/problems/idempotency-key-conflict"
    );
    assert_eq!(got[1]["disposition"], "new");
    assert_eq!(got[2]["disposition"], "replay");
    assert_eq!(id_of(&got[1]), id_of(&got[2]));
    assert_eq!(got[3]["disposition"], "conflict");
    assert_eq!(app.command_count().await, 2);
}

#[tokio::test]
async fn an_unusable_batch_is_refused_whole_and_records_nothing() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-1", Role::Device).await;
    let resp = batch(&app, &token, vec![]).await;
    problem(resp, 400, "/problems/invalid-body").await;
    let too_many: Vec<Value> = (0..501).map(|i| item(&format!("t-{i}"), 1)).collect();
    let resp = batch(&app, &token, too_many).await;
    let body = problem(resp, 400, "/problems/invalid-body").await;
    assert!(
        body["detail"].as_str().unwrap().contains("1 to 500"),
        "{body}"
    );
    // Every item is a JSON object; anything else is a malformed batch.
    let resp = batch(&app, &token, vec![item("u-0", 1), json!("not an object")]).await;
    problem(resp, 400, "/problems/invalid-body").await;
    let resp = app
        .client
        .post(app.url("/v1/commands/batch"))
        .bearer_auth(&token)
        .json(&json!({"items": [item("u-1", 1)], "extra": true}))
        .send()
        .await
        .unwrap();
    problem(resp, 400, "/problems/invalid-body").await;
    let resp = app
        .client
        .post(app.url("/v1/commands/batch"))
        .json(&json!({"items": [item("u-1", 1)]}))
        .send()
        .await
        .unwrap();
    problem(resp, 401, "/problems/unauthorized").await;
    assert_eq!(app.command_count().await, 0);
}

#[tokio::test]
async fn a_full_batch_larger_than_a_single_body_is_accepted() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-1", Role::Device).await;
    // 500 items of about 1 KiB: far beyond the 64 KiB of a single submission.
    let items: Vec<Value> = (0..500)
        .map(|i| {
            let mut v = item(&format!("big-{i}"), i);
            v["args"]["note"] = json!("x".repeat(900));
            v
        })
        .collect();
    let got = answers(batch(&app, &token, items).await).await;
    assert!(got.iter().all(|a| a["disposition"] == "new"));
    let ids: Vec<Uuid> = got.iter().map(id_of).collect();
    assert_eq!(transactions(&app.pool, &ids).await, 1);
}

/// A pending row for `scope`, as admission would assemble it.
fn new_command(scope: Uuid, key: &str, args: &Value, actor: &str) -> NewCommand {
    let digest = sha2_of(key);
    let request = Request {
        scope,
        kind: "noop",
        authority_id: "payments",
        pinned_generation: None,
        run_id: None,
        args,
        canonical: args,
        canonical_rules: &[],
        request_digest: &digest,
        intent_digest: &digest,
        digest_version: 2,
        deadline_at: None,
        not_before: None,
        priority: 0,
        trace: None,
    };
    NewCommand::new(&request, key, None, actor)
}

fn sha2_of(s: &str) -> Vec<u8> {
    use sha2::Digest as _;
    sha2::Sha256::digest(s.as_bytes()).to_vec()
}

/// Inserts every row from a task of its own, all at once.
async fn all_at_once(
    group: &GroupCommit,
    rows: &[NewCommand],
) -> Vec<Result<Option<db::CommandRow>, sqlx::Error>> {
    let tasks: Vec<_> = rows
        .iter()
        .cloned()
        .map(|row| {
            let group = group.clone();
            tokio::spawn(async move { group.insert(&row).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test]
async fn concurrent_submissions_share_a_commit_and_each_keeps_its_actor() {
    let pool = fresh_pool().await;
    let a = crate::harness::device_principal(&pool, "dev-a").await;
    let b = crate::harness::device_principal(&pool, "dev-b").await;
    // One flusher: whatever arrives while it writes goes in its next statement.
    let group = GroupCommit::spawn(pool.clone(), crate::harness::ledger_backend(), 1, 256);
    let args = json!({"n": 1});
    let rows: Vec<NewCommand> = (0..40)
        .map(|i| {
            let (scope, actor) = if i % 2 == 0 {
                (a, "device:dev-a")
            } else {
                (b, "device:dev-b")
            };
            new_command(scope, &format!("g-{i}"), &args, actor)
        })
        .collect();
    let answers = all_at_once(&group, &rows).await;
    let ids: Vec<Uuid> = answers
        .into_iter()
        .map(|a| a.unwrap().expect("inserted").id)
        .collect();
    assert_eq!(ids.len(), 40);
    let commits = transactions(&pool, &ids).await;
    assert!(commits < 40, "40 rows in {commits} commits");
    let wrong: i64 = sqlx::query_scalar(
        "select count(*) from command_history h \
         join commands c on c.authority_id = h.authority_id and c.id = h.command_id \
         join principals p on p.id = c.scope \
         where c.id = any($1) and h.actor <> 'device:' || p.name",
    )
    .bind(&ids)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(wrong, 0, "every history entry names its own principal");
    // A key already taken answers None, as a single insert does.
    let again = new_command(a, "g-0", &args, "device:dev-a");
    assert!(group.insert(&again).await.unwrap().is_none());
}

#[tokio::test]
async fn one_bad_row_never_fails_its_neighbours() {
    let pool = fresh_pool().await;
    let a = crate::harness::device_principal(&pool, "dev-a").await;
    let group = GroupCommit::spawn(pool.clone(), crate::harness::ledger_backend(), 1, 256);
    let good = json!({"n": 1});
    // PostgreSQL cannot store U+0000 in jsonb: this row fails any statement it is in.
    let bad = json!({"n": "\u{0}"});
    let rows: Vec<NewCommand> = (0..20)
        .map(|i| {
            new_command(
                a,
                &format!("b-{i}"),
                if i == 7 { &bad } else { &good },
                "device:dev-a",
            )
        })
        .collect();
    let answers = all_at_once(&group, &rows).await;
    for (i, answer) in answers.iter().enumerate() {
        if i == 7 {
            assert!(answer.is_err(), "the bad row gets its own error");
        } else {
            assert!(
                matches!(answer, Ok(Some(row)) if row.idempotency_key == format!("b-{i}")),
                "row {i}: {answer:?}"
            );
        }
    }
    let n: i64 = sqlx::query_scalar("select count(*) from commands")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 19);
}

#[tokio::test]
async fn a_batch_item_whose_args_do_not_match_the_kinds_schema_is_refused_alone() {
    use crate::harness::{assert_names_fields, hold_count, malformed_refunds, quickstart_refund};
    use command_ledger::domain::admission::NearDuplicate;
    let app = TestApp::spawn_with(quickstart_refund(
        std::time::Duration::from_secs(5),
        NearDuplicate::Hold,
    ))
    .await;
    let token = app.token("kiosk-1", Role::Device).await;
    let refund_with = |key: Option<String>, args: Value| {
        let mut v = json!({"kind": "refund", "authority": "payments", "args": args});
        if let Some(key) = key {
            v["idempotency_key"] = json!(key);
        }
        v
    };
    let malformed = malformed_refunds();
    // Each malformed refund keyed (the one-statement path) and keyless (one
    // by one, under the intent guard), between two good ones.
    let mut items = vec![refund_with(
        Some("good-1".into()),
        json!({"to": "x@y.z", "amount": "1.00 USD"}),
    )];
    for (i, (args, _)) in malformed.iter().enumerate() {
        items.push(refund_with(Some(format!("bad-{i}")), args.clone()));
        items.push(refund_with(None, args.clone()));
    }
    items.push(refund_with(
        None,
        json!({"to": "y@y.z", "amount": "2.00 USD"}),
    ));
    let got = answers(batch(&app, &token, items).await).await;
    assert_eq!(got.len(), 2 + 2 * malformed.len());
    for (i, (_, fields)) in malformed.iter().enumerate() {
        for answer in [&got[1 + 2 * i], &got[2 + 2 * i]] {
            assert_eq!(
                (&answer["status"], &answer["disposition"]),
                (&json!(400), &json!("invalid")),
                "{answer}"
            );
            assert!(answer.get("command").is_none(), "{answer}");
            assert_names_fields(&answer["problem"], fields);
        }
    }
    let last = got.last().unwrap();
    for good in [&got[0], last] {
        assert_eq!(
            (&good["status"], &good["disposition"]),
            (&json!(202), &json!("new")),
            "{good}"
        );
    }
    assert_eq!(app.command_count().await, 2, "only the good items");
    assert_eq!(hold_count(&app.pool).await, 0);
}

/// Each item is held to a single submission's limit (64 KiB): one item
/// larger than that is answered 413 in its place, the others as usual, as
/// each would be alone.
#[tokio::test]
async fn an_item_larger_than_a_single_submission_is_refused_in_its_place() {
    let app = TestApp::spawn().await;
    let token = app.token("kiosk-1", Role::Device).await;
    let mut big = item("too-big", 1);
    big["args"]["note"] = json!("x".repeat(70 * 1024));
    // Alone, it is refused.
    let mut alone = refund(1);
    alone["args"] = big["args"].clone();
    let alone = app.submit(&token, Some("too-big"), &alone).await;
    problem(alone, 413, "/problems/body-too-large").await;
    let got = answers(
        batch(
            &app,
            &token,
            vec![item("small", 2), big, item("small-2", 3)],
        )
        .await,
    )
    .await;
    let shape: Vec<(u64, &str)> = got
        .iter()
        .map(|a| {
            (
                a["status"].as_u64().unwrap(),
                a["disposition"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(shape, vec![(202, "new"), (413, "invalid"), (202, "new")]);
    assert_eq!(got[1]["problem"]["type"], "/problems/body-too-large");
    assert_eq!(app.command_count().await, 2);
}

/// A key named twice anywhere in a JSON body is refused (400, naming the
/// key and where it is) on every path that reads one, and nothing is
/// recorded: two parsers may read such a body differently.
#[tokio::test]
async fn a_body_naming_a_key_twice_is_refused_on_every_path() {
    let app = TestApp::spawn_with(crate::harness::refund_policy(
        std::time::Duration::from_secs(5),
        command_ledger::domain::admission::NearDuplicate::Hold,
    ))
    .await;
    let token = app.token("kiosk-1", Role::Device).await;
    let operator = app.token("ops", Role::Operator).await;
    let paths: [(&str, &str, &str, &str); 5] = [
        (
            "/v1/commands",
            r#"{"kind":"refund","authority":"payments","args":{"to":"ada@example.com","amount":"1.00 USD","amount":"900.00 USD"}}"#,
            "/args/amount",
            "amount",
        ),
        (
            "/v1/commands/batch",
            r#"{"items":[{"idempotency_key":"b-1","kind":"refund","authority":"payments","args":{"amount":"1.00 USD"}},
                         {"idempotency_key":"b-2","kind":"refund","kind":"charge","authority":"payments"}]}"#,
            "/items/1/kind",
            "kind",
        ),
        (
            "/v1/invoke",
            r#"{"tool":"refund","runId":"r-1","args":{"customer":"a@b.c","amount":"1 USD","customer":"z@b.c"}}"#,
            "/args/customer",
            "customer",
        ),
        (
            "/api/invoke",
            r#"{"tool":"refund","tool":"refund","args":{"amount":"1 USD"}}"#,
            "/tool",
            "tool",
        ),
        (
            "/v1/intents/explain",
            r#"{"kind":"refund","authority":"payments","args":{"a":{"b":1,"b":2}}}"#,
            "/args/a/b",
            "b",
        ),
    ];
    for (path, body, pointer, key) in paths {
        let resp = app
            .client
            .post(app.url(path))
            .bearer_auth(&token)
            .header("Idempotency-Key", "dup-1")
            .header("Content-Type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let p = problem(resp, 400, "/problems/invalid-body").await;
        assert_eq!(p["errors"][0]["pointer"], pointer, "{path}: {p}");
        assert!(
            p["detail"].as_str().unwrap().contains(&format!("{key:?}")),
            "{path}: {p}"
        );
    }
    // An operator's body too (releasing a hold through /api/release).
    let resp = app
        .client
        .post(app.url("/api/release"))
        .bearer_auth(&operator)
        .header("Content-Type", "application/json")
        .body(format!(r#"{{"id":"{0}","id":"{0}"}}"#, Uuid::now_v7()))
        .send()
        .await
        .unwrap();
    let p = problem(resp, 400, "/problems/invalid-body").await;
    assert_eq!(p["errors"][0]["pointer"], "/id");
    assert_eq!(app.command_count().await, 0);
    assert_eq!(crate::harness::hold_count(&app.pool).await, 0);
}
