#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: formatting, lints,
# unit and property tests, the integration suite on real redis-server pairs
# over TCP, then the same suite inside a Soft-RoCE guest over tcp and rdma
# (scripts/test-rdma.sh). Any failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --softroce
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
# cargo test builds the rlib only; the integration tests load the cdylib.
cargo build
cargo nextest run --no-fail-fast
scripts/test-rdma.sh
