-- proto_v3 with the time of each step summed apart: claim+start, record.
create or replace procedure proto_v3_split(p_batch int)
language plpgsql as $$
declare
    ids uuid[];
    n int;
    t0 timestamptz;
    t_claim interval := '0';
    t_record interval := '0';
    t_commit interval := '0';
begin
    loop
        perform set_config('command_ledger.actor', 'custodian:proto', true);
        t0 := clock_timestamp();
        select array_agg(s.id) into ids from ledger_claim_start('proto', 'proto-holder', p_batch) s
        where s.state = 'effect_started';
        t_claim := t_claim + (clock_timestamp() - t0);
        exit when ids is null;
        t0 := clock_timestamp();
        commit;
        t_commit := t_commit + (clock_timestamp() - t0);
        perform set_config('command_ledger.actor', 'custodian:proto', true);
        n := cardinality(ids);
        t0 := clock_timestamp();
        perform ledger_record('proto', 1, ids, array_fill('applied'::text, array[n]),
                              (select array_agg(jsonb_build_object('refund_id', 'rf_' || left(i::text, 8)))
                               from unnest(ids) i),
                              array_fill(null::jsonb, array[n]));
        t_record := t_record + (clock_timestamp() - t0);
        t0 := clock_timestamp();
        commit;
        t_commit := t_commit + (clock_timestamp() - t0);
    end loop;
    raise notice 'claim_start % ms, record % ms, commits % ms',
        round(extract(epoch from t_claim)::numeric * 1000), round(extract(epoch from t_record)::numeric * 1000),
        round(extract(epoch from t_commit)::numeric * 1000);
end;
$$;
