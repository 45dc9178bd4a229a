#!/usr/bin/env bash
# Write-path overhead: redis-benchmark SET against a node with the module and a
# live peer versus the same redis-server without the module, back to back,
# alternating ROUNDS times. Prints requests/s and the ratio (with/without).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3} N=${N:-200000} C=${C:-50} P=${P:-1}
cargo build --release -q
SO=$(pwd)/target/release/librdmasync.so
W=$(mktemp -d /tmp/rdmasync-bench.XXXXXX)
PA=6491 PB=6492 PP=6493
trap 'for p in $PA $PB $PP; do redis-cli -p $p shutdown nosave >/dev/null 2>&1 || true; done; rm -rf "$W"' EXIT
srv() { local port=$1; shift; mkdir -p "$W/$port"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$W/$port" --save '' --appendonly no --daemonize yes \
    --logfile "$W/$port.log" "$@"; }
srv $PA --loadmodule "$SO" peer=127.0.0.1 port=7592 listen-port=7591 transport=tcp
srv $PB --loadmodule "$SO" peer=127.0.0.1 port=7591 listen-port=7592 transport=tcp
srv $PP
for _ in $(seq 100); do redis-cli -p $PA rdmasync.status | grep -qx up && break; sleep 0.1; done
rps() { redis-benchmark -p "$1" -t set -c "$C" -n "$N" -P "$P" -r 100000 --csv | awk -F'"' '/^"SET"/{print $4}'; }
with=() without=()
for r in $(seq "$ROUNDS"); do
  redis-cli -p $PA flushall >/dev/null; redis-cli -p $PP flushall >/dev/null
  w=$(rps $PA); o=$(rps $PP); with+=("$w"); without+=("$o")
  echo "round $r: with module $w req/s, without $o req/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
mw=$(median "${with[@]}"); mo=$(median "${without[@]}")
echo "SET -c $C -n $N -P $P: median with module $mw req/s, without $mo req/s, ratio $(echo "scale=3; $mw/$mo" | bc)"
echo "peer B applied: $(redis-cli -p $PB rdmasync.status | grep -A1 -x entries_applied | tail -1) entries, A overflows: $(redis-cli -p $PA rdmasync.status | grep -A1 -x queue_overflows | tail -1)"
