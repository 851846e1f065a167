CREATE OR REPLACE FUNCTION public.ledger_distribute()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    t record;
    v record;
    f regprocedure;
    done int := 0;
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        raise exception 'ledger_distribute() needs a Citus coordinator (create extension citus; add the workers)'
            using errcode = 'CL013';
    end if;
    -- Every process migrates when it starts: one distributes, the others
    -- then find the work done.
    perform pg_advisory_xact_lock(7242019);
    create temporary table ledger_views_before on commit drop as
    select c.relname::text as view_name, a.privilege_type, a.grantee::regrole::text as grantee,
           obj_description(c.oid, 'pg_class') as description
    from pg_class c
    left join lateral aclexplode(c.relacl) a on a.grantee <> c.relowner and a.grantee <> 0
    where c.relkind = 'v' and c.relnamespace = 'public'::regnamespace
      and not exists (select 1 from pg_depend d where d.objid = c.oid and d.deptype = 'e');
    -- Row-level triggers of a distributed table run on its shards.
    set local citus.enable_unsafe_triggers = on;
    for t in select * from ledger_distribution order by position loop
        if to_regclass(t.table_name) is null
           or exists (select 1 from pg_dist_partition p
                      where p.logicalrelid = t.table_name::regclass
                        and case t.method when 'reference' then p.repmodel = 't' else p.partmethod = 'h' end) then
            continue;
        end if;
        -- A table with a foreign key to a reference table may already be a
        -- "Citus local table" (Citus converts it when the referenced table is
        -- distributed first): create_reference_table takes it from there.
        for i in 1 .. coalesce(array_length(t.rekey, 1), 0) loop
            execute t.rekey[i];
        end loop;
        -- The copy into the shards would trip the tables' own refusals (the
        -- frozen reference data refuses every insert).
        execute format('alter table %I disable trigger user', t.table_name);
        if t.method = 'reference' then
            perform create_reference_table(t.table_name::regclass);
        else
            perform create_distributed_table(t.table_name::regclass, t.distribution_column,
                                             colocate_with => coalesce(t.colocate_with, 'none'));
        end if;
        execute format('alter table %I enable trigger user', t.table_name);
        done := done + 1;
    end loop;
    -- Views re-created on the way get back their grants and comments.
    for v in select * from ledger_views_before b where to_regclass(b.view_name) is not null loop
        if v.grantee is not null and not has_table_privilege(v.grantee, v.view_name, v.privilege_type) then
            execute format('grant %s on %I to %I', v.privilege_type, v.view_name, v.grantee);
        end if;
        if v.description is not null and obj_description(v.view_name::regclass, 'pg_class') is null then
            execute format('comment on view %I is %L', v.view_name, v.description);
        end if;
    end loop;
    -- Functions created before any table was distributed exist only on the
    -- coordinator: the shards' triggers call them on the workers. (After the
    -- tables: a function of a table's row type needs its table distributed.)
    for f in
        select p.oid::regprocedure from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')
          and not exists (select 1 from pg_dist_object o where o.classid = 'pg_proc'::regclass and o.objid = p.oid)
    loop
        perform create_distributed_function(f);
    end loop;
    return done;
end;
$function$
;

comment on function ledger_distribute() is
    'On a Citus coordinator: distributes every table of ledger_distribution not distributed yet (rekeying it first), gives the views it re-creates on the way back their grants and comments, and makes the ledger''s functions known to the workers. Returns how many tables it distributed. Idempotent.';

revoke all on function ledger_distribute() from public;
