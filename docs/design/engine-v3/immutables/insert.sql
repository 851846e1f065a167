begin;
select set_config('command_ledger.actor', 'proto:setup', true) \g /dev/null
explain (analyze, timing off, summary on, format json)
insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id,
                      args, canonical, intent_digest, canonical_rules)
select gen_random_uuid(), '00000000-0000-0000-0000-000000000001', 'x-' || g || random()::text,
       sha256(('r' || g)::bytea), 3, 'refund', 'proto',
       jsonb_build_object('to', 'ada' || g || '@example.com', 'amount', '12.00 USD'),
       jsonb_build_object('kind', 'refund', 'authority', 'proto',
                          'args', jsonb_build_object('to', 'ada' || g || '@example.com',
                                                     'amount', jsonb_build_object('amount_minor', 1200, 'currency', 'USD'))),
       sha256(('i' || g)::bytea), '{money@/amount}'
from generate_series(1, 2000) g;
rollback;
