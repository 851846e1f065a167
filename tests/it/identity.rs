//! The identity digest written at submit (migration 0050): the service's
//! text of `identity-v2` is the database's byte for byte, on generated
//! rows and on commands recorded through the API, one at a time and in a
//! batch; and a stored digest that differs is reported by `verify`, not
//! trusted.

use chrono::{DateTime, Utc};
use command_ledger::db::Role;
use command_ledger::domain::identity::{Identity, jsonb_text};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::harness::{TestApp, fresh_database};

/// A row's immutable columns, as generated.
#[derive(Debug, Clone)]
struct Row {
    id: Uuid,
    scope: Uuid,
    key: String,
    request_digest: Vec<u8>,
    digest_version: i16,
    kind: String,
    authority: String,
    run_id: Option<String>,
    args: Value,
    canonical: Value,
    created_at: DateTime<Utc>,
    deadline_at: Option<DateTime<Utc>>,
    pinned: Option<i64>,
    intent_digest: Option<Vec<u8>>,
    rules: Vec<String>,
    epoch: Option<i32>,
}

impl Row {
    fn identity(&self) -> Identity<'_> {
        Identity {
            id: self.id,
            scope: self.scope,
            idempotency_key: &self.key,
            request_digest: &self.request_digest,
            digest_version: self.digest_version,
            kind: &self.kind,
            authority_id: &self.authority,
            run_id: self.run_id.as_deref(),
            args: &self.args,
            canonical: &self.canonical,
            created_at: self.created_at,
            deadline_at: self.deadline_at,
            pinned_generation: self.pinned,
            intent_digest: self.intent_digest.as_deref(),
            canonical_rules: &self.rules,
            intent_epoch: self.epoch,
        }
    }
}

/// Text jsonb can hold (no NUL), heavy in what escaping and key order
/// turn on: control characters, quotes, backslashes, multi-byte letters,
/// keys of one length that differ in their bytes.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[^\\x00]{0,8}",
        "[\\x01-\\x1f\"\\\\/a\u{7f}é\u{2028}😀]{0,6}",
        "[a-cA-C]{0,3}",
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        (-1.0e3f64..1.0e3).prop_map(|f| json!(f)),
        prop::sample::select(vec![0.0, -0.0, 1e21, 1e-7, 1.5e300, 5e-324, 100.0, 0.1])
            .prop_map(|f| json!(f)),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn time() -> impl Strategy<Value = DateTime<Utc>> {
    // 1970 to 2096, to the microsecond, as the row stores a time.
    (0i64..4_000_000_000_000_000).prop_map(|us| DateTime::from_timestamp_micros(us).unwrap())
}

fn row() -> impl Strategy<Value = Row> {
    (
        (
            any::<u128>(),
            any::<u128>(),
            "[^\\x00]{1,20}",
            prop::collection::vec(any::<u8>(), 32),
        ),
        (
            1i16..4,
            "[a-z][a-z0-9_.-]{0,8}",
            "[A-Za-z0-9][A-Za-z0-9_.:-]{0,10}",
            prop::option::of(text()),
        ),
        (value(), value(), time(), prop::option::of(time())),
        (
            prop::option::of(any::<i64>()),
            prop::option::of(prop::collection::vec(any::<u8>(), 32)),
            prop::collection::vec(text(), 0..3),
            prop::option::of(1i32..1000),
        ),
    )
        .prop_map(
            |(
                (id, scope, key, request_digest),
                (digest_version, kind, authority, run_id),
                (args, canonical, created_at, deadline_at),
                (pinned, intent_digest, rules, epoch),
            )| Row {
                id: Uuid::from_u128(id),
                scope: Uuid::from_u128(scope),
                key,
                request_digest,
                digest_version,
                kind,
                authority,
                run_id,
                args,
                canonical,
                created_at,
                deadline_at,
                pinned,
                intent_digest,
                rules,
                epoch,
            },
        )
}

#[tokio::test]
async fn the_services_identity_text_is_the_databases_on_generated_rows() {
    let (_, pool) = fresh_database().await;
    let mut runner = TestRunner::deterministic();
    let rows: Vec<Row> = (0..500)
        .map(|_| row().new_tree(&mut runner).unwrap().current())
        .collect();
    let col = |f: &dyn Fn(&Row) -> Value| rows.iter().map(f).collect::<Vec<Value>>();
    // Every column sent as jsonb, so that one statement takes them all.
    let db: Vec<(String, Vec<u8>)> = sqlx::query_as(
        "select r.args::text,
                ledger_identity_digest(
                    (r.c ->> 0)::uuid, (r.c ->> 1)::uuid, r.c ->> 2, decode(r.c ->> 3, 'hex'),
                    (r.c ->> 4)::int, r.c ->> 5, r.c ->> 6, r.c ->> 7, r.args, r.canonical,
                    (r.c ->> 8)::timestamptz, (r.c ->> 9)::timestamptz, (r.c ->> 10)::bigint,
                    decode(r.c ->> 11, 'hex'), array(select jsonb_array_elements_text(r.c -> 12)),
                    (r.c ->> 13)::int)
         from unnest($1::jsonb[], $2::jsonb[], $3::jsonb[]) with ordinality as r(c, args, canonical, n)
         order by r.n",
    )
    .bind(col(&|r| {
        json!([
            r.id,
            r.scope,
            r.key,
            hex::encode(&r.request_digest),
            r.digest_version,
            r.kind,
            r.authority,
            r.run_id,
            r.created_at.to_rfc3339(),
            r.deadline_at.map(|d| d.to_rfc3339()),
            r.pinned,
            r.intent_digest.as_ref().map(hex::encode),
            r.rules,
            r.epoch,
        ])
    }))
    .bind(col(&|r| r.args.clone()))
    .bind(col(&|r| r.canonical.clone()))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(db.len(), rows.len());
    for (row, (args_text, digest)) in rows.iter().zip(db) {
        assert_eq!(jsonb_text(&row.args), args_text, "the text of {}", row.args);
        assert_eq!(
            row.identity().digest().to_vec(),
            digest,
            "the identity of {row:?}: the service hashed {}",
            row.identity().text()
        );
    }
}

/// The commands whose stored identity digest is not the one the database
/// computes from their columns now, or is missing.
async fn differing(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "select idempotency_key from commands c
         where c.identity_digest is distinct from
               ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                      c.digest_version, c.kind, c.authority_id, c.run_id, c.args,
                                      c.canonical, c.created_at, c.deadline_at, c.pinned_generation,
                                      c.intent_digest, c.canonical_rules, c.intent_epoch)
         order by 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Arguments whose text turns on every rule of jsonb's printing.
fn awkward_args(n: i64) -> Value {
    json!({
        "n": n, "ratio": 12.5, "tiny": 1.5e-7, "huge": 1e21, "zero": -0.0, "whole": 100.0,
        "to": "Ada \"Lovelace\" <ada@example.com>\n\t\u{1}\u{8}é😀",
        "bb": [1, {"zz": null, "y": true, "ab": {}}], "a": []
    })
}

#[tokio::test]
async fn commands_recorded_through_the_api_carry_the_databases_identity() {
    let app = TestApp::spawn().await;
    let token = app.token("dev-1", Role::Device).await;
    let one = json!({
        "kind": "noop", "authority": "payments", "run_id": "run-\"42\"\\",
        "deadline": "2999-01-01T00:00:00.123456789Z", "args": awkward_args(1)
    });
    let resp = app.submit(&token, Some("one"), &one).await;
    assert_eq!(resp.status(), 202, "{}", resp.text().await.unwrap());
    let items: Vec<Value> = (2..6)
        .map(|n| {
            json!({"kind": "noop", "authority": "payments", "idempotency_key": format!("batch-{n}"),
                   "args": awkward_args(n)})
        })
        .collect();
    let resp = app
        .client
        .post(app.url("/v1/commands/batch"))
        .bearer_auth(&token)
        .json(&json!({ "items": items }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let stored: i64 = sqlx::query_scalar("select count(identity_digest) from commands")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 5, "every command recorded carries its digest");
    assert_eq!(differing(&app.pool).await, Vec::<String>::new());
}
