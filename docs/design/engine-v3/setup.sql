-- A scratch database for the engine-v3 prototype: the ledger's schema (run
-- the migrations first: `sqlx migrate run` or `command-ledger migrate`), one
-- leased authority `proto` at generation 1, and :n commands of it pending,
-- shaped like the benchmark's (a refund's args, a canonical form, a key).
-- psql -v n=10000 -f setup.sql
select set_config('command_ledger.actor', 'proto:setup', false);
insert into authorities (id, generation, lease_holder, lease_expires_at)
values ('proto', 1, 'proto-holder', now() + interval '1 day')
on conflict (id) do update set lease_holder = 'proto-holder', lease_expires_at = now() + interval '1 day';
insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id,
                      args, canonical, intent_digest, canonical_rules)
select gen_random_uuid(), '00000000-0000-0000-0000-000000000001', 'proto-' || g,
       sha256(('r' || g)::bytea), 3, 'refund', 'proto',
       jsonb_build_object('to', 'ada' || g || '@example.com', 'amount', '12.00 USD'),
       jsonb_build_object('kind', 'refund', 'authority', 'proto',
                          'args', jsonb_build_object('to', 'ada' || g || '@example.com',
                                                     'amount', jsonb_build_object('amount_minor', 1200, 'currency', 'USD'))),
       sha256(('i' || g)::bytea), '{money@/amount}'
from generate_series(1, :n) g;
analyze;
