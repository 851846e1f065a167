#!/usr/bin/env python3
"""Merges two pg_dump outputs of one schema, one node's and Citus's, into
statements valid on both: what they share once, and what differs in a DO
block that runs each layout's own text (EXECUTE of the dumped statements).

    layouts.py ONE_NODE.sql CITUS.sql

An entry is what pg_dump prints under one "-- Name: ...; Type: ..." header.
The entries are matched by header along the longest common sequence, so
each layout runs its own entries in the order its own dump gave them.
Used by scripts/baseline/generate."""

import difflib
import re
import sys

HEADER = re.compile(r"^-- (Data for )?Name: (.*)$")
CITUS = "exists (select 1 from pg_extension where extname = 'citus')"


def entries(text):
    """[(key, text)]: each header (the key, without its owner) and what follows it."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i] == "--" and i + 1 < len(lines) and HEADER.match(lines[i + 1]):
            key = re.sub(r"; Owner: .*$", "", lines[i + 1])
            j = i + 2
            while j < len(lines) and not (
                lines[j] == "--" and j + 1 < len(lines) and HEADER.match(lines[j + 1])
            ):
                j += 1
            out.append((key, "\n".join(lines[i:j]).strip("\n")))
            i = j
        else:
            if lines[i].strip():
                raise SystemExit(f"text outside an entry: {lines[i]!r}")
            i += 1
    return out


def body(entry):
    """The entry's statements, without its header."""
    return re.sub(r"\A--\n-- .*\n--\n", "", entry).strip("\n")


def quoted(sql, tag):
    if f"${tag}$" in sql:
        raise SystemExit(f"${tag}$ occurs in {sql[:80]!r}")
    return f"${tag}$\n" + sql + f"\n${tag}$"


def layout_block(key, one, citus):
    """One entry as each layout has it (None: the layout has none)."""
    which = "one node and Citus differ" if one and citus else ("one node only" if one else "Citus only")
    lines = ["--", f"{key} ({which})", "--", "", "do $layout$", "begin"]
    if one and citus:
        lines += [f"    if not {CITUS} then", f"        execute {quoted(body(one), 'one_node')};",
                  "    else", f"        execute {quoted(body(citus), 'citus')};", "    end if;"]
    elif one:
        lines += [f"    if not {CITUS} then", f"        execute {quoted(body(one), 'one_node')};",
                  "    end if;"]
    else:
        lines += [f"    if {CITUS} then", f"        execute {quoted(body(citus), 'citus')};",
                  "    end if;"]
    lines += ["end", "$layout$;"]
    return "\n".join(lines)


def main():
    one = entries(open(sys.argv[1]).read())
    citus = entries(open(sys.argv[2]).read())
    for name, side in (("one node", one), ("Citus", citus)):
        keys = [k for k, _ in side]
        if len(keys) != len(set(keys)):
            raise SystemExit(f"{name}: two entries under one header")
    out = []
    matcher = difflib.SequenceMatcher(None, [k for k, _ in one], [k for k, _ in citus], autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if op == "equal":
            for (key, a), (_, b) in zip(one[a0:a1], citus[b0:b1]):
                out.append(a if a == b else layout_block(key, a, b))
        else:
            out += [layout_block(k, a, None) for k, a in one[a0:a1]]
            out += [layout_block(k, None, b) for k, b in citus[b0:b1]]
    print("\n\n".join(out))


main()
