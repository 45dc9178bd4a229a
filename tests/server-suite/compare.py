#!/usr/bin/env python3
"""Compares a server suite run with the module against the plain server's.

    compare.py SERVER OUT KNOWN unit...

SERVER is the server and its version, as redis-8.0.6.

OUT holds plain/, a/ and b/ with one log per unit (runtest's output; plain/
only for the units where a module run failed a test) and
peer-differences.tsv (tests/server-suite/peer-check.tcl); a-retry/ and
b-retry/ the same for units run again after an unexpected difference
(listed in OUT/retry.tsv, `target<TAB>unit`): a difference the retry does
not show again is reported as flaky, not counted. KNOWN lists
`server<TAB>unit<TAB>test<TAB>reason`, the module-only failures and peer
differences not fixed yet. Prints a table per unit and run, writes it to
OUT/summary.txt, and exits 1 on a difference KNOWN does not name.
"""

import re
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
OK = re.compile(r"^\[ok\]: (.*) \(\d+ ms\)$")
ERR = re.compile(r"^\[err\]: (.*) in tests/\S+$")
EXC = re.compile(r"^\[exception\]: (.*)$")


def results(log: Path):
    """(passed, failed, exception) of one runtest log; None when it is missing."""
    if not log.exists():
        return None
    passed, failed, exception = set(), set(), None
    for raw in log.read_text(errors="replace").splitlines():
        line = ANSI.sub("", raw).strip()
        if m := OK.match(line):
            passed.add(m.group(1))
        elif m := ERR.match(line):
            failed.add(m.group(1))
        elif (m := EXC.match(line)) and exception is None:
            exception = m.group(1)
    return passed, failed, exception


def passed_every_test(log: Path, mod) -> bool:
    """Whether a module run ran its file to the end with no failure."""
    text = ANSI.sub("", log.read_text(errors="replace"))
    return not mod[1] and mod[2] is None and "All tests passed without errors" in text


def applies(entry: str, label: str) -> bool:
    """Whether a known.tsv server column holds for a server labelled like
    redis-8.0.6: "any", the server ("redis"), a version ("redis-8.0"), or
    the release itself."""
    return entry in ("any", label.split("-")[0], label) or label.startswith(entry + ".")


def known(path: Path, server: str):
    """{(unit, test): reason} of the known differences for this server."""
    table = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) >= 4 and applies(parts[0], server):
            table[(parts[1], parts[2])] = parts[3]
    return table


def peer_differences(out: Path, target: str):
    path = out / target / "peer-differences.tsv"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3:
            rows.append((parts[0], parts[1], parts[2]))
    return rows


def main() -> int:
    server, out, known_path, units = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]
    expected = known(known_path, server)
    lines, unexpected, seen_known, retries = [], [], set(), set()
    lines.append(f"{'unit':<24} {'run':<5} {'plain ok/err':>12} {'module ok/err':>13}  regressions")
    for unit in units:
        plain = results(out / "plain" / f"{unit.replace('/', '_')}.log")
        for target in ("a", "b"):
            log = out / target / f"{unit.replace('/', '_')}.log"
            mod = results(log)
            if mod is None:
                continue
            if plain is None:
                # scripts/server-suite.sh runs the plain server only on the
                # files where the module's run did not pass every test.
                if passed_every_test(log, mod):
                    lines.append(f"unit/{unit:<19} {target:<5} {'-':>12} {len(mod[0]):>6}/{len(mod[1]):<6}  0")
                else:
                    retries.add((target, unit))
                    unexpected.append(f"unit/{unit} on {target}: a test failed and the plain server did not run")
                    lines.append(f"    NOT COMPARED: unit/{unit} on {target} failed a test; no plain run")
                continue
            regressions = sorted(t for t in plain[0] - mod[0])
            lines.append(
                f"unit/{unit:<19} {target:<5} {len(plain[0]):>6}/{len(plain[1]):<5} "
                f"{len(mod[0]):>6}/{len(mod[1]):<6}  {len(regressions)}"
            )
            if mod[2] and not plain[2]:
                lines.append(f"    exception with the module only: {mod[2]}")
            retry = results(out / f"{target}-retry" / f"{unit.replace('/', '_')}.log")
            for t in regressions:
                reason = expected.get((unit, t))
                if reason:
                    seen_known.add((unit, t))
                    lines.append(f"    known: {t} ({reason})")
                elif retry is not None and t in retry[0]:
                    lines.append(f"    flaky: {t} (failed once with the module, passed on a retry)")
                else:
                    retries.add((target, unit))
                    unexpected.append(f"unit/{unit} on {target}: fails with the module only: {t}")
                    lines.append(f"    FAILS WITH THE MODULE ONLY: {t}")
    seen_time_only = 0
    for target in ("a", "b"):
        for unit, test, diff in peer_differences(out, target):
            if unit.startswith("unit/"):
                unit = unit[len("unit/"):]
            if diff.startswith("not checked"):
                lines.append(f"not checked after {unit}: {test} on {target} ({diff})")
                continue
            if diff.startswith("seen-time only"):
                # A consumer's seen-time is set by the node that loads an
                # AOF without preamble (DEBUG LOADAOF), as on a replica.
                seen_time_only += 1
                continue
            reason = expected.get((unit, test))
            retry_log = out / f"{target}-retry" / f"{unit.replace('/', '_')}.log"
            again = {(u.removeprefix("unit/"), t) for u, t, _ in peer_differences(out, f"{target}-retry")}
            if reason:
                seen_known.add((unit, test))
                lines.append(f"peer differs after {unit}: {test} on {target}: known ({reason})")
            elif retry_log.exists() and (unit, test) not in again:
                lines.append(f"peer differed after {unit}: {test} on {target}, not on a retry (flaky)")
            else:
                retries.add((target, unit))
                unexpected.append(f"unit/{unit} on {target}: the peer differs after: {test}: {diff}")
                lines.append(f"PEER DIFFERS after unit/{unit}: {test} on {target}: {diff}")
    if seen_time_only:
        lines.append(
            f"{seen_time_only} checks found streams that differ only in consumer seen-times "
            "(set by the reloading node alone, see peer-check.tcl)"
        )
    for (unit, test), reason in sorted(expected.items()):
        if unit in units and (unit, test) not in seen_known:
            lines.append(f"known difference not seen (remove it from known.tsv?): {unit}: {test}")
    (out / "retry.tsv").write_text("".join(f"{t}\t{u}\n" for t, u in sorted(retries)))
    summary = "\n".join(lines)
    print(summary)
    (out / "summary.txt").write_text(summary + "\n")
    if unexpected:
        print(f"\nserver-suite: {len(unexpected)} unexpected differences:")
        for u in unexpected:
            print("  " + u)
        return 1
    print(f"\nserver-suite: {server}: no unexpected difference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
