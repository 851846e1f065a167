-- docs/runs/citus-steps-by-shard-name.txt, section 3: run on the worker holding the authority wait-latency's
-- shards (psql -p 9802 -d wait_latency -f loops.sql); the uuid is one command of that authority, any.
\timing on
\echo 1,000 reads by key through Citus, then of the shard by name
do $$ declare v uuid := '01a2465f-5d75-7791-8edc-c913431c403d'; begin for i in 1..1000 loop perform 1 from commands where authority_id='wait-latency' and id = v; end loop; end $$;
do $$ declare v uuid := '01a2465f-5d75-7791-8edc-c913431c403d'; begin for i in 1..1000 loop perform 1 from commands_102097 where authority_id='wait-latency' and id = v; end loop; end $$;
\echo 1,000 counter upserts (the counter statement of the steps) through Citus, then to the shard by name, each in a transaction rolled back
begin;
do $$ begin for i in 1..1000 loop insert into ledger_counts_by_authority (authority_id, minute, counter, source, n) values ('wait-latency', date_trunc('minute', now()), 'executions', 'pg:x', 1) on conflict (authority_id, minute, counter, source) do update set n = ledger_counts_by_authority.n + excluded.n; end loop; end $$;
rollback;
begin;
do $$ begin for i in 1..1000 loop insert into ledger_counts_by_authority_102353 (authority_id, minute, counter, source, n) values ('wait-latency', date_trunc('minute', now()), 'executions', 'pg:x', 1) on conflict (authority_id, minute, counter, source) do update set n = ledger_counts_by_authority_102353.n + excluded.n; end loop; end $$;
rollback;
\echo the same upserts through Citus with plan_cache_mode = force_generic_plan
set plan_cache_mode = force_generic_plan;
begin;
do $$ begin for i in 1..1000 loop insert into ledger_counts_by_authority (authority_id, minute, counter, source, n) values ('wait-latency', date_trunc('minute', now()), 'executions', 'pg:x', 1) on conflict (authority_id, minute, counter, source) do update set n = ledger_counts_by_authority.n + excluded.n; end loop; end $$;
rollback;
