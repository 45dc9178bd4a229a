#!/usr/bin/env bash
# The benchmark (issue 6): builds the module, starts its own servers on loopback
# and measures, with module and baseline runs interleaved round by round:
#   1. write-path overhead: redis-benchmark SET/HSET/LPUSH, 50 clients, pipeline 1
#      and 16, on a node with the module and a live peer vs a plain redis-server
#      (and, for scale, a REPLICAOF master and a server whose only module is an
#      empty keyspace-notification callback: the floor of capture by notification);
#   2. replication lag (write acknowledged on A -> keyspace notification on B),
#      light and under background load, vs Redis's own REPLICAOF pair;
#   3. saturation: the highest pipelined SET rate on A that B keeps up with,
#      64 B and 4 KiB values, vs the plain server's rate;
#   4. criterion micro-benchmarks of the codec and the ring poller vs memcpy;
#   5. idle CPU of a connected pair, memory per replicated key;
#   6. with --rdma: lag and throughput over transport=rdma vs tcp in the
#      Soft-RoCE guest, next to ib_write_lat/ib_write_bw (scripts/bench-in-guest.sh).
# Prints a table and writes it, the raw results and bench.png (lag CDF and
# throughput) to target/bench/<time>/ (target/bench/latest points there).
# Not part of the test suite. See docs/benchmarks.md for what each number means.
#
# Usage: scripts/bench.sh [--rounds N] [--quick] [--rdma] [--no-micro] [--aof] [--before SO]
#                        [--write-path-only] [--out DIR]
#   --rounds N   interleaved rounds of every server measurement (default 3)
#   --quick      one round, shorter runs (a smoke test of the harness, not a measurement)
#   --rdma       also run the Soft-RoCE guest part (TCG-emulated: slow, several minutes)
#   --no-micro   skip the criterion micro-benchmarks
#   --aof        every server with appendonly yes, appendfsync everysec
#   --before SO  also a second module pair running the build SO (an earlier commit's
#                target/release/librdmasync.so), measured in the same rounds as
#                'module-before': the write path before and after a change
#   --write-path-only  only the write-path overhead and CPU per request (section 1)
#   --lag        section 1 and the replication lag (section 2) only; with --before,
#                the lag of the module-before pair too, in the same rounds
# Environment: BENCH_PORT (default 26400: ports BENCH_PORT+1..+14 are used),
#   BG_RATE (background writes/s for the loaded lag run, default 50000),
#   BENCH_TESTS / BENCH_PIPELINES (the write-path tests and pipelines, default all;
#   `incr` increments one hot counter, `hincrby` one hot field of one hash,
#   `hset-big` sets random fields of one
#   hash of 1,000,000 fields, `sadd-big` adds random members to one set of
#   1,000,000 (new members: an SADD of one already there changes nothing)
#   and `zadd-big` scores random members of one sorted set of
#   1,000,000, each filled before the run, `sadd-keys` adds members to
#   100,000 small sets, and `function-load` loads a fifth of the requests'
#   number of function libraries of new names, one client waiting for each
#   reply (scripts/function-loads.py: the pipeline does not apply);
#   none in the default set),
#   BENCH_MODULE_ARGS (extra module arguments of the measured pair, e.g.
#   merge-elements=no; not given to the --before pair),
#   BENCH_BEFORE_ARGS (extra module arguments of the --before pair).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=3 QUICK=0 RDMA=0 MICRO=1 OUT="" AOF=0 BEFORE="" WRITE_ONLY=0 LAG_TOO=0
while [ $# -gt 0 ]; do
  case $1 in
    --aof) AOF=1; shift ;;
    --before) BEFORE=$(realpath "$2"); shift 2 ;;
    --write-path-only) WRITE_ONLY=1 MICRO=0; shift ;;
    --lag) WRITE_ONLY=1 LAG_TOO=1 MICRO=0; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --quick) QUICK=1 ROUNDS=1; shift ;;
    --rdma) RDMA=1; shift ;;
    --no-micro) MICRO=0; shift ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
BASE=${BENCH_PORT:-26400} BG_RATE=${BG_RATE:-50000}
TESTS=${BENCH_TESTS:-set hset lpush hset-keys lpush-keys} PIPELINES=${BENCH_PIPELINES:-1 16}
N1=100000 N16=300000 PROBES=2000 SAT_SECS=4 IDLE_SECS=6 MEM_KEYS=100000
[ "$QUICK" = 1 ] && N1=20000 N16=60000 PROBES=500 SAT_SECS=2 IDLE_SECS=2 MEM_KEYS=20000

scripts/install-deps.sh --bench
echo "== build (release)"
nice -n 10 cargo build --release -q
nice -n 10 cargo build --release -q --example lagbench --example notify_floor
SO=$(pwd)/target/release/librdmasync.so LAG=$(pwd)/target/release/examples/lagbench
FLOOR=$(pwd)/target/release/examples/libnotify_floor.so
for f in "$SO" "$FLOOR"; do [ -f "$f" ] || { echo "bench: $f was not built" >&2; exit 1; }; done
OUT=${OUT:-target/bench/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT/lag" "$OUT/sat"
ln -sfn "$(basename "$OUT")" "$(dirname "$OUT")/latest" 2>/dev/null || true
{ echo "date: $(date -Is)"; echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (dirty)')"
  echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"; echo "redis: $(redis-server --version | cut -d' ' -f1-3)"
  echo "rounds: $ROUNDS quick: $QUICK bg_rate: $BG_RATE"; } > "$OUT/env.txt"

# 4. Micro-benchmarks first, before any server runs.
if [ "$MICRO" = 1 ]; then
  echo "== codec and ring micro-benchmarks (criterion)"
  crit=()
  [ "$QUICK" = 1 ] && crit=(--warm-up-time 0.2 --measurement-time 0.5 --sample-size 10)
  nice -n 10 cargo bench -q --no-default-features --bench codec -- "${crit[@]}" 2>&1 \
    | grep -E '^[a-z0-9]+/[0-9A-Za-z]+ +time:' | tee "$OUT/criterion.txt"
  cp -r target/criterion "$OUT/criterion"
fi

# Servers: A and B run the module (a pair over tcp), P is the same redis-server
# without it, M and R are a plain REPLICAOF pair, F has only the empty
# notification callback (examples/notify_floor.rs).
PA=$((BASE + 1)) PB=$((BASE + 2)) PP=$((BASE + 3)) PM=$((BASE + 4)) PR=$((BASE + 5)) PF=$((BASE + 6))
PC=$((BASE + 7)) PD=$((BASE + 8))
LA=$((BASE + 11)) LB=$((BASE + 12)) LC=$((BASE + 13)) LD=$((BASE + 14))
PERSIST=(--appendonly no)
[ "$AOF" = 1 ] && PERSIST=(--appendonly yes --appendfsync everysec)
W=$(mktemp -d /tmp/rdmasync-bench.XXXXXX)
cleanup() {
  for p in $PA $PB $PP $PM $PR $PF $PC $PD; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  cp "$W"/*.log "$OUT/" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
for p in $PA $PB $PP $PM $PR $PF; do
  if redis-cli -p "$p" ping >/dev/null 2>&1; then echo "bench: port $p is taken (set BENCH_PORT)" >&2; exit 1; fi
done
srv() { local port=$1; shift; mkdir -p "$W/$port"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$W/$port" --save '' "${PERSIST[@]}" \
    --daemonize yes --pidfile "$W/$port.pid" --logfile "$W/$port.log" "$@"; }
read -r -a MODULE_EXTRA <<< "${BENCH_MODULE_ARGS:-}"
read -r -a BEFORE_EXTRA <<< "${BENCH_BEFORE_ARGS:-}"
srv $PA --loadmodule "$SO" peer=127.0.0.1 port=$LB listen-port=$LA transport=tcp "${MODULE_EXTRA[@]}"
srv $PB --loadmodule "$SO" peer=127.0.0.1 port=$LA listen-port=$LB transport=tcp "${MODULE_EXTRA[@]}"
srv $PP
srv $PM
srv $PR --replicaof 127.0.0.1 $PM
srv $PF --loadmodule "$FLOOR"
if [ -n "$BEFORE" ]; then
  srv $PC --loadmodule "$BEFORE" peer=127.0.0.1 port=$LD listen-port=$LC transport=tcp "${BEFORE_EXTRA[@]}"
  srv $PD --loadmodule "$BEFORE" peer=127.0.0.1 port=$LC listen-port=$LD transport=tcp "${BEFORE_EXTRA[@]}"
fi
pid() { cat "$W/$1.pid"; }
st() { redis-cli -p "$1" rdmasync.status | paste - - | awk -v f="$2" '$1 == f { print $2 }'; }
for _ in $(seq 100); do [ "$(st $PA link 2>/dev/null)" = up ] && break; sleep 0.1; done
[ "$(st $PA link)" = up ] || { echo "bench: the module pair did not connect" >&2; exit 1; }
if [ -n "$BEFORE" ]; then
  for _ in $(seq 100); do [ "$(st $PC link 2>/dev/null)" = up ] && break; sleep 0.1; done
  [ "$(st $PC link)" = up ] || { echo "bench: the --before pair did not connect" >&2; exit 1; }
fi
for _ in $(seq 100); do redis-cli -p $PR info replication | grep -q 'master_link_status:up' && break; sleep 0.1; done

# Waits until B has applied everything A sent (so no run pays for the last one's backlog).
quiet() { # [written port, peer port] of a module pair (default A, B)
  local s q a w=${1:-$PA} r=${2:-$PB}
  for _ in $(seq 1200); do
    s=$(st $w entries_sent) q=$(st $w queue_depth) a=$(st $r entries_applied)
    [ "$q" = 0 ] && [ "$a" -ge "$s" ] && { sleep 0.2; return 0; }
    sleep 0.1
  done
  echo "bench: warning: B still behind A after 120 s" >&2
}
flush() { for p in "$@"; do redis-cli -p "$p" flushall >/dev/null; redis-cli -p "$p" function flush >/dev/null; done; quiet; }

if [ "$WRITE_ONLY" = 0 ]; then
# 5a. Idle CPU: every server at rest, the module pair connected. Time on CPU in
# ns from /proc/<pid>/task/*/schedstat (a tick-free count), per process and per thread.
echo "== idle CPU (${IDLE_SECS} s)"
sleep 1
cpu_ns() { # pid -> "thread-name ns" per thread
  for t in /proc/"$1"/task/*; do printf '%s %s\n' "$(cat "$t/comm")" "$(cut -d' ' -f1 "$t/schedstat")"; done 2>/dev/null; }
for p in $PA $PB $PP $PM $PR; do cpu_ns "$(pid "$p")" > "$W/cpu0.$p"; done
sleep "$IDLE_SECS"
: > "$OUT/idle.txt"
for p in $PA $PB $PP $PM $PR; do
  case $p in "$PA") n=module-A ;; "$PB") n=module-B ;; "$PP") n=plain ;; "$PM") n=replicaof-master ;; "$PR") n=replicaof-replica ;; esac
  cpu_ns "$(pid "$p")" > "$W/cpu1.$p"
  # Same threads in the same order at rest; pct = ns on CPU / window.
  paste "$W/cpu0.$p" "$W/cpu1.$p" | awk -v n="$n" -v s="$IDLE_SECS" '
    { d = $4 - $2; tot += d; if ($1 ~ /rdmasync/) th[$1] += d }
    END { printf "%s %.3f\n", n, tot / s / 1e7; for (t in th) printf "thread %s:%s %.3f\n", n, t, th[t] / s / 1e7 }' >> "$OUT/idle.txt"
done
cat "$OUT/idle.txt"
fi

# 1. Write-path overhead, module node and plain node alternating.
echo "== write-path overhead (redis-benchmark, 50 clients, $ROUNDS rounds)"
echo "test,pipeline,round,server,rps" > "$OUT/overhead.csv"
# CPU cost per request: on-CPU ns of every thread of the written server and of
# its peer (B, or the REPLICAOF replica) over the run (and, for the module, until
# B has applied it all), divided by the requests redis-benchmark sent.
echo "test,pipeline,round,server,requests,server_ns,peer_ns,server_main_ns,peer_main_ns" > "$OUT/cpu.csv"
proc_ns() { # port -> on-CPU ns of all its threads (0 for no port)
  [ -n "${1:-}" ] || { echo 0; return; }
  cat /proc/"$(pid "$1")"/task/*/schedstat 2>/dev/null | awk '{ t += $1 } END { printf "%.0f\n", t }'; }
main_ns() { # port -> on-CPU ns of its main thread (the one whose id is the pid; 0 for no port)
  [ -n "${1:-}" ] || { echo 0; return; }
  local p; p=$(pid "$1"); cut -d' ' -f1 /proc/"$p"/task/"$p"/schedstat 2>/dev/null || echo 0; }
requests() { # test pipeline
  local n=$N1; [ "$2" = 16 ] && n=$N16
  # hset and lpush grow ONE key by n elements (a whole-key copy per shipment
  # for the module): a fifth of the requests keeps the run short.
  case $1 in hset|lpush|hset-big|sadd-big|zadd-big|function-load) n=$((n / 5)) ;; esac
  echo "$n"
}
prefill() { # test port [peer port of a module pair]: the key the *-big tests write to
  local add
  case $1 in
    hset-big) add="redis.call('HSET', KEYS[1], 'f:' .. string.format('%012d', i - 1), 'v')" ;;
    sadd-big) add="redis.call('SADD', KEYS[1], 'm:' .. string.format('%012d', i - 1))" ;;
    zadd-big) add="redis.call('ZADD', KEYS[1], i, 'm:' .. string.format('%012d', i - 1))" ;;
    *) return 0 ;;
  esac
  redis-cli -p "$2" eval "for i = 1, 1000000 do $add end" 1 big >/dev/null
  if [ -n "${3:-}" ]; then quiet "$2" "$3"; else sleep 2; fi
}
bench_one() { # port test pipeline
  local n; n=$(requests "$2" "$3")
  local args=(-t "$2")
  case $2 in
    hset-keys) args=(hset "h:__rand_int__" "f:__rand_int__" v) ;;
    lpush-keys) args=(lpush "l:__rand_int__" v) ;;
    incr) args=(incr counter) ;;
    hincrby) args=(hincrby hot f 1) ;;
    hset-big) args=(-r 1000000 hset big "f:__rand_int__" v) ;;
    sadd-big) args=(-r 1000000 sadd big "n:__rand_int__") ;;
    sadd-keys) args=(sadd "s:__rand_int__" "m:__rand_int__") ;;
    zadd-big) args=(-r 1000000 zadd big __rand_int__ "m:__rand_int__") ;;
    function-load) scripts/function-loads.py "$1" "$n"; return ;;
  esac
  redis-benchmark -p "$1" -c 50 -n "$n" -P "$3" -r 100000 --csv "${args[@]}" | tail -1 | awk -F'"' '{ print $4 }'
}
for r in $(seq "$ROUNDS"); do
  for pl in $PIPELINES; do
    for t in $TESTS; do
      order=(module plain floor replicaof); [ $((r % 2)) = 0 ] && order=(replicaof floor plain module)
      [ -n "$BEFORE" ] && { [ $((r % 2)) = 1 ] && order=(module-before "${order[@]}") || order+=(module-before); }
      for who in "${order[@]}"; do
        flush $PA $PP $PM $PF
        [ -n "$BEFORE" ] && { redis-cli -p $PC flushall >/dev/null; redis-cli -p $PC function flush >/dev/null; quiet $PC $PD; }
        case $who in
          module) port=$PA peer=$PB ;; plain) port=$PP peer= ;; floor) port=$PF peer= ;;
          replicaof) port=$PM peer=$PR ;; module-before) port=$PC peer=$PD ;;
        esac
        case $who in module|module-before) prefill "$t" $port "$peer" ;; *) prefill "$t" $port ;; esac
        s0=$(proc_ns $port) q0=$(proc_ns "$peer") sm0=$(main_ns $port) qm0=$(main_ns "$peer")
        rps=$(bench_one $port $t $pl)
        [ "$who" = module ] && quiet
        [ "$who" = module-before ] && quiet $PC $PD
        s1=$(proc_ns $port) q1=$(proc_ns "$peer") sm1=$(main_ns $port) qm1=$(main_ns "$peer")
        echo "$t,$pl,$r,$who,$rps" | tee -a "$OUT/overhead.csv"
        echo "$t,$pl,$r,$who,$(requests $t $pl),$((s1 - s0)),$((q1 - q0)),$((sm1 - sm0)),$((qm1 - qm0))" >> "$OUT/cpu.csv"
      done
    done
  done
done
flush $PA $PP $PM $PF

if [ "$WRITE_ONLY" = 0 ] || [ "$LAG_TOO" = 1 ]; then
# 2. Replication lag, module pair and REPLICAOF pair alternating (and the
# module-before pair, with --before).
echo "== replication lag ($PROBES probes at 1000/s; loaded: $BG_RATE bg writes/s)"
for r in $(seq "$ROUNDS"); do
  for load in light bg; do
    order=(module replicaof); [ $((r % 2)) = 0 ] && order=(replicaof module)
    [ -n "$BEFORE" ] && { [ $((r % 2)) = 1 ] && order=(module-before "${order[@]}") || order+=(module-before); }
    for who in "${order[@]}"; do
      w=$PM rd=$PR; [ "$who" = module ] && w=$PA rd=$PB
      [ "$who" = module-before ] && w=$PC rd=$PD
      if [ "$who" = module-before ]; then quiet $PC $PD; else quiet; fi
      bg=0; [ $load = bg ] && bg=$BG_RATE
      "$LAG" lag --write $w --read $rd --rate 1000 --count "$PROBES" --bg-rate "$bg" \
        --label "$who-$load-r$r" --out "$OUT/lag/$who-$load-r$r.txt" | tee -a "$OUT/lag.txt"
    done
  done
done
flush $PA $PM $PP
[ -n "$BEFORE" ] && redis-cli -p $PC flushall >/dev/null
fi

if [ "$WRITE_ONLY" = 0 ]; then
# 3. Saturation: plain node flat out, module node flat out then lower until B keeps up.
echo "== saturation (pipelined SET, 4 clients x 32; ${SAT_SECS} s per step)"
: > "$OUT/saturation.txt"
for r in $(seq "$ROUNDS"); do
  for size in 64 4096; do
    keys=100000; [ $size = 4096 ] && keys=10000
    order=(module plain); [ $((r % 2)) = 0 ] && order=(plain module)
    for who in "${order[@]}"; do
      flush $PA $PP
      if [ "$who" = module ]; then
        "$LAG" saturate --write $PA --peer $PB --value-size $size --keys $keys --seconds "$SAT_SECS" \
          --label "module-$size-r$r" --timeline "$OUT/sat/module-$size-r$r.dat"
      else
        "$LAG" saturate --write $PP --value-size $size --keys $keys --seconds "$SAT_SECS" --steps 1 \
          --label "plain-$size-r$r"
      fi | tee -a "$OUT/saturation.txt"
    done
  done
done

# 5b. Memory per replicated key: N distinct 64 B keys on A (and so on B) and on P.
echo "== memory per key ($MEM_KEYS keys of 64 B)"
flush $PA $PP
mem() { redis-cli -p "$1" info memory | awk -F: '/^used_memory:/ { print $2 + 0 }'; }
a0=$(mem $PA) b0=$(mem $PB) p0=$(mem $PP)
"$LAG" fill --port $PA --count "$MEM_KEYS" --value-size 64
"$LAG" fill --port $PP --count "$MEM_KEYS" --value-size 64
quiet
sleep 1
echo "$MEM_KEYS $a0 $(mem $PA) $b0 $(mem $PB) $p0 $(mem $PP) $(redis-cli -p $PB dbsize)" | tee "$OUT/memory.txt"

redis-cli -p $PA rdmasync.status | paste - - > "$OUT/status-A.txt"
redis-cli -p $PB rdmasync.status | paste - - > "$OUT/status-B.txt"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"
[ "$AOF" = 1 ] && echo "persistence: appendonly yes, appendfsync everysec" >> "$OUT/env.txt"
[ -n "$BEFORE" ] && echo "module-before: $BEFORE" >> "$OUT/env.txt"

# 6. Over rdma in the Soft-RoCE guest.
if [ "$RDMA" = 1 ]; then
  echo "== rdma vs tcp in the Soft-RoCE guest"
  scripts/softroce-vm.sh --check >/dev/null || scripts/install-deps.sh --softroce
  mkdir -p "$OUT/guest"
  scripts/softroce-vm.sh -t 1200 -m 2048 -- scripts/bench-in-guest.sh "$OUT/guest" "$QUICK" \
    || echo "bench: the guest run failed (exit $?); see $OUT/guest" >&2
fi

python3 scripts/bench-report.py "$OUT"
