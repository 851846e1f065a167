CREATE OR REPLACE FUNCTION public.ledger_history_id()
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$ select nextval('command_history_id_seq') $function$
;

comment on function ledger_history_id() is
    'The next id of command_history, drawn by its owner, from the node''s range of the sequence: for the engine steps'' copies that write its shards by name (0039).';

revoke all on function ledger_history_id() from public;
grant execute on function ledger_history_id() to ledger_engine;
