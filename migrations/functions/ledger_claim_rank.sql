CREATE OR REPLACE FUNCTION public.ledger_claim_rank(created_at timestamp with time zone, not_before timestamp with time zone, priority smallint)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
    select floor(extract(epoch from greatest(created_at, not_before) at time zone 'UTC') * 1000)::bigint
           - priority::bigint * 10000
$function$
;

comment on function ledger_claim_rank(created_at timestamp with time zone, not_before timestamp with time zone, priority smallint) is
    'The claim rank of a queued command: the millisecond it became claimable (recorded, or not_before when later) less 10,000 per level of priority. Lower is claimed first; ties by id (src/domain/schedule.rs).';

grant execute on function ledger_claim_rank(created_at timestamp with time zone, not_before timestamp with time zone, priority smallint) to public;
