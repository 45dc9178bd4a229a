#!/usr/bin/env bash
# Runs the server's own test suite (the tests/ of Debian's source package of
# the installed redis-server, scripts/fetch-server-tests.sh) against node A
# of a linked pair and its type files against node B as well, three files
# at a time, then each file where the module's run failed a test against a
# plain server, to tell the server's own failures from the module's
# (scripts/server-suite.sh's jobs below). After every test the other node
# must hold the same data (tests/server-suite/peer-check.tcl: DEBUG DIGEST
# and the DUMP of every stream).
#
#   scripts/server-suite.sh [--server SERVER] [--so PATH] [--no-b-pass] [unit ...]
#
# --server: redis-server or valkey-server (the installed one, its tests
# from Debian's source package), or the path of a server built from source
# by scripts/build-servers.sh (.../src/redis-server or .../src/valkey-server:
# its own tree's tests/). Default redis-server.
# --no-b-pass: the type files against node A only.
#
# Tests that assert the exact replication stream are skipped on both
# (tests/server-suite/replication-stream-tests.py says why).
# Fails when a test that passes on the plain server fails with the module,
# or when the peer differs after a test, unless tests/server-suite/known.tsv
# names that test with its reason. tests/server-suite/skip.tsv lists tests
# that exercise a documented limitation; they are skipped on both servers.
# Results: target/server-suite/<server>/ (a log per file and run, summary.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SERVER=redis-server
SO=$ROOT/target/debug/librdmasync.so
UNITS=()
B_PASS=yes
while [ $# -gt 0 ]; do
  case $1 in
    --server) SERVER=$2; shift 2 ;;
    --so) SO=$2; shift 2 ;;
    --no-b-pass) B_PASS=no; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) echo "server-suite: unknown option $1" >&2; exit 2 ;;
    *) UNITS+=("$1"); shift ;;
  esac
done
case $SERVER in
  redis-server|valkey-server) PKG=${SERVER%-server} ;;
  */src/redis-server|*/src/valkey-server)
    [ -x "$SERVER" ] || { echo "server-suite: $SERVER is not a built server" >&2; exit 2; }
    SERVER=$(realpath "$SERVER")
    PKG=$(basename "$SERVER"); PKG=${PKG%-server}
    SRC=$(dirname "$(dirname "$SERVER")")
    [ -f "$SRC/tests/test_helper.tcl" ] || { echo "server-suite: no tests/ in $SRC" >&2; exit 2; } ;;
  *) echo "server-suite: --server is redis-server, valkey-server or a built .../src/<name>-server" >&2; exit 2 ;;
esac
[ -f "$SO" ] || { echo "server-suite: $SO missing (cargo build)" >&2; exit 2; }
[ -n "${SRC:-}" ] || SRC=$(scripts/fetch-server-tests.sh "$PKG")
# The server and version the known and skipped tests are matched against
# (tests/server-suite/known.tsv: "redis" holds for every Redis, "redis-8.0"
# for 8.0.x, "redis-8.0.6" for that release alone).
VERSION=$("$SERVER" --version | grep -o -E 'v=[0-9.]+' | cut -d= -f2)
LABEL=$PKG-$VERSION
echo "server-suite: $LABEL ($SERVER), tests from $SRC"
applies() { # entry: whether a known.tsv/skip.tsv server column holds for LABEL
  [ "$1" = any ] || [ "$1" = "$PKG" ] || [ "$1" = "$LABEL" ] || [[ $LABEL == "$1".* ]]
}
if [ ${#UNITS[@]} -eq 0 ]; then
  UNITS=(expire keyspace multi scripting functions bitops bitfield hyperloglog geo sort scan
    other dump introspection introspection-2 slowlog pubsub tracking info-command
    latency-monitor lazyfree)
  for f in "$SRC"/tests/unit/type/*.tcl; do UNITS=("type/$(basename "$f" .tcl)" "${UNITS[@]}"); done
fi

OUT=$ROOT/target/server-suite/$LABEL
rm -rf "$OUT" && mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/rdmasync-suite.XXXXXX)
cleanup() {
  # Under set -e a failed kill here (the server already stopped) would
  # become the script's exit status.
  local f
  for f in "$WORK"/*.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# The suite's own server configuration, minus what each server sets itself.
grep -v -E '^(#|$|port |pidfile |logfile |dir |daemonize |bind )' "$SRC/tests/assets/default.conf" > "$WORK/suite.conf"
# The framework with the peer check loaded after its support files.
sed "/^source tests\/support\/util.tcl/a source $ROOT/tests/server-suite/peer-check.tcl" \
  "$SRC/tests/test_helper.tcl" > "$SRC/tests/test_helper_rdmasync.tcl"
head -c 32 /dev/urandom | base64 > "$WORK/secret" && chmod 600 "$WORK/secret"

# Ports for our servers and links come from below the kernel's ephemeral
# range (ip_local_port_range starts at 32768): a port the kernel handed out
# as free could be taken as the local port of an outgoing connection before
# the server bound it (CI saw "Address already in use" on a link port).
# Each pass walks its own block (PORT_NEXT, set per pass) and skips a port
# something holds; the suite's own servers start at --baseport 21111,
# 23111 and 25111.
PORT_NEXT=27000
take_port() { # VAR: sets VAR to the pass's next free port
  local p
  while :; do
    p=$PORT_NEXT
    PORT_NEXT=$(( p + 1 < PORT_NEXT_END ? p + 1 : PORT_NEXT_START ))
    python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$p" \
      2>/dev/null && break
  done
  printf -v "$1" %s "$p"
}
port_block() { # start end: the block this pass takes its ports from
  PORT_NEXT_START=$1 PORT_NEXT_END=$2 PORT_NEXT=$1
}
port_block 27000 28800
# Each file runs on fresh servers, as the framework gives each file its own
# (against one server for all, a test that stops half-way leaves its
# settings to the next file: rdb-key-save-delay made later saves crawl).
start() { # name port [module args...]
  local name=$1 port=$2; shift 2
  rm -rf "${WORK:?}/$name" && mkdir -p "$WORK/$name"
  local args=()
  [ $# -gt 0 ] && args=(--loadmodule "$SO" "$@")
  "$SERVER" "$WORK/suite.conf" --port "$port" --bind 127.0.0.1 --dir "$WORK/$name" \
    --logfile "$WORK/$name/server.log" "${args[@]}" &
  echo $! > "$WORK/$name.pid"
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "server-suite: $name did not start"; tail -20 "$WORK/$name/server.log"; exit 1
}
stop() { # name port
  redis-cli -p "$2" shutdown nosave >/dev/null 2>&1 || true
  local pid; pid=$(cat "$WORK/$1.pid" 2>/dev/null) || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}
start_pair() { # [name-a name-b] (default a b); sets PA PB
  local na=${1:-a} nb=${2:-b}
  take_port PA; take_port PB
  local la lb; take_port la; take_port lb
  start "$na" "$PA" peer=127.0.0.1 port="$lb" listen-port="$la" bind=127.0.0.1 transport=tcp secret-file="$WORK/secret"
  start "$nb" "$PB" peer=127.0.0.1 port="$la" listen-port="$lb" bind=127.0.0.1 transport=tcp secret-file="$WORK/secret"
  for _ in $(seq 100); do
    [ "$(redis-cli -p "$PA" rdmasync.status | grep -A1 '^link$' | tail -1)" = up ] && return
    sleep 0.1
  done
  echo "server-suite: the pair did not link"; tail -20 "$WORK/$na/server.log"; exit 1
}

# Tests skipped on both servers: --skiptest patterns.
SKIP=()
while IFS=$'\t' read -r server file name reason; do
  applies "$server" || continue
  SKIP+=(--skiptest "$name")
done < <(grep -v '^#' tests/server-suite/skip.tsv | grep -v '^$')
# Tests that assert the exact replication stream, where rdmasync.stamps
# follows the data by design (docs/limitations.md): skipped on both servers.
python3 tests/server-suite/replication-stream-tests.py "$SRC" "${UNITS[@]}" > "$OUT/skipped.tsv"
while IFS=$'\t' read -r unit name; do SKIP+=(--skiptest "$name"); done < "$OUT/skipped.tsv"
echo "server-suite: $(wc -l < "$OUT/skipped.tsv") tests read the replication stream: skipped on both servers ($OUT/skipped.tsv)"

# Each worker's framework listens on its own ports (FRAMEWORK_BASE, set
# per worker); the retries after the workers use the first block.
FRAMEWORK_BASE=21111
run_file() { # target port peer-port unit
  local target=$1 port=$2 peer=$3 unit=$4
  local base=$FRAMEWORK_BASE
  local log=$OUT/$target/${unit//\//_}.log
  mkdir -p "$OUT/$target"
  local started=$SECONDS
  (cd "$SRC" && RDMASYNC_PEER_HOST=127.0.0.1 RDMASYNC_PEER_PORT=$peer \
    RDMASYNC_CHECK_LOG=$OUT/$target/peer-differences.tsv \
    timeout 900 tclsh8.6 tests/test_helper_rdmasync.tcl --host 127.0.0.1 --port "$port" \
      --single "unit/$unit" --timeout 300 --baseport "$base" "${SKIP[@]}" > "$log" 2>&1) || true
  echo "$unit $((SECONDS - started))" >> "$OUT/$target/seconds"
  for p in $port $peer; do
    redis-cli -p "$p" ping >/dev/null 2>&1 || {
      echo "server-suite: the server on port $p died during unit/$unit ($target)"
      mkdir -p "$OUT/died" && cp -r "$WORK"/* "$OUT/died/" 2>/dev/null
      for f in "$WORK"/*/server.log; do echo "== $f"; tail -n 40 "$f"; done
      exit 1; }
  done
}

# The jobs: every file against node A, the type files against node B as
# well, run by three workers at once, each on its own servers and ports
# (the suite's tests are written to run 16 at a time). The longest files
# go first, so that no worker is left with one at the end. The plain
# server then runs only the files where the module's run did not pass
# every test: a file whose every test passed with the module cannot show
# a test that passes only without it (stop 47's CI spent 1,063 s on
# Redis's suite with the plain server's pass beside the module's two).
WORKERS=3
LONGEST=" type/set type/zset type/list-3 hyperloglog scripting type/list-2 latency-monitor geo sort type/stream type/string "
queue_jobs() { # target...: writes QUEUE, the longest files first
  local ordered=() unit target
  for unit in $LONGEST; do [[ " ${UNITS[*]} " == *" $unit "* ]] && ordered+=("$unit"); done
  for unit in "${UNITS[@]}"; do [[ $LONGEST == *" $unit "* ]] || ordered+=("$unit"); done
  : > "$QUEUE"
  for unit in "${ordered[@]}"; do
    for target in "$@"; do
      [[ $target == b && ( $unit != type/* || $B_PASS == no ) ]] && continue
      echo "$target $unit" >> "$QUEUE"
    done
  done
}
next_job() { # prints the next job of QUEUE and takes it off; fails when none is left
  local job
  job=$(flock "$QUEUE.lock" sh -c 'head -n1 "$1" && sed -i 1d "$1"' _ "$QUEUE")
  [ -n "$job" ] && echo "$job"
}
run_job() { # worker target unit: the file on fresh servers
  local w=$1 target=$2 unit=$3
  case $target in
    plain) take_port PP; start "plain$w" "$PP"; run_file plain "$PP" "$PP" "$unit"; stop "plain$w" "$PP" ;;
    a) start_pair "a$w" "b$w"; echo "== unit/$unit (a)"; run_file a "$PA" "$PB" "$unit"; stop "a$w" "$PA"; stop "b$w" "$PB" ;;
    b) start_pair "a$w" "b$w"; echo "== unit/$unit (b)"; run_file b "$PB" "$PA" "$unit"; stop "a$w" "$PA"; stop "b$w" "$PB" ;;
  esac
}
run_workers() { # runs QUEUE's jobs on WORKERS workers; fails when one did
  local w pids=()
  # Each worker writes its exit status to a file: a CI run once saw bash
  # answer `wait PID` with "not a child of this shell" for a pass that
  # had ended, and report it failed.
  for w in $(seq "$WORKERS"); do
    rm -f "$OUT/worker$w.status"
    ( (port_block $((27000 + 1200 * w)) $((28200 + 1200 * w)); FRAMEWORK_BASE=$((19111 + 2000 * w))
      while job=$(next_job); do run_job "$w" $job; done); echo $? > "$OUT/worker$w.status") &
    pids+=($!)
  done
  for w in $(seq "$WORKERS"); do
    wait "${pids[$((w - 1))]}" 2>/dev/null || true
    local status=""
    for _ in $(seq 1800); do [ -s "$OUT/worker$w.status" ] && { status=$(cat "$OUT/worker$w.status"); break; }; sleep 1; done
    [ "$status" = 0 ] || { echo "server-suite: worker $w failed (${status:-no status})"; return 1; }
  done
}
QUEUE=$OUT/queue
queue_jobs a b
run_workers
: > "$QUEUE"
for unit in "${UNITS[@]}"; do
  for target in a b; do
    log=$OUT/$target/${unit//\//_}.log
    [ -f "$log" ] || continue
    grep -q 'All tests passed without errors' "$log" || { echo "plain $unit" >> "$QUEUE"; break; }
  done
done
echo "server-suite: the plain server runs the files where the module's run failed a test: $(cut -d' ' -f2 "$QUEUE" | tr '\n' ' ')"
run_workers

compare() { python3 tests/server-suite/compare.py "$LABEL" "$OUT" tests/server-suite/known.tsv "${UNITS[@]}"; }
if compare > "$OUT/first-compare.txt"; then
  cat "$OUT/first-compare.txt"
  exit 0
fi
# Each unit with an unexpected difference runs once more on fresh servers:
# what does not come back is reported as flaky.
echo "server-suite: running again: $(cut -f2 "$OUT/retry.tsv" | tr '\n' ' ')"
while IFS=$'\t' read -r target unit; do
  start_pair
  if [ "$target" = a ]; then run_file a-retry "$PA" "$PB" "$unit"; else run_file b-retry "$PB" "$PA" "$unit"; fi
  stop a "$PA"; stop b "$PB"
done < "$OUT/retry.tsv"
compare
