#!/usr/bin/env python3
"""Medians of the rounds of profile.sh or insert.sh, per variant.
python3 medians.py < the output of either script

profile.sh: of the total a command, of each step's time a command (claim
and start, record; 128 commands a step), and of the WAL a command.
insert.sh: of the time a command."""
import re
import statistics
import sys

PROFILE = re.compile(r"round \d+ (\S+)\s+([0-9.]+) ([0-9.]+) total [0-9.]+ ms ([0-9.]+) us/command (\d+) WAL")
INSERT = re.compile(r"round \d+ (.*?)\s+[0-9.]+ ms, ([0-9.]+) us/command")

profile, insert = {}, {}
for line in sys.stdin:
    if m := PROFILE.match(line):
        profile.setdefault(m.group(1), []).append([float(m.group(i)) for i in (2, 3, 4, 5)])
    elif m := INSERT.match(line):
        insert.setdefault(m.group(1).strip(), []).append(float(m.group(2)))
for variant, r in profile.items():
    claim = statistics.median(x[0] for x in r) * 1000 / 128
    record = statistics.median(x[1] for x in r) * 1000 / 128
    total = [x[2] for x in r]
    wal = statistics.median(x[3] for x in r)
    print(f"# {variant:8s} median {statistics.median(total):6.1f} us/command (claim+start {claim:5.1f}, "
          f"record {record:5.1f}; rounds {min(total):.1f} to {max(total):.1f}), WAL {wal:.0f} bytes/command")
for variant, v in insert.items():
    print(f"# {variant:32s} median {statistics.median(v):.1f} us/command ({min(v):.1f} to {max(v):.1f})")
