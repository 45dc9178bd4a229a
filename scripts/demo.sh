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
    --logfile "$WORK/$1/redis.log" --enable-debug-command local \
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
[ "$(redis-cli -p "$PA" DEBUG DIGEST)" = "$(redis-cli -p "$PB" DEBUG DIGEST)" ] ||
  fail "the digests differ"
say "demo OK: writes on either node are visible on the other"
