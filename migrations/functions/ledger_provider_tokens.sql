CREATE OR REPLACE FUNCTION public.ledger_provider_tokens(tokens double precision, rate double precision, burst integer, refilled_at timestamp with time zone, at timestamp with time zone)
 RETURNS double precision
 LANGUAGE sql
 IMMUTABLE
AS $function$
    -- No rate: no bucket (least() would pass over the null).
    select case when rate is not null then
               least(burst::double precision,
                     tokens + rate * greatest(0, extract(epoch from at - refilled_at)::double precision))
           end
$function$
;

comment on function ledger_provider_tokens(tokens double precision, rate double precision, burst integer, refilled_at timestamp with time zone, at timestamp with time zone) is
    'The tokens in a provider group''s bucket (0048) at `at`: those left at refilled_at plus rate a second since, at most burst; null for a group with no rate.';

grant execute on function ledger_provider_tokens(tokens double precision, rate double precision, burst integer, refilled_at timestamp with time zone, at timestamp with time zone) to public;
