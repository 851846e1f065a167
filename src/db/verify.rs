//! Recomputes the history's hash chains (migration 0012) and names every
//! break. The canonical texts are rebuilt here from each entry's own fields
//! with PostgreSQL's built-in functions only, never with the schema's
//! `ledger_entry_hash`/`ledger_row_digest`, which whoever can tamper with the
//! rows could also replace. Live commands and archived ones
//! (`pruned_commands`) are checked alike.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// One command (live or archived) as verify saw it: its chain head and
/// whatever is wrong with it.
#[derive(Debug, Clone)]
pub struct ChainReport {
    pub command_id: Uuid,
    /// False for a command found only in `pruned_commands`.
    pub live: bool,
    /// Whether a current row exists at all (false: entries of a command that
    /// is neither live nor archived).
    pub has_row: bool,
    pub entries: i64,
    /// The last entry's id and hash: the chain head a digest publishes.
    pub head: Option<(i64, Vec<u8>)>,
    pub breaks: Vec<Break>,
}

/// A place where the recorded history and the ledger disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub command_id: Uuid,
    /// The entry concerned, when it is one entry.
    pub entry_id: Option<i64>,
    /// `edited`, `chain_broken`, `illegal_transition`, `row_mismatch`,
    /// `no_history`, `orphan_history`, `resolution_edited`,
    /// `resolution_unanchored` (a resolution of an ambiguous command,
    /// migration 0018), or (against a digest)
    /// `digest_head_missing`, `digest_head_changed`.
    pub kind: &'static str,
    pub detail: String,
}

fn kind_of(tag: &str) -> &'static str {
    match tag {
        "edited" => "edited",
        "chain_broken" => "chain_broken",
        "illegal_transition" => "illegal_transition",
        "row_mismatch" => "row_mismatch",
        "no_history" => "no_history",
        "orphan_history" => "orphan_history",
        "resolution_edited" => "resolution_edited",
        "resolution_unanchored" => "resolution_unanchored",
        _ => "unknown",
    }
}

/// Splits the query's `kind: detail` problems.
fn parse_problem(command_id: Uuid, entry_id: Option<i64>, problem: &str) -> Break {
    let (tag, detail) = problem.split_once(": ").unwrap_or((problem, ""));
    Break {
        command_id,
        entry_id,
        kind: kind_of(tag),
        detail: detail.to_owned(),
    }
}

/// Every chain of the commands of `authority` (all when `None`) created at or
/// after `since` (all when `None`), with their breaks, ordered by command id.
/// Entries whose command is neither live nor archived are reported only
/// when no filter is given.
pub async fn chains(
    pool: &sqlx::PgPool,
    authority: Option<&str>,
    since: Option<DateTime<Utc>>,
) -> Result<Vec<ChainReport>, sqlx::Error> {
    // One statement, one snapshot: a transition committing meanwhile cannot
    // look like a break.
    let rows = sqlx::query!(
        r#"
        with subjects as (
            select c as r, true as live
            from commands c
            where ($1::text is null or c.authority_id = $1) and ($2::timestamptz is null or c.created_at >= $2)
            union all
            select jsonb_populate_record(null::commands, a.record -> 'command') as r, false as live
            from pruned_commands a
            where ($1::text is null or a.authority_id = $1) and ($2::timestamptz is null or a.created_at >= $2)
        ),
        heads as (
            select (s.r).id as id, s.live, (s.r).state as state, (s.r).authority_generation as generation,
                   sha256(convert_to(jsonb_build_array(
                       'row-v1', (s.r).id, (s.r).scope, (s.r).idempotency_key,
                       encode((s.r).request_digest, 'hex'), (s.r).digest_version, (s.r).kind,
                       (s.r).authority_id, (s.r).authority_generation, (s.r).run_id, (s.r).args,
                       (s.r).canonical, (s.r).state, (s.r).result, (s.r).error,
                       to_char((s.r).created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                       to_char((s.r).deadline_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                       to_char((s.r).finished_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                       (s.r).pinned_generation, encode((s.r).intent_digest, 'hex'), (s.r).canonical_rules,
                       (s.r).intent_epoch)::text, 'UTF8')) as row_digest,
                   -- row-v2 (migration 0030): the immutable columns' digest
                   -- (identity-v2), recomputed here, never read from the row,
                   -- and the columns a transition changes.
                   sha256(convert_to(jsonb_build_array(
                       'row-v2', encode(sha256(convert_to(jsonb_build_array(
                           'identity-v2', (s.r).id, (s.r).scope, (s.r).idempotency_key,
                           encode((s.r).request_digest, 'hex'), (s.r).digest_version, (s.r).kind,
                           (s.r).authority_id, (s.r).run_id, (s.r).args, (s.r).canonical,
                           to_char((s.r).created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                           to_char((s.r).deadline_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                           (s.r).pinned_generation, encode((s.r).intent_digest, 'hex'), (s.r).canonical_rules,
                           (s.r).intent_epoch)::text, 'UTF8')), 'hex'),
                       (s.r).state, (s.r).authority_generation, (s.r).result, (s.r).error,
                       to_char((s.r).finished_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text,
                       'UTF8')) as row_digest_v2
            from subjects s
        ),
        entries as (
            select h.command_id, h.id, h.seq, h.from_state, h.through, h.to_state, h.at, h.actor,
                   h.authority_generation, h.reason, h.row_digest, h.prev_hash, h.hash
            from command_history h
            where ($1::text is null and $2::timestamptz is null)
               or exists (select 1 from commands c where c.authority_id = h.authority_id and c.id = h.command_id
                          and ($1::text is null or c.authority_id = $1)
                          and ($2::timestamptz is null or c.created_at >= $2))
            union all
            select e.command_id, e.id, e.seq, e.from_state, e.through, e.to_state, e.at, e.actor,
                   e.authority_generation, e.reason, e.row_digest, e.prev_hash, e.hash
            from pruned_commands a
            cross join lateral jsonb_populate_recordset(null::command_history, a.record -> 'history') e
            where ($1::text is null or a.authority_id = $1) and ($2::timestamptz is null or a.created_at >= $2)
        ),
        ordered as (
            select e.*,
                   lag(e.hash) over w as before_hash,
                   lag(e.to_state) over w as before_state,
                   lag(e.id) over w as before_id,
                   row_number() over w as n,
                   count(*) over (partition by e.command_id) as total,
                   case when e.through is null then
                       sha256(convert_to(jsonb_build_array(
                           'entry-v1', encode(e.prev_hash, 'hex'), e.command_id, e.from_state, e.to_state,
                           to_char(e.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), e.actor,
                           e.authority_generation, e.reason, encode(e.row_digest, 'hex'))::text, 'UTF8'))
                   else
                       -- entry-v2 (0045): an entry that names the state it
                       -- passed through.
                       sha256(convert_to(jsonb_build_array(
                           'entry-v2', encode(e.prev_hash, 'hex'), e.command_id, e.from_state, e.through,
                           e.to_state, to_char(e.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                           e.actor, e.authority_generation, e.reason, encode(e.row_digest, 'hex'))::text, 'UTF8'))
                   end as recomputed
            from entries e
            -- In chain order (0037); an archive made before 0037 has no
            -- places, and its entries were written in id order.
            window w as (partition by e.command_id order by e.seq, e.id)
        ),
        checked as (
            select o.*,
                   case
                   when o.hash is null or o.hash <> o.recomputed then
                       'edited: its fields do not hash to its stored hash (the entry was edited, or written without the trigger)'
                   when o.prev_hash is distinct from o.before_hash and o.n = 1 then
                       'chain_broken: the first entry left chains to an earlier one: entries before it were deleted'
                   when o.prev_hash is distinct from o.before_hash then
                       'chain_broken: does not chain to entry ' || o.before_id
                       || ', the one before it: an entry between them was deleted, or this one inserted'
                   when o.n = 1 and (o.from_state is not null or o.to_state <> 'pending') then
                       'illegal_transition: the first entry is not the creation of a pending command'
                   when o.n > 1 and (o.from_state is distinct from o.before_state
                                     -- An entry that names the state it passed
                                     -- through records two transitions (0045).
                                     or exists (select 1 from (values (o.from_state, coalesce(o.through, o.to_state)),
                                                                      (o.through, o.to_state)) as t (f, s)
                                                where t.f is not null
                                                  and (t.f, t.s) not in (
                                         ('pending', 'prepared'), ('pending', 'cancelled'), ('pending', 'expired'),
                                         ('prepared', 'effect_started'), ('prepared', 'cancelled'),
                                         ('prepared', 'expired'), ('prepared', 'prepared'),
                                         ('effect_started', 'applied'), ('effect_started', 'failed'),
                                         ('effect_started', 'ambiguous')))) then
                       'illegal_transition: ' || coalesce(o.from_state, 'nothing')
                       || coalesce(' -> ' || o.through, '') || ' -> ' || o.to_state
                       || ' after ' || coalesce(o.before_state, 'nothing') || ' is not a transition of the state machine'
                   end as problem
            from ordered o
        ),
        per_command as (
            select k.command_id,
                   count(*) as entries,
                   (array_agg(k.id) filter (where k.n = k.total))[1] as head_id,
                   (array_agg(k.hash) filter (where k.n = k.total))[1] as head_hash,
                   (array_agg(k.to_state) filter (where k.n = k.total))[1] as last_state,
                   (array_agg(k.authority_generation) filter (where k.n = k.total))[1] as last_generation,
                   (array_agg(k.row_digest) filter (where k.n = k.total))[1] as last_digest,
                   array_agg(k.id order by k.n) filter (where k.problem is not null) as bad_ids,
                   array_agg(k.problem order by k.n) filter (where k.problem is not null) as problems
            from checked k
            group by k.command_id
        )
        select coalesce(h.id, p.command_id) as "command_id!",
               coalesce(h.live, false) as "live!",
               h.id is not null as "has_row!",
               coalesce(p.entries, 0) as "entries!",
               p.head_id, p.head_hash,
               p.bad_ids, p.problems,
               case
               when h.id is null then
                   'orphan_history: history of a command that is neither in commands nor in pruned_commands'
               when p.command_id is null then
                   'no_history: the command has no history entry at all'
               when h.state is distinct from p.last_state then
                   'row_mismatch: the row is ' || h.state || ' but its last entry says ' || p.last_state
               when h.generation is distinct from p.last_generation then
                   'row_mismatch: the row has generation ' || coalesce(h.generation::text, 'none')
                   || ' but its last entry says ' || coalesce(p.last_generation::text, 'none')
               when p.last_digest is not null and p.last_digest <> h.row_digest
                    and p.last_digest <> h.row_digest_v2 then
                   'row_mismatch: the row differs from the row its last entry recorded (a column was edited)'
               end as row_problem
        from heads h
        full join per_command p on p.command_id = h.id
        order by 1
        "#,
        authority,
        since,
    )
    .fetch_all(pool)
    .await?;

    Ok(rows
        .into_iter()
        .map(|r| {
            let mut breaks: Vec<Break> = r
                .bad_ids
                .unwrap_or_default()
                .into_iter()
                .zip(r.problems.unwrap_or_default())
                .map(|(id, problem)| parse_problem(r.command_id, Some(id), &problem))
                .collect();
            if let Some(problem) = r.row_problem {
                breaks.push(parse_problem(r.command_id, r.head_id, &problem));
            }
            ChainReport {
                command_id: r.command_id,
                live: r.live,
                has_row: r.has_row,
                entries: r.entries,
                head: r.head_id.zip(r.head_hash),
                breaks,
            }
        })
        .collect())
}

/// Every resolution of an ambiguous command (migration 0018) of the
/// commands `chains` would check, recomputed: its hash from its fields, and
/// its anchor against the hash of its command's ambiguous history entry
/// (live or archived). Returns the breaks.
pub async fn resolutions(
    pool: &sqlx::PgPool,
    authority: Option<&str>,
    since: Option<DateTime<Utc>>,
) -> Result<Vec<Break>, sqlx::Error> {
    // Each subquery names the resolution's authority and reads no set of
    // rows a function returns, so on Citus it runs on the resolution's shard
    // group (the archived history is searched with a JSON path: a command
    // has one ambiguous entry, ambiguous being terminal).
    let rows = sqlx::query!(
        r#"
        select r.command_id as "command_id!",
               case
               when r.hash <> sha256(convert_to(jsonb_build_array(
                        'resolution-v1', encode(r.anchor_hash, 'hex'), r.command_id, r.outcome, r.evidence,
                        r.reference, r.source, r.actor,
                        to_char(r.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text, 'UTF8')) then
                   'resolution_edited: its fields do not hash to its stored hash (the resolution was edited)'
               when r.anchor_hash is distinct from coalesce(
                        (select h.hash from command_history h
                         where h.authority_id = r.authority_id and h.command_id = r.command_id
                           and h.to_state = 'ambiguous'
                         order by h.command_id desc, h.seq desc limit 1),
                        (select decode(substr(jsonb_path_query_first(
                                    a.record -> 'history', '$[*] ? (@.to_state == "ambiguous").hash') #>> '{}', 3),
                                'hex')
                         from pruned_commands a
                         where a.authority_id = r.authority_id and a.id = r.command_id)) then
                   'resolution_unanchored: it does not chain to its command''s ambiguous history entry'
               end as problem
        from command_resolutions r
        where ($1::text is null or r.authority_id = $1)
          and ($2::timestamptz is null
               or exists (select 1 from commands c
                          where c.authority_id = r.authority_id and c.id = r.command_id and c.created_at >= $2)
               or exists (select 1 from pruned_commands a
                          where a.authority_id = r.authority_id and a.id = r.command_id and a.created_at >= $2))
        order by r.command_id
        "#,
        authority,
        since,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            r.problem
                .map(|problem| parse_problem(r.command_id, None, &problem))
        })
        .collect())
}

/// The stored hash of each named entry (live or archived), `None` where the
/// entry is gone.
pub async fn entry_hashes(
    pool: &sqlx::PgPool,
    entries: &[(Uuid, i64)],
) -> Result<Vec<Option<Vec<u8>>>, sqlx::Error> {
    let (commands, ids): (Vec<Uuid>, Vec<i64>) = entries.iter().copied().unzip();
    // Two statements a Citus coordinator can send to the shards (the ids
    // as a set to match, the archive's entries as JSON), merged here.
    let live = sqlx::query!(
        r#"
        select h.command_id, h.id, h.hash
        from command_history h
        where (h.command_id, h.id) in (select * from unnest($1::uuid[], $2::bigint[]))
        "#,
        &commands,
        &ids,
    )
    .fetch_all(pool)
    .await?;
    let archived = sqlx::query!(
        r#"
        select a.id as "command_id!", (e ->> 'id')::int8 as "id!",
               decode(substr(e ->> 'hash', 3), 'hex') as hash
        from pruned_commands a
        cross join lateral jsonb_array_elements(a.record -> 'history') e
        where a.id = any($1)
        "#,
        &commands,
    )
    .fetch_all(pool)
    .await?;
    let mut found: std::collections::HashMap<(Uuid, i64), Option<Vec<u8>>> = archived
        .into_iter()
        .map(|r| ((r.command_id, r.id), r.hash))
        .collect();
    found.extend(live.into_iter().map(|r| ((r.command_id, r.id), r.hash)));
    Ok(entries
        .iter()
        .map(|key| found.get(key).cloned().flatten())
        .collect())
}
