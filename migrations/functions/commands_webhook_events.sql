CREATE OR REPLACE FUNCTION public.commands_webhook_events()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    endpoint record;
    entry_hash bytea;
    body jsonb;
    event_id uuid;
begin
    -- Live endpoints of the command's scope: for a scope without any, this
    -- one probe of webhook_endpoints_by_scope is all the trigger costs.
    for endpoint in
        select e.id from webhook_endpoints e
        where e.scope = new.scope and e.disabled_at is null
          and (e.kinds is null or new.kind = any (e.kinds))
          and (e.states is null or new.state = any (e.states))
        order by e.id
    loop
        if body is null then
            -- The terminal entry, written by the history trigger before this
            -- one runs (see the head of migration 0029). A terminal state has
            -- no way out, so there is exactly one entry into it.
            select h.hash into entry_hash from command_history h
            where h.authority_id = new.authority_id and h.command_id = new.id and h.to_state = new.state
            order by h.command_id desc, h.seq desc
            limit 1;
            body := jsonb_build_object(
                'command_id', new.id,
                'key', new.idempotency_key,
                'kind', new.kind,
                'authority', new.authority_id,
                'state', new.state,
                'result', new.result,
                'error', new.error,
                'finished_at', new.finished_at,
                'history_hash', encode(entry_hash, 'hex'));
        end if;
        -- Computed first: on a Citus shard the insert then names constants only.
        event_id := ledger_uuid_v7();
        insert into webhook_events (id, authority_id, endpoint_id, command_id, payload)
        values (event_id, new.authority_id, endpoint.id, new.id, body);
    end loop;
    return null;
end;
$function$
;

comment on function commands_webhook_events() is
    'After a command''s state becomes terminal: one webhook_events row per live endpoint of its scope that asks for its kind and state, with the hash of its terminal history entry, in the outcome''s transaction. One index probe when the scope has no endpoint.';

grant execute on function commands_webhook_events() to public;
