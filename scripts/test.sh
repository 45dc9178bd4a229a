#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: formatting, lints,
# unit and property tests, and the integration suite on real redis-server pairs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
# cargo test builds the rlib only; the integration tests load the cdylib.
cargo build
cargo nextest run --no-fail-fast
