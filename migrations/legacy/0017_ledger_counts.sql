-- Counters from the ledger, not the process.
--
-- Requests by outcome and executions, counted durably and cluster-wide, in
-- per-minute rollups: one row per (minute, counter, source), written by
-- adding to it, summed on read. No writer ever contends with another on a
-- row: each source is one writer.
--
--   source 'api:<uuid>'   an API process's request counts (new, replay,
--                         coalesced, held, conflict, refused, requests), kept
--                         in memory and added here about once a second; a
--                         crash loses at most that last second of request
--                         counts (never a command: commands are rows of
--                         their own, committed before they are answered).
--   source 'pg:<pid>'     the database's own counts of history entries
--                         (executions, applied, failed, ambiguous, and the
--                         submit-to-applied latency of applied commands),
--                         written by a statement-level trigger of
--                         command_history in the transaction that wrote the
--                         entries: exact, lost with nothing. One row per
--                         database backend, so two custodians never wait on
--                         each other's counter row.
--   source ''             rows folded together by ledger_counts_compact():
--                         per minute for the last day, per day before.
--
-- The history trigger adds nothing for the entries of a submission
-- (to_state pending): the submit path's statements do not touch this table.

create table ledger_counts (
    minute  timestamptz not null,
    counter text not null,
    source  text not null,
    n       bigint not null,
    constraint ledger_counts_pkey primary key (minute, counter, source),
    constraint ledger_counts_minute_is_whole check (minute = date_trunc('minute', minute))
);

comment on table ledger_counts is
    'Cluster-wide counters in per-minute rollups: one row per minute, counter and source, added to, summed on read '
    '(GET /v1/state, /metrics, the console''s charts). See migration 0017 for the sources.';
comment on column ledger_counts.minute is 'Start of the minute counted (of the day, for rows folded past a day).';
comment on column ledger_counts.counter is
    'What is counted: requests, new, replay, coalesced, held, conflict, refused (API requests); executions, '
    'applied, failed, ambiguous (history entries); latency_le_<ms> / latency_le_inf (applied commands by '
    'submit-to-applied latency, a histogram).';
comment on column ledger_counts.source is
    'Who wrote the row: api:<process id>, pg:<backend pid>, or empty once folded by ledger_counts_compact().';
comment on column ledger_counts.n is 'How many in that minute from that source.';

-- The charts read recent minutes by counter.
create index ledger_counts_counter_idx on ledger_counts (counter, minute);

-- Submit-to-applied latency buckets (upper bounds in milliseconds).
create function ledger_latency_bucket(ms double precision) returns text
language sql immutable parallel safe as $$
    select case
        when ms <= 10 then 'latency_le_10'
        when ms <= 25 then 'latency_le_25'
        when ms <= 50 then 'latency_le_50'
        when ms <= 100 then 'latency_le_100'
        when ms <= 250 then 'latency_le_250'
        when ms <= 500 then 'latency_le_500'
        when ms <= 1000 then 'latency_le_1000'
        when ms <= 2500 then 'latency_le_2500'
        when ms <= 5000 then 'latency_le_5000'
        when ms <= 10000 then 'latency_le_10000'
        when ms <= 30000 then 'latency_le_30000'
        when ms <= 60000 then 'latency_le_60000'
        else 'latency_le_inf'
    end
$$;

comment on function ledger_latency_bucket(double precision) is
    'The ledger_counts histogram bucket of a submit-to-applied latency in milliseconds.';

create function ledger_count_history() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    insert into ledger_counts (minute, counter, source, n)
    select date_trunc('minute', now()), c.counter, 'pg:' || pg_backend_pid(), count(*)
    from (
        select case when e.to_state = 'effect_started' then 'executions' else e.to_state end as counter
        from new_rows e
        where e.to_state in ('effect_started', 'applied', 'failed', 'ambiguous')
        union all
        select ledger_latency_bucket(extract(epoch from (e.at - c.created_at)) * 1000)
        from new_rows e join commands c on c.id = e.command_id
        where e.to_state = 'applied'
    ) c
    group by c.counter
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    return null;
end;
$$;

comment on function ledger_count_history() is
    'After each insert statement on command_history: adds its executions (effect_started), applied, failed and '
    'ambiguous entries, and the latency bucket of each applied command, to this backend''s ledger_counts row of '
    'the minute.';

create trigger command_history_counts
    after insert on command_history
    referencing new table as new_rows
    for each statement execute function ledger_count_history();

-- Folds the rows of many sources into one per minute and counter once the
-- minute is over (two minutes later), and past a day into one per day: the
-- totals stay a sum over a few rows a day, the charts keep minutes for a day.
create function ledger_counts_compact() returns bigint
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    folded bigint := 0;
    written bigint;
begin
    with old as (
        delete from ledger_counts
        where source <> '' and minute < date_trunc('minute', now()) - interval '2 minutes'
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select minute, counter, '', sum(n) from old group by minute, counter
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    folded := folded + written;

    with old as (
        delete from ledger_counts
        where source = '' and minute < date_trunc('day', now(), 'UTC') - interval '1 day'
          and minute <> date_trunc('day', minute, 'UTC')
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select date_trunc('day', minute, 'UTC'), counter, '', sum(n) from old group by 2, 1
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    return folded + written;
end;
$$;

comment on function ledger_counts_compact() is
    'Folds ledger_counts: finished minutes into one row per minute and counter (source empty), minutes older than '
    'a day into one row per day. Sums are unchanged. Called by API processes about once a minute.';

-- What the history already holds (its entries are kept until pruned), so
-- the execution and outcome totals start where the ledger is.
insert into ledger_counts (minute, counter, source, n)
select date_trunc('minute', at), case when to_state = 'effect_started' then 'executions' else to_state end,
       '', count(*)
from command_history
where to_state in ('effect_started', 'applied', 'failed', 'ambiguous')
group by 1, 2;

-- Roles (0016): the API adds its request counts (insert, or update of its
-- own rows) and folds finished minutes through ledger_counts_compact(),
-- which runs as the owner; the custodian's counts are written by the
-- history trigger (as the owner); everyone who reads the ledger may read
-- the counts.
grant select, insert, update on ledger_counts to ledger_api;
grant select on ledger_counts to ledger_custodian, ledger_inspector, ledger_retention;
revoke all on function ledger_counts_compact() from public;
grant execute on function ledger_counts_compact() to ledger_api;
