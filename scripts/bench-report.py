#!/usr/bin/env python3
"""Tabulates what scripts/bench.sh measured in OUT and draws OUT/bench.png.

Usage: scripts/bench-report.py OUT
Reads OUT/{env.txt,overhead.csv,lag/,lag.txt,saturation.txt,idle.txt,memory.txt,
criterion/,guest/}; writes OUT/table.md (also printed), OUT/plot/*.dat and,
when gnuplot is installed, OUT/bench.png.
"""
import glob
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

OUT = sys.argv[1]
lines = []


def say(s=""):
    lines.append(s)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(sorted_xs, p):
    """Nearest-rank percentile."""
    if not sorted_xs:
        return float("nan")
    k = max(1, min(len(sorted_xs), -(-len(sorted_xs) * p // 100)))
    return sorted_xs[int(k) - 1]


def ratio(a, b):
    """a / b, or why not (a lag at or below zero has no meaningful ratio)."""
    return f"{a / b:.2f}x" if a > 0 and b > 0 else "n/a (<= 0 us)"


def path(*p):
    return os.path.join(OUT, *p)


def read(name):
    try:
        with open(path(name)) as f:
            return f.read()
    except FileNotFoundError:
        return ""


os.makedirs(path("plot"), exist_ok=True)
say("# rdmasync benchmark")
say("")
say("```")
say(read("env.txt").rstrip())
say("```")

# 1. Write-path overhead.
rows = {}
for line in read("overhead.csv").splitlines()[1:]:
    t, pl, r, who, rps = line.split(",")
    try:
        rows.setdefault((t, int(pl)), {}).setdefault(int(r), {})[who] = float(rps)
    except ValueError:
        pass
if rows:
    say("")
    say("## 1. Write-path overhead: redis-benchmark, 50 clients, requests/s")
    say("")
    say("Median over rounds; ratio = module node (live peer) / plain redis-server, median of the")
    say("per-round ratios (module and plain run back to back), and their range across rounds.")
    say("`set`, `hset`, `lpush` are redis-benchmark's own tests (-r 100000): hset and lpush write")
    say("ONE key (`myhash`, `mylist`) that grows during the run (run with a fifth of the requests);")
    say("`*-keys` spread the same command over 100000 small keys. For scale, the last two")
    say("columns run the same load on a plain master with a REPLICAOF replica attached (the")
    say("replica also shares the 2 cores): what Redis's own replication costs on this host.")
    say("'notify-only' is a plain server whose one module subscribes to the same keyspace")
    say("events as rdmasync's hook and does nothing (examples/notify_floor.rs): the least any")
    say("capture through keyspace notifications costs, before reading or shipping anything.")
    say("")
    say("| test | pipeline | module req/s | plain req/s | ratio | range (rounds) | REPLICAOF master req/s | REPLICAOF ratio | notify-only ratio |")
    say("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    with open(path("plot", "overhead.dat"), "w") as f:
        for (t, pl), by_round in rows.items():
            mod = [v["module"] for v in by_round.values() if "module" in v]
            pla = [v["plain"] for v in by_round.values() if "plain" in v]
            rep = [v["replicaof"] for v in by_round.values() if "replicaof" in v]
            ratios = [v["module"] / v["plain"] for v in by_round.values() if "module" in v and "plain" in v]
            rep_ratios = [v["replicaof"] / v["plain"] for v in by_round.values() if "replicaof" in v and "plain" in v]
            rep_cols = f"{med(rep):,.0f} | {med(rep_ratios):.3f}" if rep_ratios else "- | -"
            floor_ratios = [v["floor"] / v["plain"] for v in by_round.values() if "floor" in v and "plain" in v]
            floor_col = f"{med(floor_ratios):.3f}" if floor_ratios else "-"
            say(
                f"| {t} | {pl} | {med(mod):,.0f} | {med(pla):,.0f} | {med(ratios):.3f} | "
                f"{min(ratios):.3f}-{max(ratios):.3f} ({len(ratios)}) | {rep_cols} | {floor_col} |"
            )
            f.write(f'"{t} P{pl}" {med(ratios):.4f} {min(ratios):.4f} {max(ratios):.4f}\n')

# 1b. CPU per request (less noisy than req/s on shared cores).
cpu = {}
have_main = False
if os.path.exists(path("cpu.csv")):
    for line in read("cpu.csv").splitlines()[1:]:
        fields = line.split(",")
        try:
            t, pl, r, who, n, s_ns, p_ns = fields[:7]
            # Main threads only (older runs lack them: the whole process then).
            s_main, p_main = fields[7:9] if len(fields) >= 9 else (s_ns, p_ns)
            have_main = have_main or len(fields) >= 9
            n = int(n)
            cpu.setdefault((t, int(pl)), {}).setdefault(who, []).append(
                (int(s_ns) / n, int(p_ns) / n, int(s_main) / n, int(p_main) / n)
            )
        except ValueError:
            pass
# Per test: medians over rounds of (plain, A, B, A main, B main, M, R, notify-only),
# plain > 0 only (notify-only is nan in runs from before it was measured).
cpu_rows = []
for (t, pl), by in cpu.items():
    col = [
        med([x[i] for x in by.get(who, [])])
        for who, i in [("plain", 0), ("module", 0), ("module", 1), ("module", 2),
                       ("module", 3), ("replicaof", 0), ("replicaof", 1), ("floor", 0)]
    ]
    if col[0] > 0:
        cpu_rows.append((t, pl, *col))
if cpu_rows:
    say("")
    say("### CPU per request (ns on CPU, all threads, median over rounds)")
    say("")
    say("The written server and its peer, over the run (for the module, until B applied")
    say("everything), per request sent. Unlike req/s, this does not depend on how much of")
    say("the 2 cores the other processes left: it is the work each setup does per write.")
    say("'A+B / plain' is the module pair's total over the plain server's; 'M+R / plain' the")
    say("same for the REPLICAOF pair; 'notify-only' the server with the empty notification")
    say("callback.")
    say("")
    say("| test | pipeline | plain | module A | module B | A+B / plain | REPLICAOF M | REPLICAOF R | M+R / plain | notify-only |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t, pl, plain, a, b, _, _, mm, rr, ff in cpu_rows:
        say(
            f"| {t} | {pl} | {plain:,.0f} | {a:,.0f} | {b:,.0f} | {(a + b) / plain:.2f} | "
            f"{mm:,.0f} | {rr:,.0f} | {(mm + rr) / plain:.2f} | {'-' if math.isnan(ff) else f'{ff:,.0f}'} |"
        )
if cpu_rows and have_main:
    say("")
    say("The module pair by thread (same runs, medians): each node's main thread (capture,")
    say("flush and apply run there) and its module threads (sender, link, accept).")
    say("")
    say("| test | pipeline | plain | A main | A threads | B main | B threads | REPLICAOF M | REPLICAOF R |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t, pl, plain, a, b, am, bm, mm, rr, _ in cpu_rows:
        say(
            f"| {t} | {pl} | {plain:,.0f} | {am:,.0f} | {a - am:,.0f} | {bm:,.0f} | {b - bm:,.0f} | "
            f"{mm:,.0f} | {rr:,.0f} |"
        )

# 1c. Before and after a change (bench.sh --before SO): the same tests on a
# second module pair running an earlier build, in the same rounds.
before_rows = []
for (t, pl), by in cpu.items():
    if "module-before" in by and "module" in by:
        now = [med([x[i] for x in by["module"]]) for i in range(4)]
        was = [med([x[i] for x in by["module-before"]]) for i in range(4)]
        before_rows.append((t, pl, was, now))
if before_rows:
    say("")
    say("### CPU per request, module before and after (ns, all threads, median over rounds)")
    say("")
    say("'before' is the build given to bench.sh --before, run as a second pair in the same")
    say("rounds; A is the written node, B its peer; main = the main thread only.")
    say("")
    say("| test | pipeline | A before | A after | A main before | A main after | B before | B after | A+B after / before |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for t, pl, was, now in sorted(before_rows):
        say(
            f"| {t} | {pl} | {was[0]:,.0f} | {now[0]:,.0f} | {was[2]:,.0f} | {now[2]:,.0f} | "
            f"{was[1]:,.0f} | {now[1]:,.0f} | {(now[0] + now[1]) / (was[0] + was[1]):.3f} |"
        )

# 2. Replication lag.
runs = {}
sends = {}
for fn in sorted(glob.glob(path("lag", "*.txt"))):
    m = re.match(r"(module-before|module|replicaof)-(light|bg)-r(\d+)\.txt", os.path.basename(fn))
    if not m:
        continue
    with open(fn) as f:
        pairs = [l.split() for l in f if l.strip()]
    runs.setdefault((m[1], m[2]), []).append(sorted(int(p[0]) / 1000.0 for p in pairs))
    sends.setdefault((m[1], m[2]), []).extend(int(p[1]) / 1000.0 for p in pairs)
lost = {}
bg_rates = {}
for line in read("lag.txt").splitlines():
    m = re.match(r"(module-before|module|replicaof)-(light|bg)-r\d+: probes (\d+) lost (\d+) bg (\d+)/s", line)
    if m:
        k = (m[1], m[2])
        n, l = lost.get(k, (0, 0))
        lost[k] = (n + int(m[3]), l + int(m[4]))
        bg_rates.setdefault(k, []).append(int(m[5]))
lag = {}
if runs:
    say("")
    say("## 2. Replication lag: write acknowledged on A -> keyspace notification on B (us)")
    say("")
    say("All rounds pooled (percentiles), and the range of the per-round p50 and p99. Light:")
    say("1000 probe writes/s. Loaded: the same probes while other clients write in the background")
    say("(achieved background rate shown). Baseline: REPLICAOF between two plain servers.")
    say("A negative lag means B showed the key before A's reply reached the client. The last")
    say("two columns time the same probes from the moment the write was sent to A.")
    say("")
    say("| pair | load | probes | lost | p50 | p99 | p99.9 | max | p50 per round | p99 per round | send->visible p50 | p99 |")
    say("|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|")
    for load in ("light", "bg"):
        for who in ("module", "module-before", "replicaof"):
            per = runs.get((who, load))
            if not per:
                continue
            xs = sorted(x for r in per for x in r)
            lag[(who, load)] = xs
            p50s = [pct(r, 50) for r in per]
            p99s = [pct(r, 99) for r in per]
            n, l = lost.get((who, load), (len(xs), 0))
            name = load if load == "light" else f"bg {med(bg_rates.get((who, load), [0])):,.0f}/s"
            say(
                f"| {who} | {name} | {n} | {l} | {pct(xs, 50):.1f} | {pct(xs, 99):.1f} | "
                f"{pct(xs, 99.9):.1f} | {xs[-1]:.1f} | {min(p50s):.1f} .. {max(p50s):.1f} | "
                f"{min(p99s):.1f} .. {max(p99s):.1f} | {pct(sorted(sends[(who, load)]), 50):.1f} | "
                f"{pct(sorted(sends[(who, load)]), 99):.1f} |"
            )
    say("")
    for load in ("light", "bg"):
        a, b = lag.get(("module", load)), lag.get(("replicaof", load))
        if a and b:
            sa, sb = sorted(sends[("module", load)]), sorted(sends[("replicaof", load)])
            say(
                f"- {load}: module / REPLICAOF ack->visible p50 {ratio(pct(a, 50), pct(b, 50))}, "
                f"p99 {ratio(pct(a, 99), pct(b, 99))}, p99.9 {ratio(pct(a, 99.9), pct(b, 99.9))}; "
                f"send->visible p50 {ratio(pct(sa, 50), pct(sb, 50))}, p99 {ratio(pct(sa, 99), pct(sb, 99))}"
            )
    for (who, load), xs in lag.items():
        for kind, data in (("ack", xs), ("send", sorted(sends[(who, load)]))):
            with open(path("plot", f"cdf-{kind}-{who}-{load}.dat"), "w") as f:
                step = max(1, len(data) // 2000)
                for i, x in enumerate(data):
                    if i % step == 0 or i + 1 == len(data):
                        f.write(f"{max(x, 1.0):.3f} {(i + 1) / len(data):.6f}\n")

# 3. Saturation.
sat = {}
for line in read("saturation.txt").splitlines():
    m = re.match(r"RESULT (module|plain)-(\d+)-r(\d+) size \d+ (.*)", line)
    if m:
        kv = m[4].split()
        d = {kv[i]: float(kv[i + 1]) for i in range(0, len(kv) - 1, 2)}
        sat.setdefault((m[1], int(m[2])), []).append(d)
if sat:
    say("")
    say("## 3. Saturation: pipelined SET on A (4 clients x pipeline 32), medians over rounds")
    say("")
    say("plain: the same load on a server without the module (its flat-out rate). module max: A's")
    say("flat-out rate with the module and B applying. sustained: the highest rate tried at which")
    say("B kept up with bounded lag: no queue overflow, the backlog (writes acked on A not yet")
    say("applied on B) grew by < 3% of A's rate from the step's second quarter to its last, and B")
    say("caught up within 0.5 s after A stopped. Tried flat out first, then 0.9x B's apply rate in")
    say("the step's second half, stepping down. B applied = entries applied on B from the step's")
    say("start until drained, per second. lag max = the largest backlog seen, in time at A's rate.")
    say("")
    say("| value | plain writes/s | module max writes/s | sustained writes/s | sustained / plain | B applied entries/s | value MB/s | wire MB/s | lag max ms | drain ms |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in (64, 4096):
        mods, plains = sat.get(("module", size)), sat.get(("plain", size))
        if not mods:
            continue

        def m(k, xs=mods):
            return med([d[k] for d in xs])

        plain = med([d["max_write"] for d in plains]) if plains else float("nan")
        say(
            f"| {size} B | {plain:,.0f} | {m('max_write'):,.0f} | {m('sustained'):,.0f} | "
            f"{m('sustained') / plain:.3f} | {m('entries_per_s'):,.0f} | {m('value_mb_per_s'):.1f} | "
            f"{m('wire_mb_per_s'):.1f} | {m('lag_max_ms') if all('lag_max_ms' in d for d in mods) else float('nan'):.1f} | "
            f"{m('drain_ms'):.0f} |"
        )
    per = ", ".join(
        f"{who} {size} B " + "/".join(f"{d['sustained']:,.0f}" for d in ds)
        for (who, size), ds in sorted(sat.items())
    )
    say(f"\nPer round (sustained or flat-out writes/s): {per}")

# 4. Criterion.
crit = {}
cdir = path("criterion") if os.path.isdir(path("criterion")) else None
for fn in glob.glob(os.path.join(cdir or "/nonexistent", "*", "*", "new", "benchmark.json")):
    with open(fn) as f:
        b = json.load(f)
    with open(fn.replace("benchmark.json", "estimates.json")) as f:
        e = json.load(f)
    crit[(b["group_id"], b["value_str"])] = (b["throughput"]["Bytes"], e["mean"]["point_estimate"])
SIZES = {"64B": 64, "1KiB": 1024, "64KiB": 65536}
if crit:
    say("")
    say("## 4. Codec and ring micro-benchmarks (criterion, one core, cache-hot)")
    say("")
    say("Per frame (16-byte key): encode (header + key + value + CRC32C into a buffer), decode")
    say("(header checks + CRC32C, borrows the bytes), poller (a 4 MiB ring of frames -> batches of")
    say("16 entries, key and value copied out), crc32c of the value alone, memcpy of the value.")
    say("GB/s counts value bytes; 'x memcpy' = time per frame / memcpy time for the same value.")
    say("")
    say("| op | value | ns/frame | Mframes/s | GB/s | x memcpy |")
    say("|---|---|---:|---:|---:|---:|")
    with open(path("plot", "codec.dat"), "w") as f:
        f.write("size encode decode poller crc32c memcpy\n")
        for label, size in SIZES.items():
            row = [label]
            base = crit.get(("memcpy", label))
            base_ns = base[1] / (base[0] / size) if base else float("nan")
            for op in ("encode", "decode", "poller", "crc32c", "memcpy"):
                if (op, label) not in crit:
                    row.append("?")
                    continue
                nbytes, ns = crit[(op, label)]
                frames = nbytes / size
                per = ns / frames
                gbs = nbytes / ns
                row.append(f"{gbs:.3f}")
                say(f"| {op} | {label} | {per:,.1f} | {1e3 / per:,.2f} | {gbs:.2f} | {per / base_ns:.2f} |")
            f.write(" ".join(row) + "\n")

# 5. Idle CPU and memory.
idle = [l.split() for l in read("idle.txt").splitlines() if l.strip()]
if idle:
    say("")
    say("## 5. Idle CPU of a connected pair (% of one core, on-CPU time from schedstat)")
    say("")
    say("| process / thread | % of a core |")
    say("|---|---:|")
    for p in idle:
        if p[0] == "thread" and len(p) == 3:
            say(f"| {p[1]} | {float(p[2]):.3f} |")
        elif len(p) == 2:
            say(f"| {p[0]} | {float(p[1]):.3f} |")
    say("")
    say("Redis itself wakes `hz` (10) times a second; a module pair is module-A + module-B.")
mem = read("memory.txt").split()
if len(mem) >= 7:
    n, a0, a1, b0, b1, p0, p1 = (int(x) for x in mem[:7])
    say("")
    say(f"## 5. Memory per key: used_memory delta / {n:,} keys of 64 B (16-byte names)")
    say("")
    say("| node | bytes/key |")
    say("|---|---:|")
    say(f"| plain | {(p1 - p0) / n:.1f} |")
    say(f"| module A (written) | {(a1 - a0) / n:.1f} |")
    say(f"| module B (applied, {mem[7] if len(mem) > 7 else '?'} keys) | {(b1 - b0) / n:.1f} |")
    say(f"| module overhead on A | {round(((a1 - a0) - (p1 - p0)) / n, 1) + 0.0:+.1f} |")
    say("")
    say("The rings (8 MiB per node, mmap) are not in used_memory.")

# 6. Guest: rdma vs tcp (and REPLICAOF) inside the Soft-RoCE guest.
gdir = path("guest")
if os.path.isdir(gdir):
    say("")
    say("## 6. In the Soft-RoCE guest: transport=rdma vs tcp (emulated: ratios only)")
    say("")
    for line in read(os.path.join("guest", "pairs.txt")).splitlines():
        say(f"- {line}")
    glag = {}
    for fn in sorted(glob.glob(os.path.join(gdir, "lag", "*.txt"))):
        m = re.match(r"(rdma|tcp|replicaof)-light-r\d+\.txt", os.path.basename(fn))
        if m:
            with open(fn) as f:
                pairs = [l.split() for l in f if l.strip()]
            d = glag.setdefault(m[1], ([], []))
            d[0].extend(int(p[0]) / 1000.0 for p in pairs)
            d[1].extend(int(p[1]) / 1000.0 for p in pairs)
    glost = {}
    for line in read(os.path.join("guest", "lag.txt")).splitlines():
        m = re.match(r"(rdma|tcp|replicaof)-light-r\d+: probes (\d+) lost (\d+)", line)
        if m:
            n, l = glost.get(m[1], (0, 0))
            glost[m[1]] = (n + int(m[2]), l + int(m[3]))
    if glag:
        say("")
        say("Lag (us), light load, all rounds pooled:")
        say("")
        say("| pair | probes | lost | ack->visible p50 | p99 | p99.9 | max | send->visible p50 | p99 |")
        say("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for who in ("rdma", "tcp", "replicaof"):
            if who not in glag:
                continue
            a, snd = sorted(glag[who][0]), sorted(glag[who][1])
            n, l = glost.get(who, (len(a), 0))
            say(
                f"| {who} | {n} | {l} | {pct(a, 50):.1f} | {pct(a, 99):.1f} | {pct(a, 99.9):.1f} | "
                f"{a[-1]:.1f} | {pct(snd, 50):.1f} | {pct(snd, 99):.1f} |"
            )
        if "rdma" in glag and "tcp" in glag:
            r, t = sorted(glag["rdma"][1]), sorted(glag["tcp"][1])
            say("")
            say(f"- rdma / tcp send->visible: p50 {pct(r, 50) / pct(t, 50):.2f}x, p99 {pct(r, 99) / pct(t, 99):.2f}x")
    gsat = {}
    for line in read(os.path.join("guest", "saturation.txt")).splitlines():
        m = re.match(r"RESULT (rdma|tcp)-64-r\d+ size \d+ (.*)", line)
        if m:
            kv = m[2].split()
            gsat.setdefault(m[1], []).append({kv[i]: float(kv[i + 1]) for i in range(0, len(kv) - 1, 2)})
    if gsat:
        say("")
        say("Saturation, 64 B values (medians over rounds):")
        say("")
        say("| transport | max writes/s on A | sustained writes/s | B applied entries/s | wire MB/s |")
        say("|---|---:|---:|---:|---:|")
        for who, ds in sorted(gsat.items()):
            say(
                f"| {who} | {med([d['max_write'] for d in ds]):,.0f} | {med([d['sustained'] for d in ds]):,.0f} | "
                f"{med([d['entries_per_s'] for d in ds]):,.0f} | {med([d['wire_mb_per_s'] for d in ds]):.1f} |"
            )
    perf = read(os.path.join("guest", "perftest.txt")).rstrip()
    if perf:
        say("")
        say("Verbs floor on the same device (perftest):")
        say("")
        say("```")
        say(perf)
        say("```")

text = "\n".join(lines) + "\n"
with open(path("table.md"), "w") as f:
    f.write(text)
print(text)

# Plot.
gp = shutil.which("gnuplot")
if not gp:
    print("bench-report: gnuplot not installed; no plot (scripts/install-deps.sh --bench)")
    sys.exit(0)
pd = path("plot")
def cdf_panel(kind, title):
    files = [
        (f"{pd}/cdf-{kind}-{who}-{load}.dat", f"{who} {load}")
        for load in ("light", "bg")
        for who in ("module", "replicaof")
        if os.path.exists(f"{pd}/cdf-{kind}-{who}-{load}.dat")
    ]
    if not files:
        return ["set multiplot next"]
    return [
        f"set title '{title}'",
        "set logscale x",
        "set xlabel 'lag (us)'",
        "set ylabel 'fraction of probes'",
        "set yrange [0:1]",
        "set key bottom right",
        "plot " + ", ".join(f"'{f}' using 1:2 with lines lw 2 title '{t}'" for f, t in files),
        "unset logscale x",
        "set yrange [*:*]",
    ]


def timeline_panel(size):
    tl = path("sat", f"module-{size}-r1.dat")
    if not os.path.exists(tl):
        return ["set multiplot next"]
    plain = med([d["max_write"] for d in sat.get(("plain", size), [])]) if sat else 0
    return [
        f"set title 'Saturation, {size} B values (round 1): writes/s on A, entries/s applied on B'",
        "set xlabel 'time (s)'",
        "set ylabel 'per second'",
        "set yrange [0:*]",
        "set key top right",
        f"plot '{tl}' using 1:2 with lines lw 2 title 'written on A (module)', "
        f"'' using 1:3 with lines lw 2 title 'applied on B', "
        f"{plain} with lines dt 2 title 'plain server flat out'",
        "set yrange [*:*]",
    ]


script = [
    "set terminal pngcairo size 1600,1500 font 'sans,10'",
    f"set output '{path('bench.png')}'",
    "set multiplot layout 3,2 title 'rdmasync benchmark, " + read("env.txt").split("\n")[0] + "'",
    "set grid",
]
script += cdf_panel("ack", "Lag CDF: reply on A -> visible on B (< 1 us drawn at 1)")
script += cdf_panel("send", "Lag CDF: write sent to A -> visible on B")
if os.path.exists(f"{pd}/overhead.dat"):
    script += [
        "set title 'Write-path overhead: module / plain req/s (median; bars: range over rounds)'",
        "set xlabel ''",
        "set ylabel 'ratio'",
        "set yrange [0:1.3]",
        "set xtics rotate by -35",
        "set style fill solid 0.5",
        "set boxwidth 0.6",
        "set key top right",
        f"plot '{pd}/overhead.dat' using 0:2:xtic(1) with boxes title 'ratio', "
        f"'' using 0:2:3:4 with yerrorbars lc black pt 0 notitle, 0.95 with lines dt 2 title 'target 0.95'",
        "set xtics norotate",
        "set yrange [*:*]",
    ]
else:
    script += ["set multiplot next"]
script += timeline_panel(64)
script += timeline_panel(4096)
if os.path.exists(f"{pd}/codec.dat"):
    script += [
        "set title 'Codec and poller throughput (value bytes, GB/s, log scale)'",
        "set xlabel ''",
        "set ylabel 'GB/s'",
        "set logscale y",
        "set key top left",
        "set style data histograms",
        "set style histogram clustered gap 1",
        "set style fill solid 0.7",
        f"plot for [i=2:6] '{pd}/codec.dat' using i:xtic(1) title columnheader(i)",
    ]
script += ["unset multiplot"]
with open(f"{pd}/bench.gp", "w") as f:
    f.write("\n".join(script) + "\n")
r = subprocess.run([gp, f"{pd}/bench.gp"], capture_output=True, text=True)
if r.returncode == 0:
    print(f"plot: {path('bench.png')}")
else:
    print(f"bench-report: gnuplot failed: {r.stderr.strip()[-500:]}")
