CREATE OR REPLACE FUNCTION public.principals_own_fleet()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if new.fleet_id is null then
        insert into fleets (id, name) values (new.id, new.name) on conflict (name) do nothing;
        new.fleet_id := (select id from fleets where name = new.name);
    end if;
    return new;
end;
$function$
;

comment on function principals_own_fleet() is
    'Before insert on principals: a principal given no fleet gets one of its own (id = its id, name = its name).';

grant execute on function principals_own_fleet() to public;
