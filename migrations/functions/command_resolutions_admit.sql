CREATE OR REPLACE FUNCTION public.command_resolutions_admit()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    current_state text;
begin
    select c.state into current_state from commands c
    where c.authority_id = new.authority_id and c.id = new.command_id
    for share;
    if current_state is null then
        raise exception 'no command % of authority %', new.command_id, new.authority_id using errcode = 'CL012';
    end if;
    if current_state <> 'ambiguous' then
        raise exception 'command % is %, not ambiguous: only an ambiguous command is resolved', new.command_id,
            current_state using errcode = 'CL012';
    end if;
    new.at := now();
    -- By (command_id, seq), the index that reads this command's entries only (0037).
    new.anchor_hash := (select h.hash from command_history h
                        where h.authority_id = new.authority_id and h.command_id = new.command_id
                        order by h.command_id desc, h.seq desc limit 1);
    new.hash := ledger_resolution_hash(new.anchor_hash, new.command_id, new.outcome, new.evidence,
                                       new.reference, new.source, new.actor, new.at);
    return new;
end;
$function$
;

comment on function command_resolutions_admit() is
    'Before insert on command_resolutions: refuses (CL012) a command that is not ambiguous; sets at, anchor_hash and hash.';

grant execute on function command_resolutions_admit() to public;
