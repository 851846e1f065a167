//! Recovery's statements: find unfinished commands that need a decision,
//! and apply each decision guarded on the state and generation that were
//! read, so a row that finished (or was taken back by a live holder) in the
//! meantime is never overwritten.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

use crate::domain::retry::NextAttempt;

/// An unfinished command that recovery may have to act on, with its facts.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub id: Uuid,
    pub state: String,
    pub kind: String,
    pub args: Value,
    pub authority_id: String,
    pub authority_generation: Option<i64>,
    pub pinned_generation: Option<i64>,
    pub deadline_at: Option<DateTime<Utc>>,
    pub deadline_passed: bool,
    pub current_generation: Option<i64>,
    pub lease_live: bool,
    /// When `effect_started` was recorded (effect_started rows only).
    pub effect_started_at: Option<DateTime<Utc>>,
    /// The database's clock when the candidate was read: the one clock
    /// that decides whether an effect's window has closed.
    pub read_at: DateTime<Utc>,
    /// The command's trace context, which the probe's request carries on.
    pub trace_parent: Option<String>,
    pub trace_state: Option<String>,
    /// Which attempt of its chain the command is.
    pub attempt: i32,
}

impl Candidate {
    /// [`Candidate::attempt`] as a count (the schema keeps it at least 1).
    pub fn attempt(&self) -> u32 {
        u32::try_from(self.attempt).unwrap_or(1)
    }
}

/// Up to `limit` claimed commands (`prepared`, `effect_started`) that need
/// a decision, with ids after `after`, in id order (the caller pages
/// through them, so rows it cannot move never hide later ones); only of
/// `authorities` when given. Read from the in-flight table: as many rows as
/// the custodians hold.
pub async fn claimed(
    ex: impl PgExecutor<'_>,
    after: Option<Uuid>,
    limit: i64,
    authorities: Option<&[String]>,
) -> Result<Vec<Candidate>, sqlx::Error> {
    sqlx::query_as!(
        Candidate,
        r#"
        select c.id, c.state, c.kind, c.args, c.authority_id, c.authority_generation,
               c.pinned_generation, c.deadline_at,
               coalesce(c.deadline_at <= now(), false) as "deadline_passed!",
               a.generation as "current_generation?",
               coalesce(a.lease_expires_at > now(), false) as "lease_live!",
               case when c.state = 'effect_started' then c.updated_at end as "effect_started_at?",
               now() as "read_at!", c.trace_parent, c.trace_state, c.attempt
        from command_in_flight f
        join commands c on c.authority_id = f.authority_id and c.id = f.id
        left join authorities a on a.id = c.authority_id
        where ($1::uuid is null or f.id > $1)
          and ($3::text[] is null or f.authority_id = any($3))
          and c.state in ('prepared', 'effect_started')
          and (
                (c.state = 'prepared' and (c.deadline_at <= now() or c.authority_generation < a.generation))
             or (c.state = 'effect_started'
                 and (c.authority_generation < a.generation
                      or a.lease_expires_at is null or a.lease_expires_at <= now()))
          )
        order by f.id
        limit $2
        "#,
        after,
        limit,
        authorities,
    )
    .fetch_all(ex)
    .await
}

/// Up to `limit` pending commands past their deadline, after `after`
/// (deadline, id) in that order; only of `authorities` when given. Read
/// through the queue's index of deadlines (migration 0038): as many rows
/// as are overdue, whatever the backlog. `deadline_at` is the queue's copy,
/// the one the rows are ordered by, so a cursor taken from the last row
/// always moves forward; the decision reads the command's own.
pub async fn overdue(
    ex: impl PgExecutor<'_>,
    after: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
    authorities: Option<&[String]>,
) -> Result<Vec<Candidate>, sqlx::Error> {
    let (after_deadline, after_id) = after.unzip();
    sqlx::query_as!(
        Candidate,
        r#"
        select c.id, c.state, c.kind, c.args, c.authority_id, c.authority_generation,
               c.pinned_generation, q.deadline_at,
               coalesce(c.deadline_at <= now(), false) as "deadline_passed!",
               a.generation as "current_generation?",
               coalesce(a.lease_expires_at > now(), false) as "lease_live!",
               null::timestamptz as "effect_started_at?",
               now() as "read_at!", c.trace_parent, c.trace_state, c.attempt
        from command_queue q
        join commands c on c.authority_id = q.authority_id and c.id = q.id
        left join authorities a on a.id = c.authority_id
        where q.deadline_at <= now()
          and ($1::timestamptz is null or (q.deadline_at, q.id) > ($1, $2::uuid))
          and ($4::text[] is null or q.authority_id = any($4))
          and c.state = 'pending'
        order by q.deadline_at, q.id
        limit $3
        "#,
        after_deadline,
        after_id,
        limit,
        authorities,
    )
    .fetch_all(ex)
    .await
}

/// `pending`/`prepared` → `expired`, if the row is still as read.
pub async fn expire(
    ex: impl PgExecutor<'_>,
    id: Uuid,
    authority: &str,
    state: &str,
    generation: Option<i64>,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        update commands c
        set state = 'expired', error = jsonb_build_object('reason', $4::text)
        where c.authority_id = $5 and c.id = $1 and c.state = $2 and c.state in ('pending', 'prepared')
          and c.authority_generation is not distinct from $3
          and ($4 <> 'deadline_passed' or c.deadline_at <= now())
        "#,
        id,
        state,
        generation,
        reason,
        authority,
    )
    .execute(ex)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Rebinds a prepared row from `from` to the authority's current generation `to`.
pub async fn adopt(
    ex: impl PgExecutor<'_>,
    id: Uuid,
    authority: &str,
    from: i64,
    to: i64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query!(
        r#"
        update commands c
        set authority_generation = $3
        from authorities a
        where c.authority_id = $4 and c.id = $1 and c.state = 'prepared' and c.authority_generation = $2
          and a.id = $4 and a.generation = $3
        "#,
        id,
        from,
        to,
        authority,
    )
    .execute(ex)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Records the resolution of a started command whose executor is gone, only
/// if it is still `effect_started` at `generation` and its authority is
/// still superseded or unleased (a holder that came back keeps its work).
/// A failure with `next` (the probe's certain "not applied", under the
/// kind's retry policy) gets its next attempt in the same transaction
/// (`ledger_next_attempt`, a statement of its own: on Citus the step runs
/// on the worker holding the authority's shards, and cannot run inside a
/// statement sent to a shard), so that the failure and its successor commit
/// together. Run it in a transaction.
#[allow(clippy::too_many_arguments)]
pub async fn resolve(
    conn: &mut PgConnection,
    id: Uuid,
    authority: &str,
    generation: i64,
    state: &str,
    result: Option<&Value>,
    error: Option<&Value>,
    next: Option<NextAttempt>,
) -> Result<bool, sqlx::Error> {
    let moved = sqlx::query!(
        r#"
        update commands c
        set state = $3, result = $4, error = $5
        from authorities a
        where c.authority_id = $6 and c.id = $1 and c.state = 'effect_started' and c.authority_generation = $2
          and a.id = $6
          and (a.generation > $2 or a.lease_expires_at is null or a.lease_expires_at <= now())
        "#,
        id,
        generation,
        state,
        result,
        error,
        authority,
    )
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    if let Some(next) = next.filter(|_| moved && state == "failed") {
        sqlx::query_scalar!(
            r#"select ledger_next_attempt($1, $2, $3, $4) as "written!""#,
            authority,
            id,
            next.wait.as_secs_f64(),
            next.within.map(|w| w.as_secs_f64()),
        )
        .fetch_one(&mut *conn)
        .await?;
    }
    Ok(moved)
}
