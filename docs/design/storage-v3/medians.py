#!/usr/bin/env python3
"""Medians of profile.sh's rounds, per variant: of the total a command, of
each step's time a command (claim and start, record; 128 commands a step),
and of the WAL a command.  python3 medians.py < the output of profile.sh"""
import re
import statistics
import sys

rows = {}
for line in sys.stdin:
    m = re.match(r"round \d+ (\S+)\s+([0-9.]+) ([0-9.]+) total [0-9.]+ ms ([0-9.]+) us/command (\d+) WAL", line)
    if m:
        rows.setdefault(m.group(1), []).append([float(m.group(i)) for i in (2, 3, 4, 5)])
for variant, r in rows.items():
    claim = statistics.median(x[0] for x in r) * 1000 / 128
    record = statistics.median(x[1] for x in r) * 1000 / 128
    total = [x[2] for x in r]
    wal = statistics.median(x[3] for x in r)
    print(f"# {variant:8s} median {statistics.median(total):6.1f} us/command (claim+start {claim:5.1f}, "
          f"record {record:5.1f}; rounds {min(total):.1f} to {max(total):.1f}), WAL {wal:.0f} bytes/command")
