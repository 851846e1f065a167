create or replace view command_counts_by_state as
 SELECT s.state,
    s.terminal,
    count(c.id) AS commands
   FROM (command_states s
     LEFT JOIN commands c ON ((c.state = s.state)))
  GROUP BY s.state, s.terminal, s."position"
  ORDER BY s."position";

comment on view command_counts_by_state is
    'How many commands are in each state (every state listed, zero included).';

grant select on command_counts_by_state to ledger_api;
grant select on command_counts_by_state to ledger_custodian;
grant select on command_counts_by_state to ledger_inspector;
grant select on command_counts_by_state to ledger_retention;
