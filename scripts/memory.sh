#!/usr/bin/env bash
# Memory at rest per key (issue 27): N keys of mixed types written on node A
# of a linked pair (and so applied on B) and on a plain server, then, once
# the pair is idle and its merge metadata collected, used_memory of each
# node over the plain server's, per key. The keys, in turn: a 64 B string,
# a counter (INCRBY), a hash of 3 fields (HSET), a set of 3 members (SADD),
# a sorted set of 3 members (ZADD) and a list of 3 elements (RPUSH), each
# written by its own commands (the merged types through the element path).
# Not part of the test suite; prints one table.
#
# Usage: scripts/memory.sh [--keys N] [--so SO] [--server SERVER] [-- module args...]
#   --keys N      keys in all (default 1000000)
#   --so SO       the module (default target/release/librdmasync.so, built if missing)
#   --server S    the server binary (default redis-server)
#   module args   more module arguments for both nodes (e.g. merge-elements=no)
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS=1000000 SO=target/release/librdmasync.so SERVER=redis-server EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --keys) KEYS=$2; shift 2 ;;
    --so) SO=$2; shift 2 ;;
    --server) SERVER=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -f "$SO" ] || cargo build --release
SO=$(realpath "$SO")
PORT=${MEMORY_PORT:-26480}
PA=$((PORT + 1)) PB=$((PORT + 2)) PP=$((PORT + 3)) LA=$((PORT + 11)) LB=$((PORT + 12))
WORK=$(mktemp -d /tmp/rdmasync-memory.XXXXXX)
cleanup() {
  for p in $PA $PB $PP; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

start() { # name port [module args...]
  local name=$1 port=$2
  shift 2
  mkdir -p "$WORK/$name"
  "$SERVER" --port "$port" --bind 127.0.0.1 --dir "$WORK/$name" --save '' --daemonize yes \
    --logfile "$WORK/$name/log" "$@"
}
start a $PA --loadmodule "$SO" peer=127.0.0.1 port=$LB listen-port=$LA bind=127.0.0.1 \
  transport=tcp "${EXTRA[@]}"
start b $PB --loadmodule "$SO" peer=127.0.0.1 port=$LA listen-port=$LB bind=127.0.0.1 \
  transport=tcp "${EXTRA[@]}"
start p $PP
stat() { redis-cli -p "$1" rdmasync.status | awk -v f="$2" 'p { print; exit } $0 == f { p = 1 }'; }
mem() { redis-cli -p "$1" info memory | awk -F: '/^used_memory:/ { print $2 + 0 }'; }
wait_for() { # seconds, condition...
  local until=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -lt $until ] || { echo "timed out waiting for: $*" >&2; exit 1; }
    sleep 0.5
  done
}
linked() { [ "$(stat $PA link)" = up ] && [ "$(stat $PB link)" = up ]; }
wait_for 30 linked
a0=$(mem $PA) b0=$(mem $PB) p0=$(mem $PP)

# One script call writes keys [from, to): each key by the commands a
# client of its type would send.
FILL='
local from, to = tonumber(ARGV[1]), tonumber(ARGV[2])
local v = string.rep("v", 64)
for i = from, to - 1 do
  local k = "k:" .. i
  local t = i % 6
  if t == 0 then redis.call("SET", k, v)
  elseif t == 1 then redis.call("INCRBY", k, i)
  elseif t == 2 then redis.call("HSET", k, "name", "n" .. i, "city", "c" .. i, "n", i)
  elseif t == 3 then redis.call("SADD", k, "a" .. i, "b" .. i, "c" .. i)
  elseif t == 4 then redis.call("ZADD", k, 1, "a" .. i, 2, "b" .. i, 3, "c" .. i)
  else redis.call("RPUSH", k, "a" .. i, "b" .. i, "c" .. i) end
end
return to - from'
STEP=2000
for ((from = 0; from < KEYS; from += STEP)); do
  to=$((from + STEP > KEYS ? KEYS : from + STEP))
  for p in $PA $PP; do redis-cli -p "$p" eval "$FILL" 0 "$from" "$to" >/dev/null; done
done
applied() { [ "$(redis-cli -p $PB dbsize)" = "$KEYS" ]; }
wait_for 600 applied
at_rest() {
  for p in $PA $PB; do
    [ "$(stat "$p" merge_elements)" = 0 ] && [ "$(stat "$p" merge_counters)" = 0 ] &&
      [ "$(stat "$p" queue_depth)" = 0 ] || return 1
  done
}
wait_for 120 at_rest
sleep 2
a1=$(mem $PA) b1=$(mem $PB) p1=$(mem $PP)
per_key() { echo "scale=1; ($1 - $2) / $KEYS" | bc; }
echo "server: $("$SERVER" --version | cut -d' ' -f1-3); module args: ${EXTRA[*]:-(defaults)}"
echo "keys: $KEYS (strings, counters, hashes, sets, sorted sets, lists in turn)"
echo
echo "| node | used_memory growth | per key | per key over the plain server |"
echo "|---|---:|---:|---:|"
plain=$((p1 - p0))
for row in "plain:$p0:$p1" "A (written):$a0:$a1" "B (applied):$b0:$b1"; do
  IFS=: read -r name before after <<<"$row"
  grown=$((after - before))
  echo "| $name | $grown | $(per_key "$grown" 0) | $(per_key "$grown" "$plain") |"
done
echo
echo "versioned_keys on A: $(stat $PA versioned_keys), on B: $(stat $PB versioned_keys)"
