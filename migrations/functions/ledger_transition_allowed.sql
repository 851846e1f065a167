CREATE OR REPLACE FUNCTION public.ledger_transition_allowed(from_state text, to_state text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ select (from_state, to_state) in (('effect_started', 'ambiguous'), ('effect_started', 'applied'), ('effect_started', 'failed'), ('pending', 'cancelled'), ('pending', 'expired'), ('pending', 'prepared'), ('prepared', 'cancelled'), ('prepared', 'effect_started'), ('prepared', 'expired')) $function$
;

comment on function ledger_transition_allowed(from_state text, to_state text) is
    'Whether a state change is in command_transitions, compiled from the frozen table by migration 0013.';

grant execute on function ledger_transition_allowed(from_state text, to_state text) to public;
