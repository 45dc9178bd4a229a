#!/usr/bin/env python3
"""Names the suite's tests that read the server's replication stream.

    replication-stream-tests.py SRC unit...

A node with the module propagates `rdmasync.stamps` after the data it
describes (docs/limitations.md, "Versions in the RDB and the AOF"), so a
test asserting the exact replication stream fails with the module by
design, and often leaves its connection in another database for the tests
after it. Prints one `--skiptest` pattern per test (a regular expression
when the name holds a Tcl variable), `unit<TAB>pattern`.
"""

import re
import sys
from pathlib import Path

TEST = re.compile(r'^\s*test\s+(?:\{([^{}]*)\}|"([^"]*)")')
READS_STREAM = ("attach_to_replication_stream", "assert_replication_stream")


def pattern(name: str) -> str:
    if "$" not in name and "[" not in name:
        return name
    parts = re.split(r"\$\{?\w+\}?|\[[^\]]*\]", name)
    return "/^" + ".*".join(re.escape(p) for p in parts) + "$"


def main() -> int:
    src, units = Path(sys.argv[1]), sys.argv[2:]
    for unit in units:
        path = src / "tests" / "unit" / f"{unit}.tcl"
        if not path.exists():
            continue
        current, found = None, []
        for line in path.read_text(errors="replace").splitlines():
            if m := TEST.match(line):
                current = m.group(1) if m.group(1) is not None else m.group(2)
            elif current and any(r in line for r in READS_STREAM):
                if current not in found:
                    found.append(current)
        for name in found:
            print(f"{unit}\t{pattern(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
