CREATE OR REPLACE FUNCTION public.ledger_latency_bucket(ms double precision)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
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
$function$
;

comment on function ledger_latency_bucket(ms double precision) is
    'The ledger_counts histogram bucket of a submit-to-applied latency in milliseconds.';

grant execute on function ledger_latency_bucket(ms double precision) to public;
