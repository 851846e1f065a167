CREATE OR REPLACE FUNCTION public.ledger_withdraw_retried_events(p_authority text, p_id uuid)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    -- The least UUID v7 of this transaction's start: the events of a command
    -- that became terminal in this transaction have ids at or after it,
    -- which bounds the delete to a range of the primary key.
    since uuid := encode(substring(int8send(floor(extract(epoch from now()) * 1000)::bigint) from 3)
                         || '\x00000000000000000000'::bytea, 'hex')::uuid;
    gone integer;
begin
    -- On a Citus shard the webhook trigger runs at the row's update, before
    -- the record step writes the failure's next attempt: the events it wrote
    -- for a failure that is not its chain's outcome are taken back, in the
    -- same transaction, so none was ever visible. Only for a failed command
    -- whose chain holds its next attempt, and only events never sent.
    perform 1
    from commands c
    join commands s on s.authority_id = c.authority_id
                   and s.retry_of = case when c.attempt > 1 then c.retry_of else c.id end
                   and s.attempt = c.attempt + 1
    where c.authority_id = p_authority and c.id = p_id and c.state = 'failed';
    if not found then
        return 0;
    end if;
    delete from webhook_events e
    where e.authority_id = p_authority and e.id >= since and e.command_id = p_id
      and e.state = 'pending' and e.attempts = 0;
    get diagnostics gone = row_count;
    return gone;
end;
$function$
;

comment on function ledger_withdraw_retried_events(p_authority text, p_id uuid) is
    'On Citus, called by ledger_next_attempt once it has written the next attempt of p_authority''s failed command p_id: deletes the webhook events the shard''s row-level trigger wrote for that failure in this transaction (never sent), since a retried failure is not its chain''s outcome. Does nothing unless the command failed and its chain holds its next attempt. Returns how many it deleted.';

revoke all on function ledger_withdraw_retried_events(p_authority text, p_id uuid) from public;
grant execute on function ledger_withdraw_retried_events(p_authority text, p_id uuid) to ledger_engine;
