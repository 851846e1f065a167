//! Submissions: the pending row (one, or many in one statement),
//! and on Citus its key's row in `command_keys` first; and finding what a
//! key or an intent already names, which admission compares a request with.
//!
//! Each insert is answered with the row as stored, or `None` when the key
//! (or, under the intent guard, the intent epoch) is taken: the unique
//! index decides, never a check before the insert.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool};
use std::collections::HashSet;
use uuid::Uuid;

use super::commands::{CommandRow, get_in};
use super::new_command::NewCommand;
use super::{Backend, txn};

/// Inserts the pending row in a transaction of its own acting as its
/// caller: [`insert_pending`], committed.
pub async fn insert_pending_alone(
    pool: &PgPool,
    backend: Backend,
    new: &NewCommand,
) -> Result<Option<CommandRow>, sqlx::Error> {
    let mut tx = txn::begin_as(pool, backend, txn::Isolation::ReadCommitted, &new.actor).await?;
    let row = insert_pending(&mut tx, backend, new).await?;
    tx.commit().await?;
    Ok(row)
}

/// Inserts the pending row, or returns `None` when the scope already holds
/// the key. The unique index decides: a concurrent insert of the same key
/// waits for the first to commit, then finds the key taken. On Citus the
/// key's row in `command_keys` is inserted first and decides the same way
/// across authorities. Run in a transaction acting as `new.actor`
/// ([`super::txn`]), or use [`insert_pending_alone`].
pub async fn insert_pending(
    conn: &mut PgConnection,
    backend: Backend,
    new: &NewCommand,
) -> Result<Option<CommandRow>, sqlx::Error> {
    if backend.key_table_first {
        // One row: a plain insert, which Citus sends to the key's shard.
        let claimed = sqlx::query!(
            r#"
            insert into command_keys (scope, idempotency_key, authority_id, command_id)
            values ($1, $2, $3, $4)
            on conflict do nothing
            "#,
            new.scope,
            new.idempotency_key,
            new.authority_id,
            new.id,
        )
        .execute(&mut *conn)
        .await?;
        if claimed.rows_affected() == 0 {
            return Ok(None);
        }
    }
    let row = sqlx::query_as!(
        CommandRow,
        r#"
        insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind,
                              authority_id, run_id, args, canonical, deadline_at, pinned_generation,
                              intent_digest, canonical_rules, intent_epoch, retry_of, not_before, priority,
                              trace_parent, trace_state, created_at, identity_digest)
        values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18,
                $19, $20, $21, $22)
        on conflict on constraint commands_scope_key_unique do nothing
        returning *
        "#,
        new.id,
        new.scope,
        new.idempotency_key,
        new.request_digest,
        new.digest_version,
        new.kind,
        new.authority_id,
        new.run_id,
        new.args,
        new.canonical,
        new.deadline_at,
        new.pinned_generation,
        new.intent_digest,
        &new.canonical_rules,
        new.intent_epoch,
        new.retry_of,
        new.not_before,
        new.priority,
        new.trace_parent,
        new.trace_state,
        new.created_at,
        new.identity_digest(),
    )
    .fetch_optional(&mut *conn)
    .await?;
    if row.is_none() && backend.key_table_first {
        return Err(keys_out_of_step(&new.idempotency_key));
    }
    Ok(row)
}

/// On Citus: takes the keys' rows in `command_keys` for the commands about
/// to be inserted, in `(scope, key)` order (Citus pulls the rows to the
/// coordinator and sends each to its shard). Returns the ids whose key was
/// free; a taken key's command is left alone (it waits for a concurrent
/// taker to commit, then finds the key taken).
async fn claim_keys(
    conn: &mut PgConnection,
    scopes: &[Uuid],
    keys: &[String],
    authorities: &[String],
    ids: &[Uuid],
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        insert into command_keys (scope, idempotency_key, authority_id, command_id)
        select k.scope, k.key, k.authority_id, k.id
        from unnest($1::uuid[], $2::text[], $3::text[], $4::uuid[]) as k (scope, key, authority_id, id)
        order by k.scope, k.key
        on conflict do nothing
        returning command_id
        "#,
        scopes,
        keys,
        authorities,
        ids,
    )
    .fetch_all(conn)
    .await
}

/// On Citus, a key taken in `command_keys` whose command was not inserted:
/// the transaction is refused (rolling the key back) rather than insert
/// half of it. For one row that means the two tables disagree (only a hand
/// edit does that); in a many-row insert it is also a row whose intent
/// epoch its scope holds, and the group commit then admits each row alone.
fn keys_out_of_step(key: &str) -> sqlx::Error {
    sqlx::Error::Protocol(format!(
        "command_keys and commands disagree about the key {key:?}: refusing to record half of it"
    ))
}

/// Inserts many pending rows in one statement (one transaction, one
/// commit), in `(scope, key)` order so that two such statements never wait
/// on each other's keys in opposite orders. Returns the rows inserted; a row
/// whose key (or intent epoch) its scope already holds is left out, as
/// [`insert_pending`] would answer `None` for it. Each row's history entry
/// names its own actor (the setting `command_ledger.actors`, read by the
/// insert trigger, set as the transaction opens). On Citus the keys' rows
/// in `command_keys` are taken first, and only the rows whose key was free
/// are inserted.
pub async fn insert_pending_many(
    pool: &PgPool,
    backend: Backend,
    rows: &[&NewCommand],
) -> Result<Vec<CommandRow>, sqlx::Error> {
    let mut rows = rows.to_vec();
    rows.sort_by(|a, b| (a.scope, &a.idempotency_key).cmp(&(b.scope, &b.idempotency_key)));
    let actors: serde_json::Map<String, Value> = rows
        .iter()
        .map(|r| (r.id.to_string(), Value::from(r.actor.clone())))
        .collect();
    let actors = Value::Object(actors).to_string();
    let mut tx = txn::Opening::new(
        backend,
        txn::Isolation::ReadCommitted,
        &[(txn::ACTORS, &actors)],
    )
    .on(pool)
    .await?;
    if backend.key_table_first {
        let claimed: HashSet<Uuid> = claim_keys(
            &mut tx,
            &rows.iter().map(|r| r.scope).collect::<Vec<_>>(),
            &rows
                .iter()
                .map(|r| r.idempotency_key.clone())
                .collect::<Vec<_>>(),
            &rows
                .iter()
                .map(|r| r.authority_id.clone())
                .collect::<Vec<_>>(),
            &rows.iter().map(|r| r.id).collect::<Vec<_>>(),
        )
        .await?
        .into_iter()
        .collect();
        rows.retain(|r| claimed.contains(&r.id));
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
    }
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let scopes: Vec<Uuid> = rows.iter().map(|r| r.scope).collect();
    let keys: Vec<String> = rows.iter().map(|r| r.idempotency_key.clone()).collect();
    let request_digests: Vec<Vec<u8>> = rows.iter().map(|r| r.request_digest.clone()).collect();
    let digest_versions: Vec<i16> = rows.iter().map(|r| r.digest_version).collect();
    let kinds: Vec<String> = rows.iter().map(|r| r.kind.clone()).collect();
    let authorities: Vec<String> = rows.iter().map(|r| r.authority_id.clone()).collect();
    let run_ids: Vec<Option<String>> = rows.iter().map(|r| r.run_id.clone()).collect();
    let args: Vec<Value> = rows.iter().map(|r| r.args.clone()).collect();
    let canonicals: Vec<Value> = rows.iter().map(|r| r.canonical.clone()).collect();
    let deadlines: Vec<Option<DateTime<Utc>>> = rows.iter().map(|r| r.deadline_at).collect();
    let pinned: Vec<Option<i64>> = rows.iter().map(|r| r.pinned_generation).collect();
    let intent_digests: Vec<Vec<u8>> = rows.iter().map(|r| r.intent_digest.clone()).collect();
    let rules: Vec<Value> = rows
        .iter()
        .map(|r| Value::from(r.canonical_rules.clone()))
        .collect();
    let epochs: Vec<Option<i32>> = rows.iter().map(|r| r.intent_epoch).collect();
    let retry_of: Vec<Option<Uuid>> = rows.iter().map(|r| r.retry_of).collect();
    let not_before: Vec<Option<DateTime<Utc>>> = rows.iter().map(|r| r.not_before).collect();
    let priorities: Vec<i16> = rows.iter().map(|r| r.priority).collect();
    let trace_parents: Vec<Option<String>> = rows.iter().map(|r| r.trace_parent.clone()).collect();
    let trace_states: Vec<Option<String>> = rows.iter().map(|r| r.trace_state.clone()).collect();
    let created: Vec<DateTime<Utc>> = rows.iter().map(|r| r.created_at).collect();
    let identities: Vec<Vec<u8>> = rows.iter().map(|r| r.identity_digest()).collect();
    let inserted = sqlx::query_as!(
        CommandRow,
        r#"
        insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind,
                              authority_id, run_id, args, canonical, deadline_at, pinned_generation,
                              intent_digest, canonical_rules, intent_epoch, retry_of, not_before, priority,
                              trace_parent, trace_state, created_at, identity_digest)
        select r.id, r.scope, r.key, r.request_digest, r.digest_version, r.kind, r.authority_id,
               r.run_id, r.args, r.canonical, r.deadline_at, r.pinned_generation, r.intent_digest,
               array(select jsonb_array_elements_text(r.rules)), r.intent_epoch, r.retry_of,
               r.not_before, r.priority, r.trace_parent, r.trace_state, r.created_at, r.identity
        from unnest($1::uuid[], $2::uuid[], $3::text[], $4::bytea[], $5::int2[], $6::text[],
                    $7::text[], $8::text[], $9::jsonb[], $10::jsonb[], $11::timestamptz[],
                    $12::int8[], $13::bytea[], $14::jsonb[], $15::int4[], $16::uuid[],
                    $17::timestamptz[], $18::int2[], $19::text[], $20::text[], $21::timestamptz[],
                    $22::bytea[])
                 with ordinality
                 as r(id, scope, key, request_digest, digest_version, kind, authority_id, run_id,
                      args, canonical, deadline_at, pinned_generation, intent_digest, rules,
                      intent_epoch, retry_of, not_before, priority, trace_parent, trace_state,
                      created_at, identity, n)
        order by r.n
        on conflict do nothing
        returning *
        "#,
        &ids,
        &scopes,
        &keys,
        &request_digests,
        &digest_versions,
        &kinds,
        &authorities,
        &run_ids as &[Option<String>],
        &args,
        &canonicals,
        &deadlines as &[Option<DateTime<Utc>>],
        &pinned as &[Option<i64>],
        &intent_digests,
        &rules,
        &epochs as &[Option<i32>],
        &retry_of as &[Option<Uuid>],
        &not_before as &[Option<DateTime<Utc>>],
        &priorities,
        &trace_parents as &[Option<String>],
        &trace_states as &[Option<String>],
        &created,
        &identities,
    )
    .fetch_all(&mut *tx)
    .await?;
    if backend.key_table_first && inserted.len() != rows.len() {
        let missing = rows
            .iter()
            .find(|r| !inserted.iter().any(|i| i.id == r.id))
            .map_or("", |r| r.idempotency_key.as_str());
        return Err(keys_out_of_step(missing));
    }
    tx.commit().await?;
    Ok(inserted)
}

/// Whether an insert failed because another command took the same intent epoch.
pub fn is_epoch_conflict(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .filter(|d| d.is_unique_violation())
        .and_then(|d| {
            // Citus relays a worker's error without its constraint field:
            // the name is then read from the message.
            d.constraint()
                .map(str::to_owned)
                .or_else(|| constraint_in_message(d.message()))
        })
        .is_some_and(|name| is_constraint(&name, "commands_scope_intent_epoch_unique"))
}

/// The constraint a unique violation's message names
/// (`duplicate key value violates unique constraint "<name>"`).
fn constraint_in_message(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("unique constraint \"")?;
    let (name, _) = rest.split_once('"')?;
    Some(name.to_owned())
}

/// Whether `reported` names `constraint`: itself, or on Citus its copy on a
/// shard, which carries the shard's number (`<constraint>_102059`).
fn is_constraint(reported: &str, constraint: &str) -> bool {
    reported.strip_prefix(constraint).is_some_and(|rest| {
        rest.is_empty()
            || rest
                .strip_prefix('_')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// The command stored under `(scope, key)`. On Citus the key's row names
/// the command's authority, so both look-ups go to one shard each.
pub async fn find_by_key(
    conn: &mut PgConnection,
    backend: Backend,
    scope: Uuid,
    key: &str,
) -> Result<Option<CommandRow>, sqlx::Error> {
    if backend.key_table_first {
        let Some(named) = sqlx::query!(
            "select authority_id, command_id from command_keys where scope = $1 and idempotency_key = $2",
            scope,
            key,
        )
        .fetch_optional(&mut *conn)
        .await?
        else {
            return Ok(None);
        };
        return get_in(conn, &named.authority_id, named.command_id).await;
    }
    sqlx::query_as!(
        CommandRow,
        r#"
        select * from commands
        where scope = $1 and idempotency_key = $2
        "#,
        scope,
        key,
    )
    .fetch_optional(conn)
    .await
}

/// The command a request of an intent is compared with, in a scope: the
/// newest one this very request (same run, same canonical request) was
/// already answered with, as its own command or coalesced into another's;
/// else the newest command of the intent. With its age by the database
/// clock, and the highest epoch the intent has reached.
///
/// An intent names its authority (the canonical form holds it), so every
/// command of one is the authority's: the look-up says so, which on Citus
/// keeps it on that authority's shard.
#[derive(Debug, Clone, PartialEq)]
pub struct LatestIntent {
    pub id: Uuid,
    /// This request was answered with this command before.
    pub same_request: bool,
    pub age_seconds: f64,
    pub max_epoch: i32,
    /// Its state now.
    pub state: String,
    /// It is `ambiguous` and a resolution says the effect did not happen.
    pub resolved_not_applied: bool,
}

pub async fn latest_by_intent(
    ex: impl PgExecutor<'_>,
    scope: Uuid,
    authority_id: &str,
    intent_digest: &[u8],
    request_digest: &[u8],
) -> Result<Option<LatestIntent>, sqlx::Error> {
    sqlx::query_as!(
        LatestIntent,
        r#"
        select c.id,
               (c.request_digest = $4 or r.command_id is not null) as "same_request!",
               extract(epoch from now() - c.created_at)::float8 as "age_seconds!",
               (select coalesce(max(e.intent_epoch), 0) from commands e
                where e.authority_id = $2 and e.scope = $1 and e.intent_digest = $3) as "max_epoch!",
               c.state,
               (c.state = 'ambiguous' and exists (
                    select 1 from command_resolutions s
                    where s.authority_id = $2 and s.command_id = c.id
                      and s.outcome = 'not_applied')) as "resolved_not_applied!"
        from commands c
        left join coalesced_requests r
               on r.authority_id = c.authority_id and r.scope = $1 and r.request_digest = $4
              and r.command_id = c.id
        where c.authority_id = $2 and c.scope = $1 and c.intent_digest = $3
        order by (c.request_digest = $4 or r.command_id is not null) desc, c.created_at desc
        limit 1
        "#,
        scope,
        authority_id,
        intent_digest,
        request_digest,
    )
    .fetch_optional(ex)
    .await
}

/// Remembers that a request was answered with another request's command
/// (coalesced into it, or given its outcome within the window), so that
/// the same request retried later gets that command again.
pub async fn remember_coalesced(
    ex: impl PgExecutor<'_>,
    command: &CommandRow,
    request_digest: &[u8],
    run_id: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"
        select ledger_remember_coalesced($1, $2, $3, $4, $5)
        "#,
        command.authority_id,
        command.scope,
        request_digest,
        command.id,
        run_id,
    )
    .execute(ex)
    .await?;
    Ok(())
}

/// The commands stored under some keys of `scope` (on Citus: found through
/// `command_keys`, then by authority and id).
pub async fn find_by_keys(
    conn: &mut PgConnection,
    backend: Backend,
    scope: Uuid,
    keys: &[String],
) -> Result<Vec<CommandRow>, sqlx::Error> {
    if backend.key_table_first {
        let named = sqlx::query!(
            "select authority_id, command_id from command_keys where scope = $1 and idempotency_key = any($2)",
            scope,
            keys,
        )
        .fetch_all(&mut *conn)
        .await?;
        let (authorities, ids): (Vec<String>, Vec<Uuid>) = named
            .into_iter()
            .map(|n| (n.authority_id, n.command_id))
            .unzip();
        return sqlx::query_as!(
            CommandRow,
            r#"
            select c.* from commands c
            where (c.authority_id, c.id) in (select * from unnest($1::text[], $2::uuid[]))
            "#,
            &authorities,
            &ids,
        )
        .fetch_all(conn)
        .await;
    }
    sqlx::query_as!(
        CommandRow,
        r#"
        select * from commands
        where scope = $1 and idempotency_key = any($2)
        "#,
        scope,
        keys,
    )
    .fetch_all(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constraint_is_recognised_by_its_name_or_its_shards_copy() {
        let c = "commands_scope_intent_epoch_unique";
        assert!(is_constraint(c, c));
        assert!(is_constraint(
            "commands_scope_intent_epoch_unique_102059",
            c
        ));
        assert!(!is_constraint("commands_scope_intent_epoch_unique_", c));
        assert!(!is_constraint("commands_scope_intent_epoch_unique_x1", c));
        assert!(!is_constraint("commands_scope_intent_epoch", c));
        assert!(!is_constraint("commands_scope_intent_epoch_uniquely", c));
        assert_eq!(
            constraint_in_message(
                "duplicate key value violates unique constraint \"commands_scope_intent_epoch_unique_102059\""
            )
            .as_deref(),
            Some("commands_scope_intent_epoch_unique_102059")
        );
        assert_eq!(constraint_in_message("deadlock detected"), None);
    }
}
