CREATE OR REPLACE FUNCTION public.ledger_count_history()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$
;

comment on function ledger_count_history() is
    'After each insert statement on command_history: adds its executions (effect_started), applied, failed and ambiguous entries, and the latency bucket of each applied command, to this backend''s ledger_counts row of the minute.';

grant execute on function ledger_count_history() to public;
