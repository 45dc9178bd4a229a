#!/usr/bin/env bash
# Installs what building and testing rdmasync needs on Debian 12, only what is missing.
# Usage: scripts/install-deps.sh [--softroce | --bench]   (--softroce adds the QEMU/Soft-RoCE
# guest packages; --bench adds gnuplot for scripts/bench.sh's plot)
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
PKGS="redis-server redis-tools make gcc libc6-dev libclang-dev pkg-config libibverbs-dev librdmacm-dev python3 bc tcl dpkg-dev curl xz-utils"
[ "${1:-}" = "--bench" ] && PKGS="$PKGS gnuplot-nox"
missing=()
for p in $PKGS; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Valkey 8 (bookworm-backports) for the second server the suite runs against,
# through a private apt configuration: /etc/apt stays as it is.
if ! command -v valkey-server >/dev/null; then
  d=/tmp/rdmasync-apt-bpo
  mkdir -p "$d/parts" "$d/lists/partial"
  cp /etc/apt/sources.list.d/*.sources "$d/parts/" 2>/dev/null || true
  [ -s /etc/apt/sources.list ] && cp /etc/apt/sources.list "$d/parts/main.list"
  # (no /etc/apt/sources.list on some images: grep's status 2 must not end the script)
  uri=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
    | grep -h -E '^(URIs:|deb )' | grep -v -- -security | grep -o -E 'https?://[^ ]+' | head -1 || true)
  uri=${uri:-http://deb.debian.org/debian}
  printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$uri" > "$d/parts/bpo.sources"
  o=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$d/parts" -o "Dir::State::Lists=$d/lists")
  echo "install-deps: apt-get install valkey-server (bookworm-backports)"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get "${o[@]}" update -qq
  $SUDO apt-get "${o[@]}" install -y -q --no-install-recommends \
    valkey-server/bookworm-backports valkey-tools/bookworm-backports
fi
# The Soft-RoCE guest (QEMU, Debian's kernel with rdma_rxe, rdma-core, perftest);
# the runner knows how to pair qemu with a backported qemu-utils.
if [ "${1:-}" = "--softroce" ]; then
  scripts/softroce-vm.sh --check >/dev/null 2>&1 || $SUDO scripts/softroce-vm.sh --install-deps
fi
# A redis-server started by the package would hold port 6379; the demo and tests use their own.
if ! command -v cargo >/dev/null; then
  echo "install-deps: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "install-deps: cargo install cargo-nextest"
  cargo install cargo-nextest --locked
fi
