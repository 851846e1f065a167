#!/usr/bin/env python3
"""An experiment, not the service: rewrites an engine step's definition
(pg_get_functiondef output on stdin) so that every table it names is the
shard of one authority, named by the shard ids given, and its history
inserts draw their ids themselves (a shard table has no identity default).

    by-shard-name.py commands=102097 command_history=102129 ... < step.sql
"""
import re
import sys

shards = dict(arg.split("=") for arg in sys.argv[1:])
out = []
for i, line in enumerate(sys.stdin.read().split("\n")):
    # The header (RETURNS SETOF commands) and comments stay as they are.
    if i >= 3 and not line.strip().startswith("--"):
        for table, shard in shards.items():
            line = re.sub(r"\b%s\b(?!_)" % table, f"{table}_{shard}", line)
    out.append(line)
text = "\n".join(out)
history = f"command_history_{shards['command_history']}"
text = text.replace(f"insert into {history} (authority_id,", f"insert into {history} (id, authority_id,")
text = re.sub(r"(insert into %s \(id,[^;]*?)\b(values|select) \(?p_authority," % history,
              lambda m: m.group(1) + ("values (nextval('command_history_id_seq'), p_authority,"
                                      if m.group(2) == "values"
                                      else "select nextval('command_history_id_seq'), p_authority,"),
              text, flags=re.S)
print(text + ";")
