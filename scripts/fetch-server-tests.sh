#!/usr/bin/env bash
# Fetches the test suites of the installed redis-server and valkey-server:
# the `tests/` of Debian's source packages for exactly the installed
# versions, through a private apt configuration (/etc/apt stays as it is),
# unpacked once under target/server-tests/<package>-<version>/.
#
#   scripts/fetch-server-tests.sh [redis|valkey]...   # default: both
#
# Prints the unpacked source directory of each package, one per line.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/target/server-tests
mkdir -p "$root"

apt_config() {
  local d=$root/apt
  mkdir -p "$d/parts" "$d/lists/partial" "$d/cache/archives/partial"
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    grep -q 'debian' "$f" || continue
    sed 's/^Types: deb$/Types: deb-src/' "$f" > "$d/parts/$(basename "$f")"
  done
  if [ -s /etc/apt/sources.list ]; then
    grep -E '^deb ' /etc/apt/sources.list | grep debian | sed 's/^deb /deb-src /' > "$d/parts/main.list" || true
  fi
  local uri
  uri=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
    | grep -h -E '^(URIs:|deb )' | grep -v -- -security | grep -o -E 'https?://[^ ]*debian[^ ]*' | head -1 || true)
  uri=${uri:-http://deb.debian.org/debian}
  MIRROR=$uri
  printf 'Types: deb-src\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$uri" > "$d/parts/bpo.sources"
  APT_OPTS=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$d/parts"
    -o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o "Debug::NoLocking=1")
  if [ ! -f "$d/updated" ]; then
    apt-get "${APT_OPTS[@]}" update -qq >&2
    touch "$d/updated"
  fi
}

fetch() {
  local pkg=$1 bin=$2
  local version
  version=$(dpkg-query -W -f='${Version}' "$bin" 2>/dev/null) || {
    echo "fetch-server-tests: $bin is not installed (scripts/install-deps.sh)" >&2
    return 1
  }
  local upstream=${version#*:}
  upstream=${upstream%%-*}
  upstream=${upstream%%+*}
  local dir=$root/$pkg-$version
  if [ -x "$dir/runtest" ]; then echo "$dir"; return; fi
  [ -n "${APT_OPTS+x}" ] || apt_config
  local work=$root/download-$pkg
  rm -rf "$work" && mkdir -p "$work"
  if (cd "$work" && apt-get "${APT_OPTS[@]}" source --download-only -q "$pkg=$version" >&2); then
    (cd "$work" && dpkg-source --no-check -x ./*.dsc src >/dev/null)
    rm -rf "$dir"
    mv "$work/src" "$dir"
    rm -rf "$work"
    echo "$dir"
    return
  fi
  [ "$pkg" = valkey ] || return 1
  # The mirror has no source of Valkey 8.0.1 (bookworm-backports); the
  # nearest published suite is 8.1.1's (trixie): its tests of 8.1 features
  # fail on the plain 8.0 server as well, and the runner counts only what
  # differs from plain.
  local orig=valkey_8.1.1+dfsg1.orig.tar.xz
  local sum=d9bbd82eecb82f359e649a0007ad3dc1b47cc15afa626348ca86b73c4ae2c7ee
  dir=$root/valkey-8.1.1
  if [ ! -x "$dir/runtest" ]; then
    echo "fetch-server-tests: no source of valkey $version; taking the suite of valkey 8.1.1" >&2
    curl -fsS -o "$work/$orig" "$MIRROR/pool/main/v/valkey/$orig"
    echo "$sum  $work/$orig" | sha256sum -c --quiet
    tar -C "$work" -xf "$work/$orig"
    rm -rf "$dir"
    mv "$work/valkey-8.1.1" "$dir"
  fi
  rm -rf "$work"
  echo "$dir"
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(redis valkey)
for p in "${want[@]}"; do
  case $p in
    redis) fetch redis redis-server ;;
    valkey) fetch valkey valkey-server ;;
    *) echo "fetch-server-tests: unknown package $p (redis or valkey)" >&2; exit 2 ;;
  esac
done
