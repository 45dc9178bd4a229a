#!/usr/bin/env bash
# Main-thread stalls with big values (issue 26, point 3): the longest a
# client waits for PING on node A and on node B while
#   1. a 10,000,000-field hash made on A before the link comes up travels
#      in the first full sync, then one HSET of one field changes it;
#   2. a 512 MiB string made on A the same way travels, then one APPEND of
#      one byte changes it.
# A client on each node sends PING after PING (one at a time) and keeps the
# longest round trip of each phase. Release build, loopback, TCP. Not part
# of the test suite; see docs/benchmarks.md "Big values".
#
# Usage: scripts/stall.sh [--fields N] [--string-mb M]   (STALL_SO=<.so>: skip the build;
#        STALL_MODULE_ARGS="merge-elements=yes ...": more module arguments)
set -euo pipefail
cd "$(dirname "$0")/.."

FIELDS=10000000 STRING_MB=512
while [ $# -gt 0 ]; do
  case $1 in
    --fields) FIELDS=$2; shift 2 ;;
    --string-mb) STRING_MB=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "stall: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

# STALL_SO: a module already built (no cargo build then).
if [ -n "${STALL_SO:-}" ]; then
  SO=$(realpath "$STALL_SO")
else
  cargo build --release --quiet
  SO=$PWD/target/release/librdmasync.so
fi
BASE=${STALL_PORT:-26600}
PA=$((BASE + 1)) PB=$((BASE + 2)) LA=$((BASE + 3)) LB=$((BASE + 4))
DIR=$(mktemp -d)
trap 'redis-cli -p $PA shutdown nosave >/dev/null 2>&1 || true; redis-cli -p $PB shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT

start() { # port listen peer-port
  mkdir -p "$DIR/$1"
  redis-server --port "$1" --dir "$DIR/$1" --save '' --appendonly no \
    --enable-debug-command yes --proto-max-bulk-len 1gb --daemonize yes \
    --logfile "$DIR/$1/log" --loadmodule "$SO" peer=127.0.0.1 port="$3" \
    listen-port="$2" bind=127.0.0.1 transport=tcp persist-versions=no ${STALL_MODULE_ARGS:-} >/dev/null
  until redis-cli -p "$1" ping >/dev/null 2>&1; do sleep 0.05; done
}

# PING after PING on a port until the file STOP exists; prints the longest
# round trip in ms per phase (a phase begins when the file PHASE changes).
monitor() { # port out
  python3 - "$1" "$2" "$DIR" <<'EOF'
import os, socket, sys, time
port, out, d = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = socket.create_connection(("127.0.0.1", port))
longest, phase = {}, ""
while not os.path.exists(f"{d}/STOP"):
    try:
        phase = open(f"{d}/PHASE").read().strip()
    except OSError:
        pass
    t = time.perf_counter()
    s.sendall(b"PING\r\n")
    s.recv(64)
    ms = (time.perf_counter() - t) * 1000
    longest[phase] = max(longest.get(phase, 0.0), ms)
    time.sleep(0.001)
with open(out, "w") as f:
    for k, v in longest.items():
        f.write(f"{k} {v:.1f}\n")
EOF
}

phase() { echo "$1" > "$DIR/PHASE"; }
wait_for() { # what command...
  local what=$1; shift
  local t0=$SECONDS
  until [ "$("$@" 2>/dev/null)" = "$what" ]; do
    sleep 0.1
    if [ $((SECONDS - t0)) -gt 600 ]; then echo "stall: timed out waiting for $*" >&2; exit 1; fi
  done
}

echo "== starting A (peer not up yet) and filling it"
start "$PA" "$LA" "$LB"
phase fill
redis-cli -p "$PA" eval "for i=1,tonumber(ARGV[1]) do redis.call('HSET', KEYS[1], i, i) end" 1 h "$FIELDS" >/dev/null
redis-cli -p "$PA" setrange s $((STRING_MB * 1024 * 1024 - 1)) x >/dev/null
echo "   A holds h ($FIELDS fields) and s ($STRING_MB MiB)"

monitor "$PA" "$DIR/a.txt" & MA=$!
phase sync
start "$PB" "$LB" "$LA"
monitor "$PB" "$DIR/b.txt" & MB=$!
T0=$(date +%s.%N)
wait_for "$FIELDS" redis-cli -p "$PB" hlen h
wait_for "$((STRING_MB * 1024 * 1024))" redis-cli -p "$PB" strlen s
T1=$(date +%s.%N)
sleep 1

phase hset
redis-cli -p "$PA" hset h extra 1 >/dev/null
wait_for 1 redis-cli -p "$PB" hget h extra
sleep 1

phase append
redis-cli -p "$PA" append s y >/dev/null
wait_for "$((STRING_MB * 1024 * 1024 + 1))" redis-cli -p "$PB" strlen s
sleep 1
touch "$DIR/STOP"
wait "$MA" "$MB"

echo "== longest PING round trip (ms), full sync took $(awk "BEGIN{printf \"%.1f\", $T1 - $T0}") s"
printf "%-8s %10s %10s\n" phase "node A" "node B"
for p in sync hset append; do
  a=$(awk -v p=$p '$1 == p {print $2}' "$DIR/a.txt")
  b=$(awk -v p=$p '$1 == p {print $2}' "$DIR/b.txt")
  printf "%-8s %10s %10s\n" "$p" "${a:--}" "${b:--}"
done
for p in "$PA" "$PB"; do
  echo "-- commands run on port $p (calls, usec in all)"
  redis-cli -p "$p" info commandstats | grep -E "cmdstat_(restore|unlink|del|hset|set|append|dump)[:]" | cut -d, -f1-2
done
