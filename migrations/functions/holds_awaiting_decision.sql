create or replace view holds_awaiting_decision as
 SELECT h.id,
    h.kind,
    h.authority_id,
    h.run_id,
    h.created_at,
    (now() - h.created_at) AS waiting_for,
    h.resembles,
    c.state AS resembles_state,
    COALESCE(p.name, f.name) AS principal
   FROM (((holds h
     LEFT JOIN principals p ON ((p.id = h.scope)))
     LEFT JOIN fleets f ON ((f.id = h.scope)))
     JOIN commands c ON (((c.authority_id = h.authority_id) AND (c.id = h.resembles))))
  WHERE (h.state = 'open'::text)
  ORDER BY h.created_at;

comment on view holds_awaiting_decision is
    'Open holds, oldest first, with the command each resembles and the principal (or fleet) whose scope holds them.';

grant select on holds_awaiting_decision to ledger_api;
grant select on holds_awaiting_decision to ledger_custodian;
grant select on holds_awaiting_decision to ledger_inspector;
grant select on holds_awaiting_decision to ledger_retention;
