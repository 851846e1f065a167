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
    first_key text;
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
            -- A failure the ledger retries is not the chain's outcome: its
            -- next attempt was written in the same statement (the record
            -- step, 0046), and that attempt's outcome is the one announced.
            if new.state = 'failed' and exists (
                select 1 from commands s
                where s.authority_id = new.authority_id
                  and s.retry_of = case when new.attempt > 1 then new.retry_of else new.id end
                  and s.attempt = new.attempt + 1) then
                return null;
            end if;
            -- The terminal entry, written by the history trigger before this
            -- one runs (see the head of migration 0029). A terminal state has
            -- no way out, so there is exactly one entry into it.
            select h.hash into entry_hash from command_history h
            where h.authority_id = new.authority_id and h.command_id = new.id and h.to_state = new.state
            order by h.command_id desc, h.seq desc
            limit 1;
            -- A later attempt answers under the key its chain was asked by.
            if new.attempt > 1 then
                select f.idempotency_key into first_key from commands f
                where f.authority_id = new.authority_id and f.id = new.retry_of;
            end if;
            body := jsonb_build_object(
                'command_id', new.id,
                'key', coalesce(first_key, new.idempotency_key),
                'attempts', new.attempt,
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
    'After a command''s state becomes terminal: one webhook_events row per live endpoint of its scope that asks for its kind and state, with the hash of its terminal history entry, in the outcome''s transaction; none for a failure the record step retried (its next attempt exists: 0046), and a later attempt''s event carries its chain''s key and how many attempts the chain took (attempts). One index probe when the scope has no endpoint.';

grant execute on function commands_webhook_events() to public;
