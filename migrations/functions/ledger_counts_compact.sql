CREATE OR REPLACE FUNCTION public.ledger_counts_compact()
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    folded bigint := 0;
    written bigint;
    finished timestamptz := date_trunc('minute', now()) - interval '2 minutes';
    past_a_day timestamptz := date_trunc('day', now(), 'UTC') - interval '1 day';
begin
    with old as (
        delete from ledger_counts_by_authority
        where minute < finished
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select minute, counter, '', sum(n) from old group by minute, counter
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    folded := folded + written;

    with old as (
        delete from ledger_counts
        where source <> '' and minute < finished
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select minute, counter, '', sum(n) from old group by minute, counter
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    folded := folded + written;

    with old as (
        delete from ledger_counts
        where source = '' and minute < past_a_day
          and minute <> date_trunc('day', minute, 'UTC')
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select date_trunc('day', minute, 'UTC'), counter, '', sum(n) from old group by 2, 1
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    return folded + written;
end;
$function$
;

comment on function ledger_counts_compact() is
    'Folds ledger_counts: the shards'' counts (ledger_counts_by_authority) and other sources'' finished minutes into one row per minute and counter (source empty), minutes older than a day into one row per day. Sums are unchanged. Called by API processes about once a minute.';

revoke all on function ledger_counts_compact() from public;
grant execute on function ledger_counts_compact() to ledger_api;
