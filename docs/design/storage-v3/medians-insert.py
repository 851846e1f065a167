#!/usr/bin/env python3
"""Medians of insert.sh's rounds, per variant, in microseconds a command.
python3 medians-insert.py < the output of insert.sh"""
import re
import statistics
import sys

rows = {}
for line in sys.stdin:
    m = re.match(r"round \d+ (.*?)\s+([0-9.]+) ms, ([0-9.]+) us/command", line)
    if m:
        rows.setdefault(m.group(1).strip(), []).append(float(m.group(3)))
for variant, v in rows.items():
    print(f"# {variant:32s} median {statistics.median(v):.1f} us/command ({min(v):.1f} to {max(v):.1f})")
