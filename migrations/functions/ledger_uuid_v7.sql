CREATE OR REPLACE FUNCTION public.ledger_uuid_v7()
 RETURNS uuid
 LANGUAGE sql
AS $function$
    -- The 48-bit Unix time in milliseconds over the first six bytes of a
    -- random (v4) UUID; setting bits 52 and 53 turns its version 4 into 7.
    select encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                          placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint)
                                                            from 3)
                                          from 1 for 6),
                                  52, 1),
                          53, 1),
                  'hex')::uuid
$function$
;

comment on function ledger_uuid_v7() is
    'A new UUID version 7 (RFC 9562): milliseconds since the Unix epoch, then random bits; ids made later sort later.';

grant execute on function ledger_uuid_v7() to public;
