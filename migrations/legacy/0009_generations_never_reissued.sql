-- A fencing generation, once issued, is never issued again.
--
-- authorities_guard already refuses an update that lowers a generation, but
-- a deleted (or truncated) authority row took its generation with it: the
-- next custodian re-created the authority at generation 1, and a command
-- pinned to an old generation, or a zombie custodian still holding one, was
-- current again. Authority rows are therefore kept for good, like the
-- history: deleting or truncating them is refused, whoever asks. (A lease is
-- given up by clearing lease_holder, which every custodian already does; an
-- authority nobody serves any more simply stays at its last generation.)

create function refuse_authority_removal() returns trigger
language plpgsql as $$
begin
    raise exception 'authorities are kept: removing one would let its generations be issued again'
        using errcode = 'CL005';
end;
$$;

comment on function refuse_authority_removal() is
    'Refuses delete and truncate on authorities: a generation, once issued, is never issued again.';

create trigger authorities_kept
    before delete or truncate on authorities
    for each statement execute function refuse_authority_removal();

comment on trigger authorities_kept on authorities is
    'A deleted authority would restart at generation 1 and reissue generations already used.';

comment on column authorities.generation is
    'Fencing token: incremented whenever the lease changes hands or is retaken after expiry; '
    'never decreases (authorities_guard) and never reissued (rows are never deleted: authorities_kept).';
