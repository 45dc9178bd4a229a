#!/usr/bin/env bash
# Catch-up after a restart: a pair with appendonly yes (everysec), N keys
# written on A and applied on B, A's AOF rewritten (an RDB preamble, as a node
# has after a while), then A shut down and started again from its AOF. Measures
# how long A takes to load and how long the pair then takes to catch up
# (link up, both nodes' catch-up done, digests equal), with this build and,
# given --before SO, with an earlier build in the same run.
# Not part of the test suite (docs/benchmarks.md, "Durable convergence metadata").
#
# Usage: scripts/bench-restart.sh [--keys N] [--before SO] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS=1000000 BEFORE="" OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --keys) KEYS=$2; shift 2 ;;
    --before) BEFORE=$(realpath "$2"); shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-restart: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
BASE=${BENCH_PORT:-26400}
nice -n 10 cargo build --release -q
nice -n 10 cargo build --release -q --example lagbench
SO=$(pwd)/target/release/librdmasync.so LAG=$(pwd)/target/release/examples/lagbench
OUT=${OUT:-target/bench/restart-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/rdmasync-restart.XXXXXX)
PA=$((BASE + 21)) PB=$((BASE + 22)) LA=$((BASE + 23)) LB=$((BASE + 24))
cleanup() {
  for p in $PA $PB; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  cp "$W"/*.log "$OUT/" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

now_ms() { date +%s%3N; }
st() { redis-cli -p "$1" rdmasync.status | paste - - | awk -v f="$2" '$1 == f { print $2 }'; }
node() { # port listen peer-listen so label
  mkdir -p "$W/$1"
  redis-server --port "$1" --bind 127.0.0.1 --dir "$W/$1" --save '' \
    --appendonly yes --appendfsync everysec --daemonize yes --pidfile "$W/$1.pid" \
    --logfile "$W/$5-$1.log" --loadmodule "$4" peer=127.0.0.1 port="$3" listen-port="$2" transport=tcp
}
wait_for() { # seconds, then a command that succeeds when done
  local limit=$1; shift
  local until=$(( $(date +%s) + limit ))
  while ! "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$until" ] || return 1
    sleep 0.05
  done
}
linked() { [ "$(st $PA link)" = up ] && [ "$(st $PB link)" = up ]; }
caught_up() {
  linked && [ "$(st $PA sync_in_progress)" = 0 ] && [ "$(st $PB sync_in_progress)" = 0 ] \
    && [ "$(st $PA lag_entries)" = 0 ] && [ "$(st $PB lag_entries)" = 0 ] \
    && [ "$(redis-cli -p $PA debug digest)" = "$(redis-cli -p $PB debug digest)" ]
}
rewritten() { redis-cli -p $PA info persistence | grep -q 'aof_rewrite_in_progress:0'; }
b_has_all() { [ "$(redis-cli -p $PB dbsize)" = "$KEYS" ] && caught_up; }

run() { # so label
  local so=$1 label=$2
  node $PA $LA $LB "$so" "$label"
  node $PB $LB $LA "$so" "$label"
  wait_for 20 linked || { echo "bench-restart: $label did not link" >&2; return 1; }
  "$LAG" fill --port $PA --count "$KEYS" --value-size 64 >/dev/null
  wait_for 600 b_has_all || { echo "bench-restart: $label: B did not get every key" >&2; return 1; }
  redis-cli -p $PA bgrewriteaof >/dev/null
  sleep 0.5
  wait_for 300 rewritten
  local fa fb; fa=$(st $PA full_syncs) fb=$(st $PB full_syncs)
  redis-cli -p $PA shutdown >/dev/null 2>&1 || true
  wait_for 30 bash -c "! redis-cli -p $PA ping"
  local t0 t1 t2; t0=$(now_ms)
  node $PA $LA $LB "$so" "$label"
  wait_for 300 bash -c "redis-cli -p $PA ping | grep -q PONG"
  t1=$(now_ms)
  wait_for 900 caught_up || { echo "bench-restart: $label did not catch up" >&2; return 1; }
  t2=$(now_ms)
  echo "RESTART $label keys $KEYS load_ms $((t1 - t0)) catchup_ms $((t2 - t1))" \
    "A: catchup $(st $PA catchup) entries $(st $PA catchup_entries) full_syncs $(st $PA full_syncs)" \
    "since_syncs $(st $PA since_syncs) stamps_loaded $(st $PA stamps_loaded)" \
    "entries_applied $(st $PA entries_applied) entries_duplicate $(st $PA entries_duplicate);" \
    "B: catchup $(st $PB catchup) entries $(st $PB catchup_entries) full_syncs $(st $PB full_syncs)" \
    "(before the restart: A $fa, B $fb) since_syncs $(st $PB since_syncs)" \
    "entries_duplicate $(st $PB entries_duplicate)" | tee -a "$OUT/restart.txt"
  for p in $PA $PB; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  sleep 0.5
  rm -rf "${W:?}/$PA" "${W:?}/$PB"
}

[ -n "$BEFORE" ] && run "$BEFORE" before
run "$SO" after
