create or replace view command_oldest_in_flight as
 SELECT s.state,
    count(c.id) AS commands,
    min(c.created_at) AS oldest_created_at,
    (now() - min(c.created_at)) AS oldest_age,
    (now() - min(c.updated_at)) AS longest_in_state
   FROM (command_states s
     LEFT JOIN ( SELECT c_1.state,
            c_1.id,
            c_1.created_at,
            c_1.updated_at
           FROM (( SELECT command_queue.id
                   FROM command_queue
                UNION ALL
                 SELECT command_in_flight.id
                   FROM command_in_flight) live
             JOIN commands c_1 ON ((c_1.id = live.id)))) c ON ((c.state = s.state)))
  WHERE (NOT s.terminal)
  GROUP BY s.state, s."position"
  ORDER BY s."position";

comment on view command_oldest_in_flight is
    'Per non-terminal state: how many commands, the age of the oldest, and the longest time one has sat in that state (read from command_queue and command_in_flight).';

grant select on command_oldest_in_flight to ledger_api;
grant select on command_oldest_in_flight to ledger_custodian;
grant select on command_oldest_in_flight to ledger_inspector;
grant select on command_oldest_in_flight to ledger_retention;
