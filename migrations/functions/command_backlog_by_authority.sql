create or replace view command_backlog_by_authority as
 SELECT a.id AS authority_id,
    count(q.id) AS pending,
    count(q.id) FILTER (WHERE ((q.ready_at IS NULL) OR (q.ready_at <= now()))) AS ready,
    COALESCE(max((now() - GREATEST(c.created_at, q.ready_at))) FILTER (WHERE ((q.ready_at IS NULL) OR (q.ready_at <= now()))), '00:00:00'::interval) AS oldest_ready_wait
   FROM (authorities a
     LEFT JOIN (command_queue q
     JOIN commands c ON (((c.authority_id = q.authority_id) AND (c.id = q.id)))) ON ((q.authority_id = a.id)))
  GROUP BY a.id;

comment on view command_backlog_by_authority is
    'Per authority: its pending commands (read from command_queue), how many of them are ready (not scheduled for later), and how long the oldest ready one has waited since it became ready (0 when none): the backlog an alert watches, one row per authority.';

grant select on command_backlog_by_authority to ledger_api;
grant select on command_backlog_by_authority to ledger_inspector;
