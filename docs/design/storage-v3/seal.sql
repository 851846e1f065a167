-- Storage v3 prototype, second part (issue 54): the history's hashing, the
-- last lever the issue names. Loaded into the scratch database profile.sh
-- uses, after proto.sql; never part of a migration. Each step below is the
-- service's own step (its text read from pg_get_functiondef, so it is
-- today's to the byte) with one thing replaced, so the difference is that
-- thing:
--   proto5_*_text3: each entry's hash and row digest over a fixed
--     concatenation of its fields (unit separators between them, a record
--     separator for a null) instead of jsonb_build_array(...)::text: the
--     "cheaper entry text". A format of record would also have to escape
--     a separator inside a field (an actor, a reason); that is not here.
--   proto5_*_sealed: entries unhashed (no row digest, no hash, no look-up
--     of the command's last entry; seq set by the step: 2 for the claim's
--     entry, 3 for the record's), and one
--     seal a batch in proto5_seals: the SHA-256 of the previous seal of the
--     authority and of the batch's entries' texts (the fixed
--     concatenation) in id order, chained per authority. The entries go to
--     proto5_history, command_history's columns without its hash check.
--     An upper bound of what "entries unhashed, a seal a batch" saves:
--     the seal here is one hash over the concatenated texts (a Merkle tree
--     over the leaves would hash each entry once more).

-- A field of the fixed text: a record separator stands for a null.
create or replace function proto5_field(t text) returns text
language sql immutable parallel safe
as $$ select coalesce(t, chr(30)) $$;

create or replace function proto5_row_digest(identity bytea, state text, generation bigint, result jsonb,
                                             error jsonb, finished_at timestamptz) returns bytea
language sql stable parallel safe
as $$ select sha256(convert_to(concat_ws(chr(31), 'row-v3', encode(identity, 'hex'), state, generation,
                                         proto5_field(result::text), proto5_field(error::text),
                                         proto5_field(to_char(finished_at at time zone 'UTC',
                                                              'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))), 'UTF8')) $$;

create or replace function proto5_entry_hash(prev_hash bytea, command_id uuid, from_state text, through text,
                                             to_state text, at timestamptz, actor text,
                                             authority_generation bigint, reason text, row_digest bytea)
returns bytea
language sql stable parallel safe
as $$ select sha256(convert_to(concat_ws(chr(31), 'entry-v3', proto5_field(encode(prev_hash, 'hex')), command_id,
                                         proto5_field(from_state), proto5_field(through), to_state,
                                         to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), actor,
                                         proto5_field(authority_generation::text), proto5_field(reason),
                                         proto5_field(encode(row_digest, 'hex'))), 'UTF8')) $$;

create table if not exists proto5_history (like command_history including defaults);
alter table proto5_history alter column id set default ledger_history_id();
-- The indexes command_history has: the key, and each command's entries in
-- order (a command's history is still read by the command). The seal finds
-- its batch by the key's range.
create unique index if not exists proto5_history_pkey on proto5_history (id);
create unique index if not exists proto5_history_chain_order on proto5_history (command_id, seq, authority_id);
create table if not exists proto5_seals (
    authority_id text not null,
    n bigint not null,
    first_id bigint not null,
    last_id bigint not null,
    prev_hash bytea,
    hash bytea not null,
    primary key (authority_id, n)
);

-- A batch's seal: the entries this transaction wrote for the authority
-- (ids above the last seal's), hashed in id order after the previous seal.
create or replace function proto5_seal(p_authority text) returns void
language sql
as $$
    with last as (select s.n, s.hash, s.last_id from proto5_seals s where s.authority_id = p_authority
                  order by s.n desc limit 1),
         batch as (select min(h.id) as first_id, max(h.id) as last_id,
                          string_agg(concat_ws(chr(31), h.command_id, proto5_field(h.from_state),
                                               proto5_field(h.through), h.to_state,
                                               to_char(h.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                                               h.actor, proto5_field(h.authority_generation::text),
                                               proto5_field(h.reason)), chr(29) order by h.id) as texts
                   from proto5_history h
                   where h.authority_id = p_authority
                     and h.id > coalesce((select l.last_id from last l), 0))
    insert into proto5_seals (authority_id, n, first_id, last_id, prev_hash, hash)
    select p_authority, coalesce((select l.n from last l), 0) + 1, b.first_id, b.last_id, (select l.hash from last l),
           sha256(convert_to(concat_ws(chr(31), 'seal-v1', proto5_field(encode((select l.hash from last l), 'hex')),
                                       b.texts), 'UTF8'))
    from batch b where b.texts is not null
$$;

grant select, insert on proto5_history, proto5_seals to ledger_engine;

do $$
declare
    claim text := pg_get_functiondef('ledger_claim_start(text[], text, integer)'::regprocedure);
    record text := pg_get_functiondef('ledger_record_outcomes(text, bigint, jsonb)'::regprocedure);
    c text;
    r text;
    n integer;
begin
    -- The cheaper text: the same steps, the hash and digest functions swapped.
    c := replace(replace(replace(replace(claim, 'public.ledger_claim_start(', 'public.proto5_claim_start_text3('),
                 'ledger_row_digest_v2(', 'proto5_row_digest('),
                 'ledger_entry_hash_v2(', 'proto5_entry_hash('),
                 'ledger_entry_hash(o.prev, o.id, ''pending'', o.state,', 'proto5_entry_hash(o.prev, o.id, ''pending'', null, o.state,');
    r := replace(replace(replace(record, 'public.ledger_record_outcomes(', 'public.proto5_record_text3('),
                 'ledger_row_digest_v2(', 'proto5_row_digest('),
                 'ledger_entry_hash(d.prev, d.id, ''effect_started'', d.state,',
                 'proto5_entry_hash(d.prev, d.id, ''effect_started'', null, d.state,');
    if c = claim or r = record or position('ledger_entry_hash' in c || r) > 0
       or position('ledger_row_digest' in c || r) > 0 then
        raise exception 'text3: a substitution did not apply';
    end if;
    execute c;
    execute r;

    -- Sealed: no look-up of the last entry, no digest, no hash; seq by the
    -- step (the claim's entry is the command's second, the record's its
    -- third). The seal follows each step (below): a statement of its own,
    -- which sees the entries the step's statement wrote.
    c := claim;
    c := replace(c, 'public.ledger_claim_start(', 'public.proto5_claim_start_sealed(');
    c := replace(c, 'left join lateral (select h.hash, h.seq from command_history h where h.command_id = c.id
                           order by h.command_id desc, h.seq desc limit 1) last on true', '');
    c := replace(c, 'last.hash as prev, last.seq as prev_seq', 'null::bytea as prev, 1 as prev_seq');
    c := regexp_replace(c, 'ledger_row_digest_v2\([^;]*?\) as digest', 'null::bytea as digest');
    c := replace(c, 'insert into command_history (', 'insert into proto5_history (');
    c := regexp_replace(c, 'case when o\.through is null\s+then ledger_entry_hash\(.*?\)\s+else ledger_entry_hash_v2\(.*?\)\s+end,',
                        'null,', 's');
    r := record;
    r := replace(r, 'public.ledger_record_outcomes(', 'public.proto5_record_sealed(');
    r := replace(r, 'left join lateral (select h.hash, h.seq from command_history h where h.command_id = o.id
                           order by h.command_id desc, h.seq desc limit 1) last on true', '');
    r := replace(r, 'last.hash as prev, last.seq as prev_seq', 'null::bytea as prev, 2 as prev_seq');
    r := regexp_replace(r, 'ledger_row_digest_v2\(m\.identity_digest.*?\)\s+as digest', 'null::bytea as digest', 's');
    r := replace(r, 'insert into command_history (', 'insert into proto5_history (');
    r := regexp_replace(r, 'ledger_entry_hash\(d\.prev.*?d\.digest\),', 'null,', 's');
    if position('ledger_entry_hash' in c || r) > 0 or position('ledger_row_digest' in c || r) > 0
       or position('command_history' in c || r) > 0 then
        raise exception 'sealed: a substitution did not apply';
    end if;
    execute c;
    execute r;
end $$;

create or replace function proto5_record_sealed_then_seal(p_authority text, p_generation bigint, p_outcomes jsonb)
returns setof uuid language plpgsql security definer set search_path = public, pg_temp
as $$
begin
    return query select * from proto5_record_sealed(p_authority, p_generation, p_outcomes);
    perform proto5_seal(p_authority);
end $$;

create or replace function proto5_claim_sealed_then_seal(p_authorities text[], p_holder text, p_limit integer)
returns setof uuid language plpgsql security definer set search_path = public, pg_temp
as $$
begin
    return query select s.id from proto5_claim_start_sealed(p_authorities, p_holder, p_limit) s;
    perform proto5_seal(a) from unnest(p_authorities) a;
end $$;

create or replace function proto5_claim_ids(p_variant text, p_authorities text[], p_holder text, p_limit integer)
returns setof uuid language plpgsql
as $$
begin
    if p_variant = 'text3' then
        return query select s.id from proto5_claim_start_text3(p_authorities, p_holder, p_limit) s;
    else
        return query select * from proto5_claim_sealed_then_seal(p_authorities, p_holder, p_limit);
    end if;
end $$;

alter function proto5_claim_start_text3(text[], text, integer) owner to ledger_engine;
alter function proto5_record_text3(text, bigint, jsonb) owner to ledger_engine;
alter function proto5_claim_start_sealed(text[], text, integer) owner to ledger_engine;
alter function proto5_record_sealed(text, bigint, jsonb) owner to ledger_engine;
alter function proto5_record_sealed_then_seal(text, bigint, jsonb) owner to ledger_engine;
alter function proto5_claim_sealed_then_seal(text[], text, integer) owner to ledger_engine;
alter function proto5_seal(text) owner to ledger_engine;
