//! The baseline (migrations 0031-0032) against the legacy chain it replaced
//! (migrations/legacy/0001-0030): a fresh database and one that ran the
//! chain end with the same schema; a populated database from before the
//! baseline upgrades without losing a row; one migrated by a newer version
//! is refused, untouched.

use std::collections::BTreeMap;
use std::path::Path;

use command_ledger::db;
use sqlx::PgPool;
use uuid::Uuid;

use crate::harness::empty_database;
use crate::schema_file::{normalise, pg_dump};

/// The schema as pg_dump prints it, owners and rights included, and the
/// reference tables' rows.
fn schema_of(pg_dump: &Path, url: &str) -> String {
    let out = std::process::Command::new(pg_dump)
        .args(["--schema-only", url])
        .output()
        .expect("pg_dump runs");
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = std::process::Command::new(pg_dump)
        .args(["--data-only", "--inserts", "-t", "command_states"])
        .args([
            "-t",
            "command_transitions",
            "-t",
            "ledger_distribution",
            url,
        ])
        .output()
        .expect("pg_dump runs");
    assert!(data.status.success());
    normalise(&format!(
        "{}\n{}",
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(data.stdout).unwrap()
    ))
}

/// Fails, showing where, unless the databases at `baseline` and `other`
/// have one schema; returns it.
fn assert_same_schema(pg_dump: &Path, baseline: &str, other: &str) -> String {
    let want = schema_of(pg_dump, baseline);
    let got = schema_of(pg_dump, other);
    assert!(want.contains("CREATE TABLE public.commands"));
    if want != got {
        let first = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let around = |s: &str| {
            s.lines()
                .skip(first.saturating_sub(8))
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "the schemas differ at line {first}:\n--- the baseline\n{}\n--- the other\n{}",
            around(&want),
            around(&got)
        );
    }
    got
}

/// The migrations a fresh database runs: the baseline (roles, schema) and
/// every one after it.
fn since_baseline() -> Vec<i64> {
    db::migrations::MIGRATOR.iter().map(|m| m.version).collect()
}

async fn versions(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar("select version from _sqlx_migrations where success order by version")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// A fresh database: the baseline.
async fn baseline_database() -> (String, PgPool) {
    let (url, pool) = empty_database().await;
    db::migrate(&pool).await.unwrap();
    assert_eq!(versions(&pool).await, since_baseline());
    (url, pool)
}

#[tokio::test]
async fn a_fresh_database_and_one_that_ran_the_legacy_chain_have_one_schema() {
    let Some(pg_dump) = pg_dump() else {
        return;
    };
    let (fresh_url, _fresh) = baseline_database().await;

    // Made when only the first legacy migration existed, then migrated by
    // this version: the rest of the chain, and the baseline recorded.
    let (old_url, old) = empty_database().await;
    db::migrations::migrate_legacy_to(&old, 1).await.unwrap();
    assert_eq!(versions(&old).await, [1]);
    db::migrate(&old).await.unwrap();
    let mut expected: Vec<i64> = (1..=30).collect();
    expected.extend(since_baseline());
    assert_eq!(versions(&old).await, expected);
    assert!(db::migrations_current(&old).await.unwrap());

    let old_schema = assert_same_schema(&pg_dump, &fresh_url, &old_url);
    // Migrating again changes nothing.
    db::migrate(&old).await.unwrap();
    assert_eq!(versions(&old).await, expected);
    assert_eq!(schema_of(&pg_dump, &old_url), old_schema);
}

/// The tables and their columns.
async fn columns(pool: &PgPool) -> Vec<(String, Vec<String>)> {
    sqlx::query_as(
        "select table_name::text, array_agg(column_name::text order by column_name)
         from information_schema.columns
         where table_schema = 'public' and table_name in (
             select table_name from information_schema.tables
             where table_schema = 'public' and table_type = 'BASE TABLE'
               and table_name not in ('_sqlx_migrations', 'command_states', 'command_transitions',
                                      'ledger_distribution'))
         group by table_name",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Every row of every table in `tables` (all but the migrations' own
/// reference tables, which they may change), as JSON text of the columns listed
/// there (those it had before an upgrade), table by table.
async fn every_row(
    pool: &PgPool,
    tables: &[(String, Vec<String>)],
) -> BTreeMap<String, Vec<String>> {
    let mut rows = BTreeMap::new();
    for (table, columns) in tables {
        let mut of: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "select (select jsonb_object_agg(e.key, e.value) from jsonb_each(to_jsonb(t)) e
                     where e.key = any($1))::text
             from {table} t"
        )))
        .bind(columns)
        .fetch_all(pool)
        .await
        .unwrap();
        of.sort();
        rows.insert(table.clone(), of);
    }
    rows
}

/// At 0026: commands in every state on two authorities, with their history,
/// queue and in-flight rows; a lease; a hold; a resolution; a coalesced
/// request.
async fn populate_0026(pool: &PgPool) {
    let run = |sql: String| async move {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .unwrap()
    };
    let paths: &[&[&str]] = &[
        &[],
        &["prepared"],
        &["prepared", "effect_started"],
        &["prepared", "effect_started", "applied"],
        &["prepared", "effect_started", "failed"],
        &["prepared", "effect_started", "ambiguous"],
        &["cancelled"],
        &["prepared", "expired"],
    ];
    let principal: Uuid = sqlx::query_scalar(
        "insert into principals (id, name, role) values (gen_random_uuid(), 'kiosk', 'device') returning id",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    run("insert into authorities (id, generation, lease_holder, lease_expires_at) \
         values ('payments', 1, 'custodian-a', now() + interval '1 hour'), ('steering', 1, null, null)"
        .to_owned())
    .await;
    for (n, path) in paths.iter().enumerate() {
        for authority in ["payments", "steering"] {
            let ids: Vec<Uuid> = sqlx::query_scalar(
                "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, \
                                       authority_id, args, canonical, intent_digest) \
                 select gen_random_uuid(), $1, $2 || '-' || $3 || '-' || i, sha256(($2 || $3 || i)::bytea), 2, \
                        'refund', $2, jsonb_build_object('n', i), jsonb_build_object('n', i), \
                        sha256(($2 || $3 || i || 'intent')::bytea) \
                 from generate_series(1, 3) as i returning id",
            )
            .bind(principal)
            .bind(authority)
            .bind(n.to_string())
            .fetch_all(pool)
            .await
            .unwrap();
            for step in *path {
                sqlx::query(
                    "update commands set state = $2, authority_generation = 1, \
                     result = case when $2 = 'applied' then '{\"ok\": true}'::jsonb end, \
                     error = case when $2 in ('failed', 'ambiguous') then '{\"why\": \"no\"}'::jsonb end \
                     where id = any($1)",
                )
                .bind(&ids)
                .bind(step)
                .execute(pool)
                .await
                .unwrap();
            }
            if path.last() == Some(&"ambiguous") && authority == "payments" {
                run(format!(
                    "insert into command_resolutions (command_id, authority_id, outcome, evidence, source, \
                     actor, anchor_hash, hash) values ('{}', 'payments', 'applied', 'the bank says so', \
                     'operator', 'operator:ops', '', '')",
                    ids[0]
                ))
                .await;
            }
            if path.is_empty() && authority == "payments" {
                run(format!(
                    "insert into holds (id, scope, kind, authority_id, args, canonical, request_digest, \
                     intent_digest, digest_version, resembles) values (gen_random_uuid(), '{principal}', \
                     'refund', 'payments', '{{}}', '{{}}', sha256('h'), sha256('h'), 2, '{}')",
                    ids[0]
                ))
                .await;
                run(format!(
                    "select ledger_remember_coalesced('payments', '{principal}', sha256('again'), '{}', null)",
                    ids[1]
                ))
                .await;
            }
        }
    }
}

#[tokio::test]
async fn a_populated_0026_database_upgrades_without_losing_a_row_or_an_entry() {
    let (url, pool) = empty_database().await;
    db::migrations::migrate_legacy_to(&pool, 26).await.unwrap();
    populate_0026(&pool).await;
    let tables = columns(&pool).await;
    let before = every_row(&pool, &tables).await;
    assert_eq!(before["commands"].len(), 48);
    assert_eq!(before["command_history"].len(), 48 + 6 * (2 * 3 + 3 * 3));
    for table in [
        "command_queue",
        "command_in_flight",
        "holds",
        "command_resolutions",
        "coalesced_requests",
        "authorities",
    ] {
        assert!(!before[table].is_empty(), "{table} is populated");
    }

    db::migrate(&pool).await.unwrap();
    let mut expected: Vec<i64> = (1..=30).collect();
    expected.extend(since_baseline());
    assert_eq!(versions(&pool).await, expected);
    let after = every_row(&pool, &tables).await;
    for (table, rows) in &before {
        assert_eq!(&after[table], rows, "{table}: every row as it was");
    }
    let breaks: Vec<_> = db::verify::chains(&pool, None, None)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|c| c.breaks)
        .collect();
    assert!(breaks.is_empty(), "{breaks:?}");
    assert!(
        db::verify::resolutions(&pool, None, None)
            .await
            .unwrap()
            .is_empty()
    );

    // And the schema is the baseline's.
    if let Some(pg_dump) = pg_dump() {
        let (fresh_url, _fresh) = baseline_database().await;
        assert_same_schema(&pg_dump, &fresh_url, &url);
    }
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_version_is_refused_and_left_as_it_was() {
    let (_url, pool) = baseline_database().await;
    sqlx::query(
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time) \
         values (9999, 'from the future', true, '\\x00', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let e = db::migrate(&pool).await.unwrap_err();
    assert!(matches!(e, db::DbError::NewerDatabase(9999)), "{e:?}");
    assert!(
        e.to_string()
            .contains("holds migration 9999, which this command-ledger does not know"),
        "{e}"
    );
    let mut expected = since_baseline();
    expected.push(9999);
    assert_eq!(versions(&pool).await, expected);
}
