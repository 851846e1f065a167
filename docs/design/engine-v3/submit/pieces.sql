-- Where proto_submit's time goes: auto_explain of its statement, with timing, twice in one
-- session (the second is the warm one), rolled back. Run on a database migrated, loaded with
-- ../setup.sql (n=100000) and proto.sql applied:
--   psql -X -v ON_ERROR_STOP=1 <url> -f pieces.sql
\set n 2000
-- one session: auto_explain of the function's statement, with timing
load 'auto_explain';
set auto_explain.log_min_duration = 0;
set auto_explain.log_analyze = on;
set auto_explain.log_timing = on;
set auto_explain.log_nested_statements = on;
set auto_explain.log_triggers = on;
set client_min_messages = log;
set auto_explain.log_level = notice;
begin;
select set_config('command_ledger.actor', 'proto:submit', true) \g /dev/null
select proto_submit(:n);
rollback;
begin;
select set_config('command_ledger.actor', 'proto:submit', true) \g /dev/null
select proto_submit(:n);
rollback;
