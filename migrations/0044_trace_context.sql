-- The W3C trace context a submission came with (issue 56), kept with its
-- command so that the custodian's spans and the provider's request join the
-- caller's trace, in whichever process runs it and however much later. Never
-- part of the command's fingerprint: two copies of one intent sent from two
-- traces are one command, which keeps the first one's context. Written once,
-- at insert; commands_guard checks the form then and refuses any change
-- after, as for the other columns of the request.
alter table commands
    add column trace_parent text,
    add column trace_state text;

comment on column commands.trace_parent is
    'The W3C traceparent the command was submitted with (version 00 form), or null: the caller''s trace, which the custodian''s spans and the provider''s request join. Not part of the fingerprint.';
comment on column commands.trace_state is
    'The W3C tracestate sent beside trace_parent (at most 32 members, 512 characters), or null.';
