//! Commands as the API reads them: one by id, the list, the history, the
//! counts; and cancel. Inserting a submission (and finding what a key or an
//! intent already names) is [`super::submissions`].
//!
//! The actor (and reason) of a change travel as transaction-local settings,
//! set as the transaction opens ([`super::txn`]), so the history trigger can
//! name who did it without an extra round trip.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor, PgPool};
use std::sync::atomic::AtomicU64;
use uuid::Uuid;

use super::txn;

use crate::domain::CommandState;
use crate::domain::trace_context::TraceContext;

/// One command as stored: a row of `commands`, also as the composite value
/// of that row type (what an engine step returns on Citus, where a call is
/// delegated to a worker only when it stands alone in the select list).
#[derive(Debug, Clone, PartialEq, sqlx::Type)]
#[sqlx(type_name = "commands")]
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
    /// Not claimed before this instant.
    pub not_before: Option<DateTime<Utc>>,
    /// Higher is claimed first within the authority (`domain::schedule`).
    pub priority: i16,
    /// The immutable columns' digest (identity-v2), written by the first
    /// engine step that moves the command (migration 0030); a cache that
    /// `verify` recomputes and never trusts.
    pub identity_digest: Option<Vec<u8>>,
    /// The W3C `traceparent` and `tracestate` it was submitted with
    /// (migration 0044), which the custodian's spans and the provider's
    /// request join. Not part of the fingerprint.
    pub trace_parent: Option<String>,
    pub trace_state: Option<String>,
    /// Which attempt of its chain it is (migration 0046): 1, or n > 1 for
    /// one the record step scheduled after attempt n - 1 failed with
    /// nothing done; such a command names the chain's first in `retry_of`.
    pub attempt: i32,
}

impl CommandRow {
    /// [`CommandRow::attempt`] as a count (the schema keeps it at least 1).
    pub fn attempt(&self) -> u32 {
        u32::try_from(self.attempt).unwrap_or(1)
    }

    /// The first command of its attempt chain: itself, or the one an
    /// attempt after the first names.
    pub fn first_attempt(&self) -> Uuid {
        match self.retry_of {
            Some(first) if self.attempt > 1 => first,
            _ => self.id,
        }
    }

    /// The trace context it was submitted with, if any (as stored: the
    /// guard admits only the version-00 form).
    pub fn trace(&self) -> Option<TraceContext> {
        TraceContext::from_headers(self.trace_parent.as_deref(), self.trace_state.as_deref())
    }

    /// The state as the domain type. The schema's check
    /// `commands_state_known` (the states of `command_states`) guarantees
    /// the name is known.
    pub fn state(&self) -> CommandState {
        self.state
            .parse()
            .expect("commands_state_known admits only the known states")
    }
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
    pub state: Option<CommandState>,
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
    /// Only pending commands waiting for their `not_before`.
    pub scheduled: bool,
    /// Only ambiguous commands with no resolution beside them (the caller
    /// sets `state` to ambiguous with it).
    pub unresolved: bool,
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
    // Scheduled commands are pending ones.
    let state = match (filter.scheduled, filter.state) {
        (false, state) => state,
        (true, None | Some(CommandState::Pending)) => Some(CommandState::Pending),
        (true, Some(_)) => return Ok(Vec::new()),
    };
    if let Some(state) = state.filter(|s| !s.is_terminal() || *s == CommandState::Ambiguous) {
        return sqlx::query_as!(
            CommandRow,
            r#"
            select * from commands
            where id in (
                    select id from command_queue
                    where $2 = 'pending' and (not $12 or (ready_at is not null and ready_at > now()))
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
              and (not $13 or not exists (
                    select 1 from command_resolutions r
                    where r.authority_id = commands.authority_id and r.command_id = commands.id))
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
            filter.scheduled,
            filter.unresolved,
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
        filter.state.map(CommandState::as_str),
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

/// Cancels a pending or prepared command of `scope` (`None`: any), acting
/// as `actor`, in a SERIALIZABLE transaction: a custodian that moves the
/// row on meanwhile makes it retry (each retry counted in `retries`) and
/// then report the state it found.
pub async fn cancel(
    pool: &PgPool,
    backend: super::Backend,
    retries: &AtomicU64,
    id: Uuid,
    scope: Option<&[Uuid]>,
    actor: &str,
) -> Result<CancelOutcome, txn::TxError> {
    let mut retry = txn::Retrying::with_settings(
        pool,
        backend,
        retries,
        "cancel",
        txn::Isolation::Serializable,
        &[(txn::ACTOR, actor), (txn::REASON, "cancel requested")],
    );
    loop {
        let mut tx = retry.next_attempt().await?;
        let attempt = cancel_in(&mut tx, id, scope, actor).await;
        if let Some(outcome) = retry.finish(tx, attempt).await? {
            return Ok(outcome);
        }
    }
}

/// The cancel's statements. The `where` clause is the compare-and-set: a
/// custodian that moved the row on first wins, and the cancel reports the
/// state it found.
async fn cancel_in(
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
        Some(row) if row.state() == CommandState::Cancelled => CancelOutcome::AlreadyCancelled(row),
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

/// Per authority: how many of its pending commands are ready, and how
/// long the oldest ready one has waited, in seconds
/// (`command_backlog_by_authority`).
pub async fn backlog_by_authority(
    ex: impl PgExecutor<'_>,
) -> Result<Vec<(String, i64, f64)>, sqlx::Error> {
    let rows = sqlx::query!(
        r#"
        select authority_id as "authority_id!", ready as "ready!",
               extract(epoch from oldest_ready_wait)::float8 as "oldest_ready_seconds!"
        from command_backlog_by_authority
        order by authority_id
        "#
    )
    .fetch_all(ex)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.authority_id, r.ready, r.oldest_ready_seconds))
        .collect())
}

/// How many commands kept in the ledger ended ambiguous and have no
/// resolution yet (a command ends ambiguous once, and its history goes
/// with it when pruned; a partial index of the history keeps this cheap).
pub async fn count_unresolved_ambiguous(ex: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select count(*) as "n!" from command_history h
        where h.to_state = 'ambiguous'
          and not exists (select 1 from command_resolutions r
                          where r.authority_id = h.authority_id and r.command_id = h.command_id)
        "#
    )
    .fetch_one(ex)
    .await
}

/// One bounded batch of pruning (`prune_commands` in the database): archives
/// and deletes at most `max_rows` commands that finished more than
/// `older_than` ago, with their history. Returns how many; 0 when done.
pub async fn prune_batch(
    pool: &PgPool,
    backend: super::Backend,
    older_than: std::time::Duration,
    max_rows: i32,
    actor: &str,
) -> Result<i32, sqlx::Error> {
    let mut tx = txn::begin_as(pool, backend, txn::Isolation::ReadCommitted, actor).await?;
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
