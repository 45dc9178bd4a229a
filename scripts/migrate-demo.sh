#!/usr/bin/env bash
# A live migration from Redis to Valkey with the module, the steps of
# docs/operations.md ("Migrating from Redis to Valkey (or back) with no
# downtime"), checked at each step:
#   1. a Redis node holds data (every type, a stream, expiries) and takes
#      writes; a Valkey node with the module joins it and gets a full sync;
#   2. both take writes (clients moving over);
#   3. the Redis node stops; the Valkey node holds every key, equal to what
#      the Redis node held (a digest of every key's type, contents and
#      expiry, computed by the same script on both servers).
# Exits non-zero on any difference. Needs redis-server and valkey-server.
#
# Usage: scripts/migrate-demo.sh [--from redis-server] [--to valkey-server] [--so PATH]
set -euo pipefail
cd "$(dirname "$0")/.."

FROM=redis-server TO=valkey-server SO=""
while [ $# -gt 0 ]; do
  case $1 in
    --from) FROM=$2; shift 2 ;;
    --to) TO=$2; shift 2 ;;
    --so) SO=$(realpath "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "migrate-demo: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$SO" ]; then
  cargo build --quiet
  SO=$PWD/target/debug/librdmasync.so
fi
BASE=${MIGRATE_PORT:-27400}
PA=$((BASE + 1)) PB=$((BASE + 2)) LA=$((BASE + 3)) LB=$((BASE + 4))
DIR=$(mktemp -d)
trap 'redis-cli -p $PA shutdown nosave >/dev/null 2>&1 || true; redis-cli -p $PB shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT

start() { # server port listen peer-port
  if redis-cli -p "$2" ping >/dev/null 2>&1; then
    echo "migrate-demo: port $2 is taken (MIGRATE_PORT=<base> picks others)" >&2; exit 1
  fi
  mkdir -p "$DIR/$2"
  "$1" --port "$2" --dir "$DIR/$2" --save '' --appendonly yes --daemonize yes \
    --logfile "$DIR/$2/log" --loadmodule "$SO" peer=127.0.0.1 port="$4" \
    listen-port="$3" bind=127.0.0.1 transport=tcp >/dev/null
  local t0=$SECONDS
  until redis-cli -p "$2" ping >/dev/null 2>&1; do
    sleep 0.05
    if [ $((SECONDS - t0)) -gt 30 ]; then
      echo "migrate-demo: $1 did not start on port $2:" >&2; tail -20 "$DIR/$2/log" >&2; exit 1
    fi
  done
}
status() { redis-cli -p "$1" rdmasync.status | awk -v f="$2" 'prev == f {print; exit} {prev = $0}'; }
wait_for() { # what description command...
  local what=$1 desc=$2; shift 2
  local t0=$SECONDS
  until [ "$("$@" 2>/dev/null)" = "$what" ]; do
    sleep 0.1
    if [ $((SECONDS - t0)) -gt 60 ]; then echo "migrate-demo: FAILED waiting for $desc" >&2; exit 1; fi
  done
}
settled() { # port: its first sync sent, in step with nothing in flight
  [ "$(status "$1" full_syncs)" != 0 ] && [ "$(status "$1" sync_in_progress)" = 0 ] \
    && [ "$(status "$1" lag_entries)" = 0 ] && [ "$(status "$1" backlog)" = 0 ] && echo yes
}

# Every key's type, contents (sorted where the order is not the value's)
# and whether it expires, hashed: the same on two servers iff the data is.
DIGEST='
local keys = redis.call("KEYS", "*")
table.sort(keys)
local out = {}
for _, k in ipairs(keys) do
  local t = redis.call("TYPE", k)["ok"]
  local v
  if t == "string" then v = {redis.call("GET", k)}
  elseif t == "list" then v = redis.call("LRANGE", k, 0, -1)
  elseif t == "set" then v = redis.call("SMEMBERS", k); table.sort(v)
  elseif t == "zset" then v = redis.call("ZRANGE", k, 0, -1, "WITHSCORES")
    -- Scores as one text on both (servers print doubles differently).
    for i = 2, #v, 2 do v[i] = string.format("%.17g", tonumber(v[i])) end
  elseif t == "hash" then v = redis.call("HGETALL", k)
    local pairs_ = {}
    for i = 1, #v, 2 do pairs_[#pairs_ + 1] = v[i] .. "=" .. v[i + 1] end
    table.sort(pairs_); v = pairs_
  elseif t == "stream" then
    v = {}
    for _, e in ipairs(redis.call("XRANGE", k, "-", "+")) do
      v[#v + 1] = e[1] .. ":" .. table.concat(e[2], ",")
    end
  else v = {t} end
  out[#out + 1] = k .. "|" .. t .. "|" .. table.concat(v, ",") .. "|" .. tostring(redis.call("PTTL", k) > 0)
end
return {#keys, redis.sha1hex(table.concat(out, "\n"))}'
digest() { redis-cli -p "$1" eval "$DIGEST" 0 | tr '\n' ' '; }

WRITE='
local p, n = ARGV[1], tonumber(ARGV[2])
for i = 1, n do
  redis.call("SET", p .. ":s:" .. i, "v" .. i)
  redis.call("HSET", p .. ":h:" .. (i % 50), "f" .. i, i)
  redis.call("SADD", p .. ":set:" .. (i % 20), "m" .. i)
  redis.call("ZADD", p .. ":z:" .. (i % 20), i / 7, "m" .. i)
  redis.call("RPUSH", p .. ":l:" .. (i % 20), "e" .. i)
  if i % 10 == 0 then redis.call("SET", p .. ":ttl:" .. i, i, "EX", 3600) end
  if i % 100 == 0 and ARGV[3] ~= "no-streams" then redis.call("XADD", p .. ":stream", "*", "i", i) end
end
return n'

echo "== 1. $FROM holds data and takes writes; $TO joins with the module"
start "$FROM" "$PA" "$LA" "$LB"
redis-cli -p "$PA" eval "$WRITE" 0 old 2000 >/dev/null
start "$TO" "$PB" "$LB" "$LA"
wait_for up "the link" status "$PA" link
wait_for yes "the first sync" settled "$PA"
wait_for yes "the first sync (peer)" settled "$PB"
echo "   $(redis-cli -p "$PA" dbsize) keys on $FROM, $(redis-cli -p "$PB" dbsize) on $TO"

echo "== 2. clients on both nodes while they move (streams still on $FROM)"
# A stream written on the newer server does not go back to the older one
# (docs/operations.md): its writers move last.
redis-cli -p "$PA" eval "$WRITE" 0 via-old 500 >/dev/null &
redis-cli -p "$PB" eval "$WRITE" 0 via-new 500 no-streams >/dev/null &
wait
wait_for yes "the writes of both nodes" settled "$PA"
wait_for yes "the writes of both nodes (peer)" settled "$PB"
# A nonzero count names a key that could not cross (docs/operations.md).
refused_old=$(status "$PA" entries_refused) refused_new=$(status "$PB" entries_refused)
A=$(digest "$PA") B=$(digest "$PB")
echo "   $FROM: $A(refused $refused_old)  $TO: $B(refused $refused_new)"
if [ "$A" != "$B" ] || [ "$refused_old" != 0 ] || [ "$refused_new" != 0 ]; then
  echo "migrate-demo: FAILED: the nodes differ, or a node refused a change" >&2
  echo "   $FROM last_error: $(status "$PA" last_error)" >&2
  echo "   $TO last_error: $(status "$PB" last_error)" >&2
  exit 1
fi

echo "== 3. $FROM stops; $TO holds every key"
redis-cli -p "$PA" shutdown >/dev/null 2>&1 || true
link_gone() { [ "$(status "$PB" link)" != up ] && echo yes; }
wait_for yes "the link to go" link_gone
AFTER=$(digest "$PB")
if [ "$AFTER" != "$A" ]; then
  echo "migrate-demo: FAILED: $TO holds $AFTER, $FROM held $A" >&2
  exit 1
fi
echo "migrate-demo: PASS ($FROM -> $TO, ${A%% *} keys)"
