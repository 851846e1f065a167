//! `command-ledger verify`: an untouched ledger verifies clean (live and
//! archived commands alike), and every way a superuser can rewrite the
//! history around the triggers is named: an edited entry, a deleted one, a
//! forged one, an edited command row, an edited archive; a published digest
//! catches even a chain recomputed end to end.

use serde_json::Value;
use sqlx::PgPool;
use std::time::Instant;
use uuid::Uuid;

use crate::harness::fresh_database;

const BIN: &str = env!("CARGO_BIN_EXE_command-ledger");

/// `verify --json` plus `extra`: whether it succeeded, and its document.
async fn verify(url: &str, extra: &[&str]) -> (bool, Value) {
    let out = tokio::process::Command::new(BIN)
        .args(["--database-url", url, "verify", "--json"])
        .args(extra)
        .env("RUST_LOG", "error")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.success(), doc["ok"] == true, "{doc}");
    (out.status.success(), doc)
}

/// The breaks a verify run named, as (kind, command, entry).
fn breaks(doc: &Value) -> Vec<(String, String, Option<i64>)> {
    doc["breaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["kind"].as_str().unwrap().to_owned(),
                b["command_id"].as_str().unwrap().to_owned(),
                b["entry_id"].as_i64(),
            )
        })
        .collect()
}

/// `n` commands of one principal, walked by ordinary statements through the
/// triggers: a quarter stay pending, the rest are prepared under generation
/// 1; of those a third stop there (and are adopted by generation 2), a
/// third are applied, a third cancelled 40 days ago (prunable).
async fn ledger(pool: &PgPool, n: i64) {
    crate::harness::device_principal(pool, "kiosk").await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind,
                               authority_id, args, canonical)
         select gen_random_uuid(), (select id from principals), 'k-' || g, sha256(g::text::bytea), 2,
                'refund', case when g % 2 = 0 then 'payments' else 'mail' end,
                jsonb_build_object('amount', g), jsonb_build_object('amount', g)
         from generate_series(1, {n}) g;
         update commands set state = 'prepared', authority_generation = 1
         where idempotency_key not like '%0' and idempotency_key not like '%4';
         update commands set authority_generation = 2
         where state = 'prepared' and idempotency_key like '%1';
         update commands set state = 'cancelled', error = '{{\"reason\": \"cancelled\"}}',
                finished_at = now() - interval '40 days'
         where state = 'prepared' and (idempotency_key like '%2' or idempotency_key like '%5');
         update commands set state = 'effect_started' where state = 'prepared' and authority_generation = 1;
         update commands set state = 'applied', result = '{{\"ok\": true}}' where state = 'effect_started';"
    )))
    .execute(pool)
    .await
    .unwrap();
}

use crate::harness::tamper;

async fn a_command(pool: &PgPool, state: &str) -> Uuid {
    sqlx::query_scalar("select id from commands where state = $1 order by id limit 1")
        .bind(state)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn entries_of(pool: &PgPool, id: Uuid) -> Vec<i64> {
    sqlx::query_scalar("select id from command_history where command_id = $1 order by seq")
        .bind(id)
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn prune(pool: &PgPool) -> i32 {
    sqlx::query_scalar("select prune_commands(interval '30 days', 1000)")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_untouched_ledger_verifies_clean_before_and_after_pruning() {
    let (url, pool) = fresh_database().await;
    ledger(&pool, 200).await;
    let (ok, doc) = verify(&url, &[]).await;
    assert!(ok, "{doc}");
    assert_eq!(doc["commands"], 200);
    let pruned = prune(&pool).await;
    assert!(pruned > 0);
    let (ok, doc) = verify(&url, &[]).await;
    assert!(ok, "{doc}");
    assert_eq!(doc["archived"], pruned);
    assert_eq!(doc["commands"].as_i64().unwrap() + i64::from(pruned), 200);
    // The filters narrow what is checked, archive included.
    let (ok, doc) = verify(&url, &["--authority", "payments", "--since", "1h"]).await;
    assert!(ok, "{doc}");
    assert_eq!(
        doc["commands"].as_i64().unwrap() + doc["archived"].as_i64().unwrap(),
        100
    );
}

#[tokio::test]
async fn an_edited_history_entry_is_named() {
    let (url, pool) = fresh_database().await;
    ledger(&pool, 20).await;
    let id = a_command(&pool, "applied").await;
    let entries = entries_of(&pool, id).await;
    tamper(
        &pool,
        &format!(
            "update command_history set actor = 'custodian:someone-else' where id = {}",
            entries[1]
        ),
    )
    .await;
    let (ok, doc) = verify(&url, &[]).await;
    assert!(!ok);
    assert_eq!(
        breaks(&doc),
        vec![("edited".to_owned(), id.to_string(), Some(entries[1]))]
    );
}

#[tokio::test]
async fn a_deleted_history_entry_is_named_wherever_it_was() {
    let (url, pool) = fresh_database().await;
    ledger(&pool, 20).await;
    let applied = a_command(&pool, "applied").await;
    let middle = entries_of(&pool, applied).await;
    let cancelled = a_command(&pool, "cancelled").await;
    let last = entries_of(&pool, cancelled).await;
    let pending = a_command(&pool, "pending").await;
    tamper(
        &pool,
        &format!(
            "delete from command_history where id in ({}, {}); \
             delete from command_history where command_id = '{pending}'",
            middle[1],
            last.last().unwrap()
        ),
    )
    .await;
    let (ok, doc) = verify(&url, &[]).await;
    assert!(!ok);
    let mut found = breaks(&doc);
    found.sort();
    let mut expected = vec![
        // The entry after the gap no longer chains to its predecessor.
        (
            "chain_broken".to_owned(),
            applied.to_string(),
            Some(middle[2]),
        ),
        // The last entry gone: the row is ahead of its history.
        (
            "row_mismatch".to_owned(),
            cancelled.to_string(),
            Some(last[last.len() - 2]),
        ),
        ("no_history".to_owned(), pending.to_string(), None),
    ];
    expected.sort();
    assert_eq!(found, expected);
}

#[tokio::test]
async fn a_forged_history_entry_is_named_even_with_a_well_computed_hash() {
    let (url, pool) = fresh_database().await;
    ledger(&pool, 20).await;
    let applied = a_command(&pool, "applied").await;
    // The forger knows the scheme and chains the entry to the real head:
    // applied -> failed is still no transition, and the row still says applied.
    tamper(
        &pool,
        &format!(
            "insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                          authority_generation, reason, prev_hash, hash, seq)
             select h.authority_id, h.command_id, 'applied', 'failed', now(), 'sql:postgres', 1, null, h.hash,
                    ledger_entry_hash(h.hash, h.command_id, 'applied', 'failed', now(), 'sql:postgres', 1,
                                      null, null),
                    h.seq + 1
             from command_history h where h.command_id = '{applied}' order by h.seq desc limit 1"
        ),
    )
    .await;
    // And the history of a command that never was.
    let ghost = Uuid::now_v7();
    tamper(
        &pool,
        &format!(
            "insert into command_history (authority_id, command_id, from_state, to_state, actor, prev_hash, hash, seq)
             values ('payments', '{ghost}', null, 'pending', 'x', null, sha256('x'), 1)"
        ),
    )
    .await;
    let (ok, doc) = verify(&url, &[]).await;
    assert!(!ok);
    let found = breaks(&doc);
    let forged_head = *entries_of(&pool, applied).await.last().unwrap();
    let ghost_entry = *entries_of(&pool, ghost).await.last().unwrap();
    for expected in [
        (
            "illegal_transition".to_owned(),
            applied.to_string(),
            Some(forged_head),
        ),
        (
            "row_mismatch".to_owned(),
            applied.to_string(),
            Some(forged_head),
        ),
        (
            "orphan_history".to_owned(),
            ghost.to_string(),
            Some(ghost_entry),
        ),
    ] {
        assert!(found.contains(&expected), "{expected:?} in {found:?}");
    }
}

/// Each entry holds its place in its command's chain (migration 0037): 1
/// for the creation, then one after another, on every layout and by every
/// writer (the triggers and the engine's steps alike). No two entries hold
/// one place, so a second entry chained to the same one is refused, even
/// one a superuser writes with the triggers off.
#[tokio::test]
async fn a_chain_cannot_fork() {
    let (_url, pool) = fresh_database().await;
    ledger(&pool, 20).await;
    let misplaced: i64 = sqlx::query_scalar(
        "select count(*) from (
             select seq, row_number() over (partition by command_id order by seq) as n,
                    prev_hash is not distinct from lag(hash) over (partition by command_id order by seq) as linked
             from command_history) e
         where e.seq <> e.n or not e.linked",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        misplaced, 0,
        "every entry in its place, chained to the one before"
    );
    let applied = a_command(&pool, "applied").await;
    let places: Vec<i32> =
        sqlx::query_scalar("select seq from command_history where command_id = $1 order by seq")
            .bind(applied)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(places, [1, 2, 3, 4], "created, prepared, started, applied");
    // A second successor of the started entry: the place after it is taken.
    let forked = sqlx::query(
        "insert into command_history (authority_id, command_id, from_state, to_state, actor, prev_hash, hash, seq)
         select h.authority_id, h.command_id, 'effect_started', 'failed', 'forger', h.hash, sha256('fork'),
                h.seq + 1
         from command_history h where h.command_id = $1 and h.to_state = 'effect_started'",
    )
    .bind(applied)
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        forked.to_string().contains(
            "duplicate key value violates unique constraint \"command_history_chain_order"
        ),
        "{forked}"
    );
    if !crate::harness::citus() {
        // (Citus passes the shard's refusal on as XX000, with its message.)
        let code = forked.as_database_error().and_then(|e| e.code());
        assert_eq!(code.as_deref(), Some("23505"), "{forked}");
    }
}

#[tokio::test]
async fn an_edited_terminal_command_row_is_named() {
    let (url, pool) = fresh_database().await;
    ledger(&pool, 20).await;
    let applied = a_command(&pool, "applied").await;
    let result = sqlx::query_scalar::<_, Uuid>(
        "select id from commands where state = 'applied' order by id offset 1 limit 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    tamper(
        &pool,
        &format!(
            "update commands set state = 'failed', result = null, error = '{{}}' where id = '{applied}';
             update commands set result = '{{\"ok\": false}}' where id = '{result}'"
        ),
    )
    .await;
    let (ok, doc) = verify(&url, &[]).await;
    assert!(!ok);
    let mut kinds: Vec<(String, String)> =
        breaks(&doc).into_iter().map(|(k, c, _)| (k, c)).collect();
    kinds.sort();
    let mut expected = vec![
        ("row_mismatch".to_owned(), applied.to_string()),
        ("row_mismatch".to_owned(), result.to_string()),
    ];
    expected.sort();
    assert_eq!(kinds, expected);
}

#[tokio::test]
async fn an_edited_archive_is_named() {
    let (url, pool) = fresh_database().await;
    ledger(&pool, 20).await;
    assert!(prune(&pool).await > 0);
    let archived: Uuid = sqlx::query_scalar("select id from pruned_commands order by id limit 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    tamper(
        &pool,
        &format!(
            "update pruned_commands
             set record = jsonb_set(record, '{{history,1,actor}}', '\"someone-else\"')
             where id = '{archived}'"
        ),
    )
    .await;
    let (ok, doc) = verify(&url, &[]).await;
    assert!(!ok);
    let found = breaks(&doc);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].0.as_str(), found[0].1.as_str()),
        ("edited", archived.to_string().as_str())
    );
}

#[tokio::test]
async fn a_published_digest_catches_a_chain_rewritten_end_to_end_and_survives_pruning() {
    let (url, pool) = fresh_database().await;
    ledger(&pool, 40).await;
    let path = std::env::temp_dir().join(format!("ledger-heads-{}", Uuid::now_v7()));
    let file = path.to_str().unwrap();
    let (ok, doc) = verify(&url, &["--digest", file]).await;
    assert!(ok, "{doc}");
    assert_eq!(doc["digest"].as_str().unwrap().len(), 64);

    // Life goes on: more transitions, and pruning moves commands to the archive.
    sqlx::query("update commands set state = 'cancelled' where state = 'pending'")
        .execute(&pool)
        .await
        .unwrap();
    assert!(prune(&pool).await > 0);
    let (ok, doc) = verify(&url, &["--against", file]).await;
    assert!(ok, "{doc}");

    // A superuser rewrites one command's whole chain consistently (the
    // actor of its creation), and removes another command with its history.
    let rewritten = a_command(&pool, "applied").await;
    let removed = a_command(&pool, "prepared").await;
    tamper(
        &pool,
        &format!(
            "update command_history set actor = 'sql:nobody' where command_id = '{rewritten}' and from_state is null;
             do $$
             declare e record; prev bytea;
             begin
                 for e in select * from command_history where command_id = '{rewritten}' order by seq loop
                     update command_history
                     set prev_hash = prev,
                         hash = ledger_entry_hash(prev, e.command_id, e.from_state, e.to_state, e.at, e.actor,
                                                  e.authority_generation, e.reason, e.row_digest)
                     where id = e.id returning hash into prev;
                 end loop;
             end $$;
             delete from command_history where command_id = '{removed}';
             delete from commands where id = '{removed}';"
        ),
    )
    .await;
    // The chains alone no longer show the rewrite...
    let (ok, doc) = verify(&url, &[]).await;
    assert!(ok, "{doc}");
    // ...the digest does.
    let (ok, doc) = verify(&url, &["--against", file]).await;
    assert!(!ok);
    let mut kinds: Vec<(String, String)> =
        breaks(&doc).into_iter().map(|(k, c, _)| (k, c)).collect();
    kinds.sort();
    let mut expected = vec![
        ("digest_head_changed".to_owned(), rewritten.to_string()),
        ("digest_head_missing".to_owned(), removed.to_string()),
    ];
    expected.sort();
    assert_eq!(kinds, expected);

    // And the digest file itself cannot be edited to match.
    let text = std::fs::read_to_string(file).unwrap();
    let edited = text.replacen(&rewritten.to_string()[..8], "00000000", 1);
    std::fs::write(file, edited).unwrap();
    let out = tokio::process::Command::new(BIN)
        .args(["--database-url", &url, "verify", "--against", file])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("altered"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(&path).unwrap();
}

/// The figure docs/SECURITY.md quotes: `cargo test --release --test it
/// verify::a_hundred_thousand -- --nocapture` prints it.
#[tokio::test]
async fn a_hundred_thousand_untouched_commands_verify_clean() {
    if crate::harness::lacks!(
        local_tables,
        "preparing 10^5 commands through row-level triggers takes over ten minutes on a 2-core machine; \
         the statement that checks them is the one the other verify tests run there"
    ) {
        return;
    }
    let (url, pool) = fresh_database().await;
    ledger(&pool, 100_000).await;
    let started = Instant::now();
    let (ok, doc) = verify(&url, &[]).await;
    let took = started.elapsed();
    assert!(ok, "{}", doc["breaks"].as_array().map_or(0, Vec::len));
    assert_eq!(doc["commands"], 100_000);
    println!(
        "verify: {} commands, {} entries in {:.1} s (the command: {:.1} s)",
        doc["commands"],
        doc["entries"],
        took.as_secs_f64(),
        doc["seconds"].as_f64().unwrap()
    );
}

/// The pending commands of `payments` claimed, started and recorded by a
/// custodian's engine steps (a no-op effect): one turn by hand.
async fn applied_by_the_engine(pool: &PgPool) {
    let c = crate::harness::custodian(
        pool,
        &["payments"],
        command_ledger::custodian::Effects::default(),
        std::time::Duration::from_secs(10),
    );
    c.heartbeat().await.unwrap();
    crate::harness::claim_execute_record(&c, 3).await;
    c.release_leases().await;
}

/// The engine's claim writes one entry for pending -> prepared ->
/// effect_started (0045), which names the state it passed through and is
/// hashed as entry-v2 over that name: such a chain verifies; an entry whose
/// `through` is erased no longer hashes to its hash; and a forger who
/// erases it and recomputes the whole chain as entry-v1 is left with
/// pending -> effect_started, which is no transition.
#[tokio::test]
async fn the_claims_one_entry_names_both_transitions_and_its_hash_covers_them() {
    let (url, pool) = fresh_database().await;
    let ids = crate::storage::insert_commands(&pool, "payments", 3).await;
    applied_by_the_engine(&pool).await;
    let paths: Vec<String> = sqlx::query_scalar(
        "select string_agg(coalesce(from_state, '') || coalesce('>' || through, '') || '>' || to_state, ' '
                           order by seq)
         from command_history where command_id = any($1) group by command_id",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        paths,
        [">pending pending>prepared>effect_started effect_started>applied"; 3]
    );
    let (ok, doc) = verify(&url, &[]).await;
    assert!(ok, "{doc}");

    // Erased: the entry-v2 hash no longer matches.
    let erased_entry = entries_of(&pool, ids[0]).await[1];
    tamper(
        &pool,
        &format!("update command_history set through = null where id = {erased_entry}"),
    )
    .await;
    // Erased, and the chain recomputed as entry-v1 from there on.
    tamper(
        &pool,
        &format!(
            "update command_history set through = null where command_id = '{rewritten}' and through is not null;
             do $$
             declare e record; prev bytea;
             begin
                 for e in select * from command_history where command_id = '{rewritten}' order by seq loop
                     update command_history
                     set prev_hash = prev,
                         hash = ledger_entry_hash(prev, e.command_id, e.from_state, e.to_state, e.at, e.actor,
                                                  e.authority_generation, e.reason, e.row_digest)
                     where id = e.id returning hash into prev;
                 end loop;
             end $$;",
            rewritten = ids[1]
        ),
    )
    .await;
    let rewritten_entry = entries_of(&pool, ids[1]).await[1];
    let (ok, doc) = verify(&url, &[]).await;
    assert!(!ok);
    let found = breaks(&doc);
    for expected in [
        ("edited".to_owned(), ids[0].to_string(), Some(erased_entry)),
        (
            "illegal_transition".to_owned(),
            ids[1].to_string(),
            Some(rewritten_entry),
        ),
    ] {
        assert!(found.contains(&expected), "{expected:?} in {found:?}");
    }
    assert!(
        !found.iter().any(|(_, id, _)| *id == ids[2].to_string()),
        "the untouched chain verifies: {found:?}"
    );
}

/// The identity digest stored with a pending row (by the service since
/// 0050) is a cache the claim reads, never a rule verify trusts: a row
/// stored with a digest that is not its columns' gets, at its claim, a
/// row digest verify does not find, and is named; a row stored without one
/// is hashed by the claim and verifies.
#[tokio::test]
async fn a_stored_identity_digest_that_is_not_the_rows_is_reported_not_trusted() {
    let (url, pool) = fresh_database().await;
    let ids = crate::storage::insert_commands(&pool, "payments", 2).await;
    tamper(
        &pool,
        &format!(
            "update commands set identity_digest = sha256('another row'::bytea) where id = '{}'",
            ids[0]
        ),
    )
    .await;
    let (ok, doc) = verify(&url, &[]).await;
    assert!(ok, "pending rows' entries do not cover the cache: {doc}");
    applied_by_the_engine(&pool).await;
    let (ok, doc) = verify(&url, &[]).await;
    assert!(!ok);
    let named: Vec<String> = breaks(&doc).into_iter().map(|(_, id, _)| id).collect();
    assert!(named.contains(&ids[0].to_string()), "{doc}");
    assert!(!named.contains(&ids[1].to_string()), "{doc}");
}
