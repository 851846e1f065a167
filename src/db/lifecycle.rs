//! The custodian's steps: claim and start, start prepared rows, record
//! outcomes (each a call of a function of the schema,
//! `migrations/functions/`), and adopt a superseded generation's prepared
//! rows. Each is one statement and a compare-and-set: it names the state it
//! expects and, from `prepared` on, the generation, and is fenced by the
//! authority's row in the same statement: held for share by the claim and
//! the starts (a takeover waits until they commit), matched on the
//! generation by the record and the adoption. docs/design/isolation.md
//! argues what that rules out at each step's isolation.

use serde_json::Value;
use sqlx::PgExecutor;
use uuid::Uuid;

use super::CommandRow;
use crate::domain::EffectOutcome;
use crate::domain::retry::NextAttempt;

/// When the next command of `authorities` that waits for its `not_before`
/// falls due (`None`: none waits). From the queue's index of scheduled
/// commands, which holds nothing for commands without a `not_before`.
pub async fn next_due(
    ex: impl PgExecutor<'_>,
    authorities: &[String],
) -> Result<Option<chrono::DateTime<chrono::Utc>>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
        select min(q.ready_at) as "due"
        from command_queue q
        where q.authority_id = any($1) and q.ready_at is not null and q.ready_at > now()
        "#,
        authorities,
    )
    .fetch_one(ex)
    .await
}

/// The current generation of `authority` adopts its `prepared` rows bound to
/// an older generation (their effect was never attempted); a row pinned to
/// another generation expires instead. Returns the rows it changed. Run in
/// a SERIALIZABLE transaction acting as the custodian ([`super::txn`]).
pub async fn adopt_prepared(
    ex: impl PgExecutor<'_>,
    authority: &str,
    holder: &str,
    generation: i64,
    limit: i64,
) -> Result<Vec<CommandRow>, sqlx::Error> {
    sqlx::query_as!(
        CommandRow,
        r#"
        with lease as (
            select id, generation from authorities
            where id = $1 and lease_holder = $2 and generation = $3 and lease_expires_at > now()
            for share
        ),
        picked as (
            select c.id, c.pinned_generation is null or c.pinned_generation = $3 as ours,
                   c.pinned_generation
            from lease l
            join command_in_flight f on f.authority_id = l.id
            join commands c on c.authority_id = f.authority_id and c.id = f.id
            where f.authority_id = $1 and c.authority_id = $1
              and c.state = 'prepared' and c.authority_generation < l.generation
            order by c.id
            limit $4
            for update of c skip locked
        )
        update commands c
        set state = case when p.ours then 'prepared' else 'expired' end,
            -- A pinned row expires under the generation it was prepared
            -- with: the guard lets a generation move only prepared → prepared.
            authority_generation = case when p.ours then $3 else c.authority_generation end,
            -- Built from text, not jsonb_build_object: Citus allows only
            -- immutable functions inside CASE.
            error = case when not p.ours then
                        ('{"reason": "authority_superseded", "pinned_generation": '
                         || p.pinned_generation::text || ', "authority_generation": '
                         || $3::bigint::text || '}')::jsonb
                    end
        from picked p
        where c.authority_id = $1 and c.id = p.id
        returning c.*
        "#,
        authority,
        holder,
        generation,
        limit,
    )
    .fetch_all(ex)
    .await
}

/// Starts up to `limit` prepared commands of `authority` bound to the
/// generation `holder` leases (`ledger_start_prepared`,
/// `migrations/functions/ledger_start_prepared.sql`): rows an adoption
/// rebound, or another writer left prepared. Each becomes `effect_started`,
/// or `expired` when its deadline passed. Returns them as they now are. Run
/// in a transaction acting as the custodian, at the claim's isolation: the
/// lease row held for share fences it. No effect may start before it
/// commits.
pub async fn start_prepared(
    ex: impl PgExecutor<'_>,
    authority: &str,
    holder: &str,
    limit: i64,
) -> Result<Vec<CommandRow>, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select ledger_start_prepared($1, $2, $3::bigint::integer) as "row!: CommandRow""#,
        authority,
        holder,
        limit,
    )
    .fetch_all(ex)
    .await
}

/// Claims and starts, in one statement (`ledger_claim_start`, migration
/// 0030): up to `limit` queued commands of the authorities `holder` leases
/// go from `pending` through `prepared` to `effect_started` under the
/// lease's generation, or to `expired`. Returns them as they now are. Run
/// in a transaction acting as the custodian, at the claim's isolation: the
/// lease row held for share fences it (a takeover waits for its commit). No
/// effect may start before it commits.
pub async fn claim_start(
    ex: impl PgExecutor<'_>,
    authorities: &[String],
    holder: &str,
    limit: i64,
) -> Result<Vec<CommandRow>, sqlx::Error> {
    sqlx::query_as!(
        CommandRow,
        r#"
        select c.id as "id!", c.scope as "scope!", c.idempotency_key as "idempotency_key!",
               c.request_digest as "request_digest!", c.digest_version as "digest_version!",
               c.kind as "kind!", c.authority_id as "authority_id!", c.authority_generation,
               c.run_id, c.args as "args!", c.canonical as "canonical!", c.state as "state!",
               c.result, c.error, c.created_at as "created_at!", c.updated_at as "updated_at!",
               c.deadline_at, c.finished_at, c.pinned_generation, c.intent_digest,
               c.canonical_rules as "canonical_rules!", c.intent_epoch, c.retry_of, c.not_before,
               c.priority as "priority!", c.identity_digest, c.trace_parent, c.trace_state,
               c.attempt as "attempt!"
        from ledger_claim_start($1, $2, $3::bigint::integer) as c
        "#,
        authorities,
        holder,
        limit,
    )
    .fetch_all(ex)
    .await
}

/// [`claim_start`] for one authority (`ledger_claim_start_authority`,
/// migration 0033): on Citus the call is the transaction's only statement
/// on the ledger's tables and runs whole on the worker holding the
/// authority's shards, so it stands alone in the select list. With `copy`,
/// the step's copy that names those shards, on the node holding them
/// (`ledger_claim_start_authority_s<copy>`, migration 0039). Run in a
/// transaction of its own acting as the custodian, at the claim's isolation.
pub async fn claim_start_authority(
    ex: impl PgExecutor<'_>,
    copy: Option<i64>,
    authority: &str,
    holder: &str,
    limit: i64,
) -> Result<Vec<CommandRow>, sqlx::Error> {
    match copy {
        None => {
            sqlx::query_scalar!(
                r#"select ledger_claim_start_authority($1, $2, $3::bigint::integer) as "row!: CommandRow""#,
                authority,
                holder,
                limit,
            )
            .fetch_all(ex)
            .await
        }
        // A copy's name holds its shard's id, so its call is built here
        // (from an integer) and cannot be checked at compile time; it takes
        // and returns what the step does.
        Some(shard) => {
            sqlx::query_scalar::<_, CommandRow>(sqlx::AssertSqlSafe(format!(
                "select ledger_claim_start_authority_s{shard}($1, $2, $3::bigint::integer)"
            )))
            .bind(authority)
            .bind(holder)
            .bind(limit)
            .fetch_all(ex)
            .await
        }
    }
}

/// Records terminal outcomes of started commands through the engine step
/// `ledger_record_outcomes`, or with `copy` its copy that names the
/// authority's shards (`ledger_record_outcomes_s<copy>`, migration 0039),
/// only while the authority is still at `generation`. Returns the ids
/// recorded; a missing id was fenced out (the authority moved on) or is no
/// longer `effect_started`. Run in a transaction acting as the custodian.
pub async fn record_outcomes(
    ex: impl PgExecutor<'_>,
    copy: Option<i64>,
    outcomes: &[Outcome],
    authority: &str,
    generation: i64,
) -> Result<Vec<Uuid>, sqlx::Error> {
    match copy {
        None => {
            sqlx::query_scalar!(
                r#"select id as "id!" from ledger_record_outcomes($2, $3, $1::jsonb) as r(id)"#,
                outcomes_json(outcomes),
                authority,
                generation,
            )
            .fetch_all(ex)
            .await
        }
        // Built here as the claim's copy is (above).
        Some(shard) => {
            sqlx::query_scalar::<_, Uuid>(sqlx::AssertSqlSafe(format!(
                "select id from ledger_record_outcomes_s{shard}($1, $2, $3::jsonb) as r(id)"
            )))
            .bind(authority)
            .bind(generation)
            .bind(outcomes_json(outcomes))
            .fetch_all(ex)
            .await
        }
    }
}

/// An outcome to record, and the attempt to schedule after it: a failure
/// with nothing done, under its kind's retry policy (`domain::retry`).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub id: Uuid,
    pub outcome: EffectOutcome,
    pub next: Option<NextAttempt>,
}

impl Outcome {
    /// An outcome that nothing follows.
    pub fn new(id: Uuid, outcome: EffectOutcome) -> Self {
        Outcome {
            id,
            outcome,
            next: None,
        }
    }
}

/// Outcomes as the recordset the record step reads.
fn outcomes_json(outcomes: &[Outcome]) -> Value {
    Value::Array(
        outcomes
            .iter()
            .map(|o| {
                let (result, error) = o.outcome.columns();
                let next = o.next.as_ref();
                serde_json::json!({
                    "id": o.id,
                    "state": o.outcome.state().as_str(),
                    "result": result,
                    "error": error,
                    "retry_in": next.map(|n| n.wait.as_secs_f64()),
                    "retry_within": next.and_then(|n| n.within).map(|w| w.as_secs_f64()),
                })
            })
            .collect(),
    )
}

/// Some commands of `authority` as they are now (after a commit whose
/// outcome is unknown).
pub async fn reread(
    ex: impl PgExecutor<'_>,
    ids: &[Uuid],
    authority: &str,
) -> Result<Vec<CommandRow>, sqlx::Error> {
    sqlx::query_as!(
        CommandRow,
        "select * from commands where authority_id = $2 and id = any($1)",
        ids,
        authority,
    )
    .fetch_all(ex)
    .await
}
