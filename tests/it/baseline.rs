//! The baseline (migrations 0042-0043) against the legacy chain it replaced
//! (migrations/legacy/0001-0041: 0001-0030, then from the earlier baseline
//! 0031-0032 on): a fresh database and ones that ran the chain, from its
//! start or from the earlier baseline, end with one schema; populated
//! databases from before each baseline (at 0026 and at 0039) upgrade
//! without losing a row or a history entry, and their hash chains still
//! verify; one migrated by a newer version is refused, untouched.
//!
//! With `TEST_CITUS=1` every database here is a Citus one, distributed as
//! `migrate` left it at its version. There each worker is compared too,
//! and what is not compared is said in [`same_schema`]; the upgrade of a
//! populated database from 0026 is not run (0028 cannot run on a database
//! distributed before it).

use std::collections::BTreeMap;

use command_ledger::db;
use sqlx::PgPool;
use uuid::Uuid;

use crate::harness::{citus, empty_ledger_database};
use crate::schema_file::pg_dump;

mod same_schema;
use same_schema::{
    SHARDS_DISTRIBUTED_BEFORE_0033_LACK, assert_same_schema, assert_same_workers, schema_of,
};

/// The migrations a fresh database runs: the baseline (roles, schema) and
/// every one after it.
fn since_baseline() -> Vec<i64> {
    db::migrations::MIGRATOR.iter().map(|m| m.version).collect()
}

/// What a database made at legacy migration `start` holds once `migrate`
/// upgraded it: the legacy chain from the first migration of `start`'s
/// stretch (the earlier baselines recorded), then [`since_baseline`].
fn upgraded_from(start: i64) -> Vec<i64> {
    let first = db::migrations::STRETCHES
        .iter()
        .find(|s| (s.first..=s.last).contains(&start))
        .unwrap()
        .first;
    let mut versions: Vec<i64> = db::migrations::LEGACY_MIGRATOR
        .iter()
        .map(|m| m.version)
        .filter(|v| *v >= first)
        .collect();
    versions.extend(since_baseline());
    versions
}

async fn versions(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar("select version from _sqlx_migrations where success order by version")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// A fresh database: the baseline.
async fn baseline_database() -> (String, PgPool) {
    let (url, pool) = empty_ledger_database().await;
    db::migrate(&pool).await.unwrap();
    assert_eq!(versions(&pool).await, since_baseline());
    (url, pool)
}

/// A database made when legacy migration `version` was the last, as
/// `migrate` made it then.
async fn legacy_database(version: i64) -> (String, PgPool) {
    let (url, pool) = empty_ledger_database().await;
    db::migrations::migrate_legacy_to(&pool, version)
        .await
        .unwrap();
    let held = versions(&pool).await;
    assert_eq!(held.last(), Some(&version));
    assert!(!held.contains(&db::migrations::ROLES_MIGRATION));
    (url, pool)
}

#[tokio::test]
async fn a_fresh_database_and_ones_that_ran_the_legacy_chain_have_one_schema() {
    let Some(pg_dump) = pg_dump() else {
        return;
    };
    let (fresh_url, fresh) = baseline_database().await;

    // Made when only the first legacy migration existed, and when the
    // earlier baseline was new; then migrated by this version: the rest of
    // the chain, and the baselines recorded.
    for start in [1, db::migrations::STRETCHES[0].replaced_by] {
        let (old_url, old) = legacy_database(start).await;
        db::migrate(&old).await.unwrap();
        assert_eq!(versions(&old).await, upgraded_from(start), "from {start}");
        assert!(db::migrations_current(&old).await.unwrap());

        let old_schema = assert_same_schema(&pg_dump, &fresh_url, &old_url);
        // Distributed before 0033 (at 0030, or at the earlier baseline).
        assert_same_workers(&fresh, &old, &SHARDS_DISTRIBUTED_BEFORE_0033_LACK).await;
        // Migrating again changes nothing.
        db::migrate(&old).await.unwrap();
        assert_eq!(versions(&old).await, upgraded_from(start));
        assert_eq!(schema_of(&pg_dump, &old_url), old_schema);
    }
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
        // The columns are picked here: Citus runs no set-returning function
        // (jsonb_each) beside a distributed table's rows.
        let whole: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "select to_jsonb(t)::text from {table} t"
        )))
        .fetch_all(pool)
        .await
        .unwrap();
        let mut of: Vec<String> = whole
            .iter()
            .map(|row| {
                let mut row: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(row).unwrap();
                row.retain(|column, _| columns.contains(column));
                serde_json::Value::Object(row).to_string()
            })
            .collect();
        of.sort();
        rows.insert(table.clone(), of);
    }
    rows
}

/// The paths the populated commands take from `pending`, one batch each.
const PATHS: &[&[&str]] = &[
    &[],
    &["prepared"],
    &["prepared", "effect_started"],
    &["prepared", "effect_started", "applied"],
    &["prepared", "effect_started", "failed"],
    &["prepared", "effect_started", "ambiguous"],
    &["cancelled"],
    &["prepared", "expired"],
];

/// Populates a database at legacy migration `version` (0026 or later)
/// through SQL of that version: on two authorities (one leased), three
/// commands down each of [`PATHS`], with their history, queue and
/// in-flight rows; an open hold and a coalesced request; an ambiguous
/// command resolved. From 0029 on also: webhook endpoints (one disabled),
/// the events of the commands that finished, attempts (one event delivered
/// at its second, one waiting for its next), and two holds decided (one
/// released into a command, one rejected), each resolution of the other
/// kind too. Returns how many commands and history entries it made.
async fn populate(pool: &PgPool, version: i64) -> (usize, usize) {
    let run = |sql: String| async move {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .unwrap()
    };
    let webhooks = version >= 29;
    // Its fleet first: on Citus a principal's trigger may not make one (a
    // statement on a reference table from its shard's trigger).
    let principal = Uuid::new_v4();
    run(format!(
        "insert into fleets (id, name) values ('{principal}', 'kiosk'); \
         insert into principals (id, name, role, fleet_id) values ('{principal}', 'kiosk', 'device', '{principal}')"
    ))
    .await;
    run("insert into authorities (id, generation, lease_holder, lease_expires_at) \
         values ('payments', 1, 'custodian-a', now() + interval '1 hour'), ('steering', 1, null, null)"
        .to_owned())
    .await;
    if webhooks {
        run(format!(
            "insert into webhook_endpoints (id, scope, url, kinds, states, secret, created_by, disabled_at) values \
             (gen_random_uuid(), '{principal}', 'https://hooks.example/outcomes', array['refund'], null, \
              repeat('s', 32), 'operator:ops', null), \
             (gen_random_uuid(), '{principal}', 'https://hooks.example/failures', null, array['failed'], \
              repeat('t', 32), 'operator:ops', null), \
             (gen_random_uuid(), '{principal}', 'https://hooks.example/gone', null, null, \
              repeat('u', 32), 'operator:ops', now())"
        ))
        .await;
    }
    let mut entries = 0;
    for (n, path) in PATHS.iter().enumerate() {
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
            entries += ids.len() * (1 + path.len());
            for step in *path {
                sqlx::query(
                    "update commands set state = $3, authority_generation = 1, \
                     result = case when $3 = 'applied' then '{\"ok\": true}'::jsonb end, \
                     error = case when $3 in ('failed', 'ambiguous') then '{\"why\": \"no\"}'::jsonb end \
                     where authority_id = $1 and id = any($2)",
                )
                .bind(authority)
                .bind(&ids)
                .bind(step)
                .execute(pool)
                .await
                .unwrap();
            }
            if path.last() == Some(&"ambiguous") {
                let (outcome, source) = if authority == "payments" {
                    ("applied", "operator")
                } else {
                    ("not_applied", "probe")
                };
                if authority == "payments" || webhooks {
                    run(format!(
                        "insert into command_resolutions (command_id, authority_id, outcome, evidence, source, \
                         actor, anchor_hash, hash) values ('{}', '{authority}', '{outcome}', 'the bank says so', \
                         '{source}', '{source}:ops', '', '')",
                        ids[0]
                    ))
                    .await;
                }
            }
            if path.is_empty() && authority == "payments" {
                // A hold of its own request each (one open hold a request).
                let hold = |request: &str| {
                    format!(
                        "insert into holds (id, scope, kind, authority_id, args, canonical, request_digest, \
                         intent_digest, digest_version, resembles) values (gen_random_uuid(), '{principal}', \
                         'refund', 'payments', '{{}}', '{{}}', sha256('{request}'), sha256('h'), 2, '{}') \
                         returning id",
                        ids[0]
                    )
                };
                run(hold("h")).await;
                run(format!(
                    "select ledger_remember_coalesced('payments', '{principal}', sha256('again'), '{}', null)",
                    ids[1]
                ))
                .await;
                if webhooks {
                    for (decision, command) in [("released", Some(ids[2])), ("rejected", None)] {
                        let held: Uuid = sqlx::query_scalar(sqlx::AssertSqlSafe(hold(decision)))
                            .fetch_one(pool)
                            .await
                            .unwrap();
                        sqlx::query(
                            "update holds set state = $2, decided_at = now(), decided_by = 'operator:ops', \
                             decision_reason = 'looked at it', command_id = $3 where id = $1",
                        )
                        .bind(held)
                        .bind(decision)
                        .bind(command)
                        .execute(pool)
                        .await
                        .unwrap();
                    }
                }
            }
        }
    }
    if webhooks {
        let events: Vec<(Uuid, String)> =
            sqlx::query_as("select id, authority_id from webhook_events order by id limit 2")
                .fetch_all(pool)
                .await
                .unwrap();
        assert_eq!(events.len(), 2, "the finished commands' events");
        for (n, (event, authority)) in events.iter().enumerate() {
            sqlx::query(
                "insert into webhook_attempts (authority_id, event_id, n, at, status, error, duration_ms) \
                 values ($1, $2, 1, now(), 503, 'unavailable', 40)",
            )
            .bind(authority)
            .bind(event)
            .execute(pool)
            .await
            .unwrap();
            if n == 0 {
                sqlx::query(
                    "insert into webhook_attempts (authority_id, event_id, n, at, status, error, duration_ms) \
                     values ($1, $2, 2, now(), 204, null, 12)",
                )
                .bind(authority)
                .bind(event)
                .execute(pool)
                .await
                .unwrap();
            }
            // No now() inside a CASE: Citus refuses it in a distributed update.
            sqlx::query(if n == 0 {
                "update webhook_events set attempts = 2, state = 'delivered', delivered_at = now(), \
                 next_attempt_at = null where authority_id = $1 and id = $2"
            } else {
                "update webhook_events set attempts = 1, next_attempt_at = now() + interval '1 minute', \
                 last_error = 'unavailable' where authority_id = $1 and id = $2"
            })
            .bind(authority)
            .bind(event)
            .execute(pool)
            .await
            .unwrap();
        }
    }
    (2 * 3 * PATHS.len(), entries)
}

/// Upgrades the populated database at `version` and checks that every row
/// of every table it had is as it was (in the columns it had), that the
/// history's hash chains and the resolutions verify, and that the schema is
/// a fresh database's.
async fn upgrades_without_losing_a_row_or_an_entry(version: i64) {
    let (url, pool) = legacy_database(version).await;
    let (commands, entries) = populate(&pool, version).await;
    let tables = columns(&pool).await;
    let before = every_row(&pool, &tables).await;
    assert_eq!(before["commands"].len(), commands);
    assert_eq!(before["command_history"].len(), entries);
    let mut populated = vec![
        "command_queue",
        "command_in_flight",
        "holds",
        "command_resolutions",
        "coalesced_requests",
        "authorities",
        "principals",
    ];
    if version >= 29 {
        populated.extend(["webhook_endpoints", "webhook_events", "webhook_attempts"]);
    }
    for table in populated {
        assert!(!before[table].is_empty(), "{table} is populated");
    }

    db::migrate(&pool).await.unwrap();
    assert_eq!(versions(&pool).await, upgraded_from(version));
    let after = every_row(&pool, &tables).await;
    for (table, rows) in &before {
        assert_eq!(&after[table], rows, "{table}: every row as it was");
    }
    let chains = db::verify::chains(&pool, None, None).await.unwrap();
    assert_eq!(chains.len(), commands);
    let breaks: Vec<_> = chains.into_iter().flat_map(|c| c.breaks).collect();
    assert!(breaks.is_empty(), "{breaks:?}");
    assert!(
        db::verify::resolutions(&pool, None, None)
            .await
            .unwrap()
            .is_empty()
    );

    // And the schema is the baseline's.
    if let Some(pg_dump) = pg_dump() {
        let (fresh_url, fresh) = baseline_database().await;
        assert_same_schema(&pg_dump, &fresh_url, &url);
        let lacking: &[&str] = if version < 33 {
            &SHARDS_DISTRIBUTED_BEFORE_0033_LACK
        } else {
            &[]
        };
        assert_same_workers(&fresh, &pool, lacking).await;
    }
}

/// On one node only: on Citus a database distributed at 0026, populated
/// or not, cannot pass 0028, which creates a function after changing
/// distributed tables over several connections a node in the same
/// transaction, and disables a distributed table's triggers (Citus refuses
/// the one unless the transaction runs one connection a node, the other
/// unless `citus.enable_unsafe_triggers` is on; 0037 and 0038 set both
/// themselves). On Citus the upgrade of a populated database is the one
/// from 0039.
#[tokio::test]
async fn a_populated_0026_database_upgrades_without_losing_a_row_or_an_entry() {
    if citus() {
        eprintln!("not run on Citus: 0028 does not run on a database distributed before it");
        return;
    }
    upgrades_without_losing_a_row_or_an_entry(26).await;
}

/// At 0039 the upgrade runs 0040 (a column and a check on holds, decided
/// ones among them) and 0041 before it records the baseline.
#[tokio::test]
async fn a_populated_0039_database_upgrades_without_losing_a_row_or_an_entry() {
    upgrades_without_losing_a_row_or_an_entry(39).await;
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
