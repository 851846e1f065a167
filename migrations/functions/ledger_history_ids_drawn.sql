CREATE OR REPLACE FUNCTION public.ledger_history_ids_drawn(p_body text, p_history text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    marker constant text := 'insert into ' || p_history || ' (authority_id,';
    pieces text[] := string_to_array(p_body, marker);
    piece text;
    out text := pieces[1];
    at_values integer;
    at_select integer;
begin
    for i in 2 .. coalesce(cardinality(pieces), 0) loop
        piece := pieces[i];
        at_values := strpos(piece, 'values (p_authority,');
        at_select := strpos(piece, 'select p_authority,');
        if at_values > 0 and (at_select = 0 or at_values < at_select) then
            piece := overlay(piece placing 'values (ledger_history_id(), p_authority,' from at_values
                             for length('values (p_authority,'));
        elsif at_select > 0 then
            piece := overlay(piece placing 'select ledger_history_id(), p_authority,' from at_select
                             for length('select p_authority,'));
        else
            raise exception 'an insert into % whose first value is not p_authority', p_history;
        end if;
        out := out || 'insert into ' || p_history || ' (id, authority_id,' || piece;
    end loop;
    return out;
end;
$function$
;

comment on function ledger_history_ids_drawn(p_body text, p_history text) is
    'For ledger_make_shard_steps_here() (0039): a step''s body whose inserts into the history shard p_history (columns from authority_id, first value p_authority) give the id too, drawn by ledger_history_id(): a shard table has no default for it (Citus computes it for statements through it).';

revoke all on function ledger_history_ids_drawn(p_body text, p_history text) from public;
