//! Holds: near-duplicate requests waiting for an operator's decision.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

use super::commands::CommandRow;
use super::new_command::{NewCommand, Request};
use super::submissions;
use super::txn;
use crate::domain::CommandState;
use crate::domain::hold::{self, IntentNow};

#[derive(Debug, Clone, PartialEq)]
pub struct HoldRow {
    pub id: Uuid,
    pub scope: Uuid,
    pub kind: String,
    pub authority_id: String,
    pub pinned_generation: Option<i64>,
    pub run_id: Option<String>,
    pub args: Value,
    pub canonical: Value,
    pub canonical_rules: Vec<String>,
    pub request_digest: Vec<u8>,
    pub intent_digest: Vec<u8>,
    pub digest_version: i16,
    pub deadline_at: Option<DateTime<Utc>>,
    pub resembles: Uuid,
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
    pub command_id: Option<Uuid>,
    pub not_before: Option<DateTime<Utc>>,
    pub priority: i16,
    /// The applied command a release was confirmed against (migration 0040).
    pub confirmed_applied: Option<Uuid>,
}

impl HoldRow {
    /// The held request, as a command would record it.
    pub fn request(&self) -> Request<'_> {
        Request {
            scope: self.scope,
            kind: &self.kind,
            authority_id: &self.authority_id,
            pinned_generation: self.pinned_generation,
            run_id: self.run_id.as_deref(),
            args: &self.args,
            canonical: &self.canonical,
            canonical_rules: &self.canonical_rules,
            request_digest: &self.request_digest,
            intent_digest: &self.intent_digest,
            digest_version: self.digest_version,
            deadline_at: self.deadline_at,
            not_before: self.not_before,
            priority: self.priority,
            // A hold keeps no trace context: the command its release
            // records starts no trace of the held request's caller.
            trace: None,
        }
    }
}

/// What a hold records.
#[derive(Debug, Clone)]
pub struct NewHold<'a> {
    pub id: Uuid,
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
    pub not_before: Option<DateTime<Utc>>,
    pub priority: i16,
    pub resembles: Uuid,
}

impl<'a> NewHold<'a> {
    /// A hold of `request`, which resembles the command `resembles`.
    pub fn new(request: &Request<'a>, resembles: Uuid) -> Self {
        NewHold {
            id: Uuid::now_v7(),
            scope: request.scope,
            kind: request.kind,
            authority_id: request.authority_id,
            pinned_generation: request.pinned_generation,
            run_id: request.run_id,
            args: request.args,
            canonical: request.canonical,
            canonical_rules: request.canonical_rules,
            request_digest: request.request_digest,
            intent_digest: request.intent_digest,
            digest_version: request.digest_version,
            deadline_at: request.deadline_at,
            not_before: request.not_before,
            priority: request.priority,
            resembles,
        }
    }
}

/// Records an open hold, or returns the open hold of the same request (a retry).
pub async fn hold(conn: &mut sqlx::PgConnection, h: &NewHold<'_>) -> Result<HoldRow, sqlx::Error> {
    let inserted = sqlx::query_as!(
        HoldRow,
        r#"
        insert into holds (id, scope, kind, authority_id, pinned_generation, run_id, args, canonical,
                           canonical_rules, request_digest, intent_digest, digest_version, deadline_at, resembles,
                           not_before, priority)
        values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
        -- A fresh id collides with nothing: the only conflict is the open
        -- request (holds_open_request_unique, which on Citus also names the
        -- authority, so no column list would fit both layouts).
        on conflict do nothing
        returning *
        "#,
        h.id,
        h.scope,
        h.kind,
        h.authority_id,
        h.pinned_generation,
        h.run_id,
        h.args,
        h.canonical,
        h.canonical_rules,
        h.request_digest,
        h.intent_digest,
        h.digest_version,
        h.deadline_at,
        h.resembles,
        h.not_before,
        h.priority,
    )
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = inserted {
        return Ok(row);
    }
    sqlx::query_as!(
        HoldRow,
        "select * from holds where scope = $1 and request_digest = $2 and state = 'open'",
        h.scope,
        h.request_digest,
    )
    .fetch_one(&mut *conn)
    .await
}

pub async fn get(ex: impl PgExecutor<'_>, id: Uuid) -> Result<Option<HoldRow>, sqlx::Error> {
    sqlx::query_as!(HoldRow, "select * from holds where id = $1", id)
        .fetch_optional(ex)
        .await
}

/// Locks an open hold for a decision. The hold is found by id first, then
/// locked by its authority and id: on Citus a row lock must name the shard.
pub async fn lock_open(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
) -> Result<Option<HoldRow>, sqlx::Error> {
    let Some(found) = get(&mut *conn, id).await? else {
        return Ok(None);
    };
    sqlx::query_as!(
        HoldRow,
        "select * from holds where authority_id = $1 and id = $2 and state = 'open' for update",
        found.authority_id,
        id
    )
    .fetch_optional(conn)
    .await
}

/// Holds newest first, optionally only those in `state`.
pub async fn list(
    ex: impl PgExecutor<'_>,
    state: Option<&str>,
    limit: i64,
) -> Result<Vec<HoldRow>, sqlx::Error> {
    sqlx::query_as!(
        HoldRow,
        "select * from holds where ($1::text is null or state = $1) order by created_at desc limit $2",
        state,
        limit,
    )
    .fetch_all(ex)
    .await
}

/// Closes an open hold: `released` (with the command it created, and the
/// applied command the release was confirmed against, if any) or `rejected`.
#[allow(clippy::too_many_arguments)]
pub async fn decide(
    ex: impl PgExecutor<'_>,
    authority: &str,
    id: Uuid,
    state: &str,
    command_id: Option<Uuid>,
    confirmed_applied: Option<Uuid>,
    actor: &str,
    reason: Option<&str>,
) -> Result<Option<HoldRow>, sqlx::Error> {
    sqlx::query_as!(
        HoldRow,
        r#"
        update holds set state = $2, command_id = $3, decided_at = now(), decided_by = $4, decision_reason = $5,
                         confirmed_applied = $7
        where authority_id = $6 and id = $1 and state = 'open'
        returning *
        "#,
        id,
        state,
        command_id,
        actor,
        reason,
        authority,
        confirmed_applied,
    )
    .fetch_optional(ex)
    .await
}

/// What the ledger says now about `hold`'s intent (`domain::hold`): the
/// command it resembles, that command's resolution, the newest command of
/// the intent, and the newest applied since the hold opened (other than
/// the hold's own). All of it on the hold's authority (one shard on Citus).
pub async fn intent_now(ex: impl PgExecutor<'_>, hold: &HoldRow) -> Result<IntentNow, sqlx::Error> {
    let row = sqlx::query!(
        r#"
        select r.state as "resembles?",
               (select s.outcome from command_resolutions s
                where s.authority_id = $1 and s.command_id = r.id) as "resolution?",
               l.id as "latest_id?",
               l.state as "latest_state?",
               (select c.id from commands c
                where c.authority_id = $1 and c.scope = $2 and c.intent_digest = $3
                  and c.created_at > $4 and c.state = 'applied'
                  and c.id is distinct from $6
                order by c.created_at desc limit 1) as "applied_since?"
        from holds h
        left join commands r on r.authority_id = h.authority_id and r.id = h.resembles
        left join lateral (
            select c.id, c.state from commands c
            where c.authority_id = $1 and c.scope = $2 and c.intent_digest = $3
            order by c.created_at desc limit 1
        ) l on true
        where h.authority_id = $1 and h.id = $5
        "#,
        hold.authority_id,
        hold.scope,
        hold.intent_digest,
        hold.created_at,
        hold.id,
        hold.command_id,
    )
    .fetch_one(ex)
    .await?;
    let state = |s: Option<String>| s.and_then(|s| s.parse::<CommandState>().ok());
    Ok(IntentNow {
        resembles: state(row.resembles),
        resembles_resolution: row.resolution,
        latest: row.latest_id.zip(state(row.latest_state)),
        applied_since: row.applied_since,
    })
}

/// What a release did.
#[derive(Debug)]
pub enum Released {
    /// The hold is released; the command it recorded.
    Done(Box<(HoldRow, CommandRow)>),
    /// The hold is not open (decided already, or missing).
    NotOpen,
    /// The intent was applied by this command after the hold opened, and
    /// the release did not name it: nothing was recorded.
    Unconfirmed(Uuid),
}

/// Releases an open hold in one transaction: records its command (pending,
/// under the key `hold:<id>`, durable before any dispatch, like every
/// command) and closes the hold as `released`, naming that command. A hold
/// whose intent was applied after it opened is released only when
/// `confirmed_applied` names that applied command (read under the hold's
/// lock, in the release's own transaction).
pub async fn release(
    conn: &mut sqlx::PgConnection,
    backend: super::Backend,
    id: Uuid,
    confirmed_applied: Option<Uuid>,
    actor: &str,
    reason: Option<&str>,
) -> Result<Released, sqlx::Error> {
    let mut tx = txn::Opening::new(
        backend,
        txn::Isolation::ReadCommitted,
        &[(txn::ACTOR, actor)],
    )
    .in_connection(conn)
    .await?;
    let Some(hold) = lock_open(&mut tx, id).await? else {
        return Ok(Released::NotOpen);
    };
    let standing = hold::standing(&intent_now(&mut *tx, &hold).await?);
    if let Err(applied) = hold::may_release(&standing, confirmed_applied) {
        return Ok(Released::Unconfirmed(applied));
    }
    let confirmed = standing.confirmation_needed();
    let key = format!("hold:{}", hold.id);
    let new = NewCommand::new(&hold.request(), &key, None, actor);
    let command = match submissions::insert_pending(&mut tx, backend, &new).await? {
        Some(row) => row,
        None => match submissions::find_by_key(&mut tx, backend, hold.scope, &key).await? {
            Some(row) => row,
            None => return Ok(Released::NotOpen),
        },
    };
    let Some(hold) = decide(
        &mut *tx,
        &hold.authority_id,
        id,
        "released",
        Some(command.id),
        confirmed,
        actor,
        reason,
    )
    .await?
    else {
        return Ok(Released::NotOpen);
    };
    tx.commit().await?;
    Ok(Released::Done(Box::new((hold, command))))
}

pub async fn count_open(ex: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(r#"select count(*) as "n!" from holds where state = 'open'"#)
        .fetch_one(ex)
        .await
}
