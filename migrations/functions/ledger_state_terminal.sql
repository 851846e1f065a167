CREATE OR REPLACE FUNCTION public.ledger_state_terminal(state text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ select state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired') $function$
;

comment on function ledger_state_terminal(state text) is
    'Whether a state is terminal: command_states.terminal, compiled from the frozen table by migration 0013.';

grant execute on function ledger_state_terminal(state text) to public;
