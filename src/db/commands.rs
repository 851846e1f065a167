//! Commands: record a submission, read it back, list, history, cancel.
//!
//! The actor (and reason) of a change travel as transaction-local settings,
//! set as the transaction opens ([`super::txn`]), so the history trigger can
//! name who did it without an extra round trip.
//!
//! Longer than the other files (about 630 lines) on purpose: it is the one
//! place every statement of the API on `commands` lives, each a small
//! checked query, so that "what does the API ask of this table" is one file.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool};
use std::collections::HashSet;
use uuid::Uuid;

use super::{Layout, txn};

use crate::domain::State;

/// One command as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRow {
    pub id: Uuid,
    pub scope: Uuid,
    pub idempotency_key: String,
    pub request_digest: Vec<u8>,
    pub digest_version: i16,
    pub kind: String,
    pub authority_id: String,
    pub authority_generation: Option<i64>,
    pub run_id: Option<String>,
    pub args: Value,
    pub canonical: Value,
    pub state: String,
    pub result: Option<Value>,
    pub error: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub pinned_generation: Option<i64>,
    pub intent_digest: Option<Vec<u8>>,
    pub canonical_rules: Vec<String>,
    pub intent_epoch: Option<i32>,
    /// The command of the same intent this one retries (it ended with
    /// nothing done, and the kind releases such intents).
    pub retry_of: Option<Uuid>,
}

impl CommandRow {
    /// The state as the domain type. The schema's check
    /// `commands_state_known` (the states of `command_states`) guarantees
    /// the name is known.
    pub fn state(&self) -> State {
        self.state
            .parse()
            .expect("commands_state_known admits only the known states")
    }
}

/// One entry of a command's history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRow {
    pub id: i64,
    pub from_state: Option<String>,
    pub to_state: String,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub authority_generation: Option<i64>,
    pub reason: Option<String>,
}

/// A request as the ledger records it, for a command and for a hold alike:
/// who asked, for what, under which authority, in canonical form.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub scope: Uuid,
    pub kind: &'a str,
    pub authority_id: &'a str,
    pub pinned_generation: Option<i64>,
    pub run_id: Option<&'a str>,
    pub args: &'a Value,
    pub canonical: &'a Value,
    pub canonical_rules: &'a [String],
    pub request_digest: &'a [u8],
    pub intent_digest: &'a [u8],
    pub digest_version: i16,
    pub deadline_at: Option<DateTime<Utc>>,
}

/// What a submission records. Assembled only by [`NewCommand::new`]. It owns
/// its values, so that it can wait in the group commit's queue.
#[derive(Debug, Clone)]
pub struct NewCommand {
    pub id: Uuid,
    pub scope: Uuid,
    pub idempotency_key: String,
    pub request_digest: Vec<u8>,
    pub digest_version: i16,
    pub kind: String,
    pub authority_id: String,
    pub pinned_generation: Option<i64>,
    pub intent_digest: Vec<u8>,
    /// Set for commands admitted under the intent guard.
    pub intent_epoch: Option<i32>,
    pub canonical_rules: Vec<String>,
    pub run_id: Option<String>,
    pub args: Value,
    pub canonical: Value,
    pub deadline_at: Option<DateTime<Utc>>,
    pub actor: String,
    /// The command of the same intent this one retries, if any.
    pub retry_of: Option<Uuid>,
}

impl NewCommand {
    /// The one place a command to record is assembled: a fresh id, the
    /// request, the key it is recorded under, its intent epoch (under the
    /// intent guard) and the actor history names.
    pub fn new(
        request: &Request<'_>,
        idempotency_key: &str,
        intent_epoch: Option<i32>,
        actor: &str,
    ) -> Self {
        NewCommand {
            id: Uuid::now_v7(),
            scope: request.scope,
            idempotency_key: idempotency_key.to_owned(),
            request_digest: request.request_digest.to_vec(),
            digest_version: request.digest_version,
            kind: request.kind.to_owned(),
            authority_id: request.authority_id.to_owned(),
            pinned_generation: request.pinned_generation,
            intent_digest: request.intent_digest.to_vec(),
            intent_epoch,
            canonical_rules: request.canonical_rules.to_vec(),
            run_id: request.run_id.map(str::to_owned),
            args: request.args.clone(),
            canonical: request.canonical.clone(),
            deadline_at: request.deadline_at,
            actor: actor.to_owned(),
            retry_of: None,
        }
    }

    /// The same command, recorded as the retry of `failed` (a command of
    /// the same intent that ended with nothing done).
    pub fn retrying(mut self, failed: Uuid) -> Self {
        self.retry_of = Some(failed);
        self
    }
}

/// Records the pending row in a transaction of its own acting as its
/// caller: [`insert_pending`], committed.
pub async fn record_pending(
    pool: &PgPool,
    layout: Layout,
    new: &NewCommand,
) -> Result<Option<CommandRow>, sqlx::Error> {
    let mut tx = txn::begin_as(pool, txn::Isolation::ReadCommitted, &new.actor).await?;
    let row = insert_pending(&mut tx, layout, new).await?;
    tx.commit().await?;
    Ok(row)
}

/// Inserts the pending row, or returns `None` when the scope already holds
/// the key. The unique index decides: a concurrent insert of the same key
/// waits for the first to commit, then finds the key taken. On Citus the
/// key's row in `command_keys` is inserted first and decides the same way
/// across authorities. Run in a transaction acting as `new.actor`
/// ([`super::txn`]), or use [`record_pending`].
pub async fn insert_pending(
    conn: &mut PgConnection,
    layout: Layout,
    new: &NewCommand,
) -> Result<Option<CommandRow>, sqlx::Error> {
    if layout == Layout::Citus {
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
                              intent_digest, canonical_rules, intent_epoch, retry_of)
        values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
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
    )
    .fetch_optional(&mut *conn)
    .await?;
    if row.is_none() && layout == Layout::Citus {
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
/// the transaction is refused (rolling the key back) rather than record
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
    layout: Layout,
    rows: &[&NewCommand],
) -> Result<Vec<CommandRow>, sqlx::Error> {
    let mut rows = rows.to_vec();
    rows.sort_by(|a, b| (a.scope, &a.idempotency_key).cmp(&(b.scope, &b.idempotency_key)));
    let actors: serde_json::Map<String, Value> = rows
        .iter()
        .map(|r| (r.id.to_string(), Value::from(r.actor.clone())))
        .collect();
    let actors = Value::Object(actors).to_string();
    let mut tx = pool
        .begin_with(sqlx::AssertSqlSafe(txn::begin_statement(
            txn::Isolation::ReadCommitted,
            &[(txn::ACTORS, &actors)],
        )))
        .await?;
    if layout == Layout::Citus {
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
    let inserted = sqlx::query_as!(
        CommandRow,
        r#"
        insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind,
                              authority_id, run_id, args, canonical, deadline_at, pinned_generation,
                              intent_digest, canonical_rules, intent_epoch, retry_of)
        select r.id, r.scope, r.key, r.request_digest, r.digest_version, r.kind, r.authority_id,
               r.run_id, r.args, r.canonical, r.deadline_at, r.pinned_generation, r.intent_digest,
               array(select jsonb_array_elements_text(r.rules)), r.intent_epoch, r.retry_of
        from unnest($1::uuid[], $2::uuid[], $3::text[], $4::bytea[], $5::int2[], $6::text[],
                    $7::text[], $8::text[], $9::jsonb[], $10::jsonb[], $11::timestamptz[],
                    $12::int8[], $13::bytea[], $14::jsonb[], $15::int4[], $16::uuid[])
                 with ordinality
                 as r(id, scope, key, request_digest, digest_version, kind, authority_id, run_id,
                      args, canonical, deadline_at, pinned_generation, intent_digest, rules,
                      intent_epoch, retry_of, n)
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
    )
    .fetch_all(&mut *tx)
    .await?;
    if layout == Layout::Citus && inserted.len() != rows.len() {
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
    layout: Layout,
    scope: Uuid,
    key: &str,
) -> Result<Option<CommandRow>, sqlx::Error> {
    if layout == Layout::Citus {
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
               c.state
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

/// Commands by state, every state listed.
pub async fn counts_by_state(ex: impl PgExecutor<'_>) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"select state as "state!", commands as "commands!" from command_counts_by_state"#
    )
    .fetch_all(ex)
    .await?;
    Ok(rows.into_iter().map(|r| (r.state, r.commands)).collect())
}

/// How many effects were ever started (the executions the ledger allowed).
pub async fn effects_started(ex: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select count(*) as "n!" from command_history where to_state = 'effect_started'"#
    )
    .fetch_one(ex)
    .await
}

/// The commands stored under some keys of `scope` (on Citus: found through
/// `command_keys`, then by authority and id).
pub async fn find_by_keys(
    conn: &mut PgConnection,
    layout: Layout,
    scope: Uuid,
    keys: &[String],
) -> Result<Vec<CommandRow>, sqlx::Error> {
    if layout == Layout::Citus {
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

/// How many effects were started at or after `since`.
pub async fn effects_started_since(
    ex: impl PgExecutor<'_>,
    since: DateTime<Utc>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select count(*) as "n!" from command_history where to_state = 'effect_started' and at >= $1"#,
        since,
    )
    .fetch_one(ex)
    .await
}

/// A command by id, visible in one of `scopes` (`None`: every scope, for operators).
pub async fn get(
    ex: impl PgExecutor<'_>,
    id: Uuid,
    scope: Option<&[Uuid]>,
) -> Result<Option<CommandRow>, sqlx::Error> {
    sqlx::query_as!(
        CommandRow,
        r#"
        select * from commands
        where id = $1 and ($2::uuid[] is null or scope = any($2))
        "#,
        id,
        scope,
    )
    .fetch_optional(ex)
    .await
}

/// The command `id` of `authority_id`: the look-up that names its shard
/// on Citus (where [`get`], by id alone, asks every shard).
pub async fn get_in(
    ex: impl PgExecutor<'_>,
    authority_id: &str,
    id: Uuid,
) -> Result<Option<CommandRow>, sqlx::Error> {
    sqlx::query_as!(
        CommandRow,
        "select * from commands where authority_id = $1 and id = $2",
        authority_id,
        id,
    )
    .fetch_optional(ex)
    .await
}

/// Filters for listing commands, newest first.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// The scopes listed; `None`: every scope (operators).
    pub scope: Option<Vec<Uuid>>,
    pub state: Option<State>,
    pub authority_id: Option<String>,
    /// Keyset cursor: only ids older than this one.
    pub before_id: Option<Uuid>,
    /// Only commands recorded at or after this instant.
    pub since: Option<DateTime<Utc>>,
    /// Only commands recorded before this instant.
    pub until: Option<DateTime<Utc>>,
    pub kind: Option<String>,
    /// Only commands under this idempotency key (in any visible scope).
    pub key: Option<String>,
    /// Only commands of the principal of this name.
    pub principal: Option<String>,
    pub limit: i64,
}

/// How far a command's id time (UUIDv7, minted by the API process) may be
/// from its `created_at` (the database's clock): a time range is first
/// narrowed to an id range this much wider, which the primary key serves,
/// then checked on `created_at` exactly.
const ID_CLOCK_SLACK: chrono::Duration = chrono::Duration::minutes(5);

/// The smallest UUIDv7 minted at `t` (milliseconds; the rest zero).
fn v7_floor(t: DateTime<Utc>) -> Uuid {
    let ms = u64::try_from(t.timestamp_millis().max(0)).unwrap_or(0);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    bytes[6] = 0x70;
    bytes[8] = 0x80;
    Uuid::from_bytes(bytes)
}

impl ListFilter {
    /// The id bounds a time range implies (see [`ID_CLOCK_SLACK`]).
    fn id_range(&self) -> (Option<Uuid>, Option<Uuid>) {
        let low = self.since.map(|t| v7_floor(t - ID_CLOCK_SLACK));
        let high = self.until.map(|t| v7_floor(t + ID_CLOCK_SLACK));
        let high = match (high, self.before_id) {
            (Some(h), Some(b)) => Some(h.min(b)),
            (h, b) => h.or(b),
        };
        (low, high)
    }
}

/// Lists commands, newest first. A live or ambiguous state is looked up
/// through the small sets that hold it (the queue, the in-flight table, the
/// history's ambiguous index), since no index of `commands` names the state.
pub async fn list(
    ex: impl PgExecutor<'_>,
    filter: &ListFilter,
) -> Result<Vec<CommandRow>, sqlx::Error> {
    let (low_id, high_id) = filter.id_range();
    if let Some(state) = filter
        .state
        .filter(|s| !s.is_terminal() || *s == State::Ambiguous)
    {
        return sqlx::query_as!(
            CommandRow,
            r#"
            select * from commands
            where id in (
                    select id from command_queue where $2 = 'pending'
                    union all
                    select id from command_in_flight where $2 in ('prepared', 'effect_started')
                    union all
                    select command_id from command_history where to_state = 'ambiguous' and $2 = 'ambiguous'
                  )
              and state = $2
              and ($1::uuid[] is null or scope = any($1))
              and ($3::text is null or authority_id = $3)
              and ($4::uuid is null or id < $4)
              and ($6::timestamptz is null or created_at >= $6)
              and ($7::timestamptz is null or created_at < $7)
              and ($8::text is null or kind = $8)
              and ($9::text is null or idempotency_key = $9)
              and ($10::text is null or scope = (select p.id from principals p where p.name = $10))
              and ($11::uuid is null or id >= $11)
            order by id desc
            limit $5
            "#,
            filter.scope.as_deref(),
            state.as_str(),
            filter.authority_id.as_deref(),
            high_id,
            filter.limit,
            filter.since,
            filter.until,
            filter.kind.as_deref(),
            filter.key.as_deref(),
            filter.principal.as_deref(),
            low_id,
        )
        .fetch_all(ex)
        .await;
    }
    // Each filter has an index that leads with it (scope, authority, kind,
    // key; a time range is an id range); none names the state, which is
    // checked on the rows found.
    sqlx::query_as!(
        CommandRow,
        r#"
        select * from commands
        where ($1::uuid[] is null or scope = any($1))
          and ($2::text is null or state = $2)
          and ($3::text is null or authority_id = $3)
          and ($4::uuid is null or id < $4)
          and ($6::timestamptz is null or created_at >= $6)
          and ($7::timestamptz is null or created_at < $7)
          and ($8::text is null or kind = $8)
          and ($9::text is null or idempotency_key = $9)
          and ($10::text is null or scope = (select p.id from principals p where p.name = $10))
          and ($11::uuid is null or id >= $11)
        order by id desc
        limit $5
        "#,
        filter.scope.as_deref(),
        filter.state.map(State::as_str),
        filter.authority_id.as_deref(),
        high_id,
        filter.limit,
        filter.since,
        filter.until,
        filter.kind.as_deref(),
        filter.key.as_deref(),
        filter.principal.as_deref(),
        low_id,
    )
    .fetch_all(ex)
    .await
}

/// The history of a command, oldest first.
pub async fn history(ex: impl PgExecutor<'_>, id: Uuid) -> Result<Vec<HistoryRow>, sqlx::Error> {
    sqlx::query_as!(
        HistoryRow,
        r#"
        select id, from_state, to_state, at, actor, authority_generation, reason
        from command_history
        where command_id = $1
        order by id
        "#,
        id,
    )
    .fetch_all(ex)
    .await
}

/// What a cancel request did.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelOutcome {
    /// The command moved to `cancelled` now.
    Cancelled(CommandRow),
    /// It was already cancelled: nothing changed.
    AlreadyCancelled(CommandRow),
    /// Too late: the command is in this state, which cannot be cancelled.
    TooLate(CommandRow),
    NotFound,
}

/// Cancels a pending or prepared command. The `where` clause is the
/// compare-and-set: a custodian that moved the row on first wins, and the
/// cancel reports the state it found.
pub async fn cancel(
    conn: &mut PgConnection,
    id: Uuid,
    scope: Option<&[Uuid]>,
    actor: &str,
) -> Result<CancelOutcome, sqlx::Error> {
    let cancelled = sqlx::query_as!(
        CommandRow,
        r#"
        update commands c
        set state = 'cancelled',
            error = jsonb_build_object('reason', 'cancelled', 'by', $3::text)
        where c.id = $1 and ($2::uuid[] is null or c.scope = any($2))
          and c.state in ('pending', 'prepared')
        returning c.*
        "#,
        id,
        scope,
        actor,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = cancelled {
        return Ok(CancelOutcome::Cancelled(row));
    }
    Ok(match get(&mut *conn, id, scope).await? {
        None => CancelOutcome::NotFound,
        Some(row) if row.state() == State::Cancelled => CancelOutcome::AlreadyCancelled(row),
        Some(row) => CancelOutcome::TooLate(row),
    })
}

/// Per live state: how many commands, and the age of the oldest (seconds).
pub async fn oldest_in_flight(
    ex: impl PgExecutor<'_>,
) -> Result<Vec<(String, i64, Option<f64>)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select state as "state!", commands as "commands!",
               extract(epoch from oldest_age)::float8 as oldest_seconds
        from command_oldest_in_flight
        "#
    )
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.state, r.commands, r.oldest_seconds))
        .collect())
}

/// How many commands ended ambiguous and are still kept (a command ends
/// ambiguous once; a partial index of the history keeps this cheap).
pub async fn count_ambiguous(ex: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select count(*) as "n!" from command_history where to_state = 'ambiguous'"#
    )
    .fetch_one(ex)
    .await
}

/// One bounded batch of pruning (`prune_commands` in the database): archives
/// and deletes at most `max_rows` commands that finished more than
/// `older_than` ago, with their history. Returns how many; 0 when done.
pub async fn prune_batch(
    pool: &PgPool,
    older_than: std::time::Duration,
    max_rows: i32,
    actor: &str,
) -> Result<i32, sqlx::Error> {
    let mut tx = txn::begin_as(pool, txn::Isolation::ReadCommitted, actor).await?;
    let pruned = sqlx::query_scalar!(
        r#"
        select prune_commands(make_interval(secs => $1), $2) as "pruned!"
        "#,
        older_than.as_secs_f64(),
        max_rows,
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(pruned)
}

#[cfg(test)]
mod id_range_tests {
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

    #[test]
    fn the_v7_floor_sorts_before_every_id_of_its_millisecond_and_after_earlier_ones() {
        let t = Utc::now();
        let floor = v7_floor(t);
        let ts = uuid::Timestamp::from_unix(
            uuid::NoContext,
            u64::try_from(t.timestamp()).unwrap(),
            t.timestamp_subsec_nanos(),
        );
        let id = Uuid::new_v7(ts);
        assert!(floor <= id);
        assert!(v7_floor(t - chrono::Duration::milliseconds(1)) < floor);
        assert_eq!(floor.get_version_num(), 7);
    }
}
