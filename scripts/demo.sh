#!/usr/bin/env bash
# The main job, end to end: install what is missing, build the module, start two
# redis-server nodes on loopback that replicate each other, write on one, read on
# the other, and show RDMASYNC.STATUS. Stops both nodes on exit.
#
# DEMO_SERVER=<path>: another server binary (valkey-server, a Redis 8 built
# by scripts/build-servers.sh...); DEMO_SO=<.so>: a module already built (no
# install, no build). CI runs it so on every server of the matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

SERVER=${DEMO_SERVER:-redis-server}
if [ -n "${DEMO_SO:-}" ]; then
  SO=$(realpath "$DEMO_SO")
else
  say "installing what is missing"
  scripts/install-deps.sh
  say "building target/release/librdmasync.so"
  cargo build --release
  SO=$ROOT/target/release/librdmasync.so
fi

WORK=$(mktemp -d /tmp/rdmasync-demo.XXXXXX)
PA=${DEMO_PORT_A:-6391} PB=${DEMO_PORT_B:-6392} LA=${DEMO_LINK_A:-7391} LB=${DEMO_LINK_B:-7392}
cleanup() {
  redis-cli -p "$PA" shutdown nosave >/dev/null 2>&1 || true
  redis-cli -p "$PB" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
# A shared secret both nodes read: the link authenticates each peer (HMAC).
head -c 32 /dev/urandom | base64 > "$WORK/secret" && chmod 600 "$WORK/secret"

start() { # name port listen-port peer-port
  mkdir -p "$WORK/$1"
  "$SERVER" --port "$2" --bind 127.0.0.1 --dir "$WORK/$1" --save '' --daemonize yes \
    --logfile "$WORK/$1/redis.log" --enable-debug-command yes \
    --loadmodule "$SO" peer=127.0.0.1 port="$4" listen-port="$3" bind=127.0.0.1 transport=tcp \
    secret-file="$WORK/secret"
}
say "starting node A (:$PA, link :$LA) and node B (:$PB, link :$LB): $("$SERVER" --version | cut -d' ' -f1-3)"
start a "$PA" "$LA" "$LB"
start b "$PB" "$LB" "$LA"
for _ in $(seq 100); do
  [ "$(redis-cli -p "$PA" rdmasync.status 2>/dev/null | grep -A1 '^link$' | tail -1)" = up ] && break
  sleep 0.1
done

# Waits (up to 10 s) until the node on port $1 has key $2 (EXISTS = $3).
wait_for() {
  for _ in $(seq 100); do
    [ "$(redis-cli -p "$1" EXISTS "$2")" = "$3" ] && return
    sleep 0.1
  done
}

say "writing on A, reading on B"
echo "A> SET greeting 'hello from A'";   redis-cli -p "$PA" SET greeting "hello from A"
echo "A> HSET user:1 name ada lang rust"; redis-cli -p "$PA" HSET user:1 name ada lang rust
echo "A> SET session abc EX 300";         redis-cli -p "$PA" SET session abc EX 300
wait_for "$PB" session 1
echo "B> GET greeting";           redis-cli -p "$PB" GET greeting
echo "B> HGETALL user:1";         redis-cli -p "$PB" HGETALL user:1
echo "B> TTL session";            redis-cli -p "$PB" TTL session

say "writing on B, reading on A"
echo "B> RPUSH queue job1 job2";  redis-cli -p "$PB" RPUSH queue job1 job2
wait_for "$PA" queue 1
echo "A> LRANGE queue 0 -1";      redis-cli -p "$PA" LRANGE queue 0 -1

say "both nodes change the same keys at once (a debug hook holds their sends, as a slow link would)"
for p in "$PA" "$PB"; do redis-cli -p "$p" RDMASYNC.DEBUG HOLD-SENDS ON >/dev/null; done
echo "A> HSET cart:7 apples 3";  redis-cli -p "$PA" HSET cart:7 apples 3
echo "B> HSET cart:7 pears 2";   redis-cli -p "$PB" HSET cart:7 pears 2
echo "A> INCRBY visits 5";       redis-cli -p "$PA" INCRBY visits 5
echo "B> INCRBY visits 7";       on_b=$(redis-cli -p "$PB" INCRBY visits 7); echo "$on_b"
echo "A> SADD tags red";         redis-cli -p "$PA" SADD tags red
echo "B> SADD tags blue";        redis-cli -p "$PB" SADD tags blue
for p in "$PA" "$PB"; do redis-cli -p "$p" RDMASYNC.DEBUG HOLD-SENDS OFF >/dev/null; done
for _ in $(seq 100); do
  [ "$(redis-cli -p "$PA" GET visits)" = 12 ] && [ "$(redis-cli -p "$PB" GET visits)" = 12 ] &&
    [ "$(redis-cli -p "$PA" SCARD tags)" = 2 ] && [ "$(redis-cli -p "$PB" SCARD tags)" = 2 ] && break
  sleep 0.1
done
echo "A> HGETALL cart:7 ($(redis-cli -p "$PA" HGETALL cart:7 | paste -sd' '))  GET visits ($(redis-cli -p "$PA" GET visits))"
echo "B> HGETALL cart:7 ($(redis-cli -p "$PB" HGETALL cart:7 | paste -sd' '))  GET visits ($(redis-cli -p "$PB" GET visits))"

say "both nodes hold the same data"
echo "A DEBUG DIGEST: $(redis-cli -p "$PA" DEBUG DIGEST 2>/dev/null || echo n/a)"
echo "B DEBUG DIGEST: $(redis-cli -p "$PB" DEBUG DIGEST 2>/dev/null || echo n/a)"

say "RDMASYNC.STATUS on A"
redis-cli -p "$PA" RDMASYNC.STATUS | paste - -
fail() { echo "demo FAILED: $*"; exit 1; }
B=$(redis-cli -p "$PB" GET greeting)
[ "$B" = "hello from A" ] || fail "B has greeting '$B'"
[ "$(redis-cli -p "$PB" HGET user:1 lang)" = rust ] || fail "B lacks user:1"
ttl=$(redis-cli -p "$PB" TTL session)
[ "$ttl" -gt 0 ] && [ "$ttl" -le 300 ] || fail "B's session TTL is $ttl"
[ "$(redis-cli -p "$PA" LRANGE queue 0 -1 | paste -sd,)" = job1,job2 ] || fail "A lacks queue"
[ "$on_b" = 7 ] || fail "B's INCRBY saw A's (the sends were not held): $on_b"
for p in "$PA" "$PB"; do
  [ "$(redis-cli -p "$p" GET visits)" = 12 ] || fail "visits on :$p is not 5 + 7"
  [ "$(redis-cli -p "$p" HGET cart:7 apples),$(redis-cli -p "$p" HGET cart:7 pears)" = 3,2 ] ||
    fail "cart:7 on :$p lost a field"
  [ "$(redis-cli -p "$p" SMEMBERS tags | sort | paste -sd,)" = blue,red ] || fail "tags on :$p lost a member"
done
[ "$(redis-cli -p "$PA" DEBUG DIGEST)" = "$(redis-cli -p "$PB" DEBUG DIGEST)" ] ||
  fail "the digests differ"
say "demo OK: writes on either node are visible on the other, and concurrent ones merge"
