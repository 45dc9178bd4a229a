#!/usr/bin/env bash
# Builds the newest Redis and Valkey that Debian unstable carries (Redis
# 8.0.x, Valkey 9.1.x) from their source packages' upstream tarballs, with
# their own build system, once: each lands under
# target/servers/<package>-<version>/ and later runs reuse it. /etc/apt
# stays as it is (a private apt configuration lists sid's sources).
#
#   scripts/build-servers.sh [redis|valkey]...   # default: both
#
# Prints the path of each server binary, one per line (build output goes
# to target/servers/<package>-<version>.log).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/target/servers
mkdir -p "$root"

d=$root/apt
mkdir -p "$d/parts" "$d/lists/partial" "$d/cache/archives/partial"
uri=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | grep -h -E '^(URIs:|deb )' | grep -v -- -security | grep -o -E 'https?://[^ ]*debian[^ ]*' | head -1 || true)
uri=${uri:-http://deb.debian.org/debian}
printf 'Types: deb-src\nURIs: %s\nSuites: sid\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  "$uri" > "$d/parts/sid.sources"
APT=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$d/parts"
  -o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o "Debug::NoLocking=1")
# sid moves: its list is read again once a day.
if [ -z "$(find "$d/updated" -mmin -1440 2>/dev/null)" ]; then
  apt-get "${APT[@]}" update -qq >&2
  touch "$d/updated"
fi

build() {
  local pkg=$1 bin=$2 version dir work
  version=$(apt-cache "${APT[@]}" showsrc "$pkg" | awk '/^Version:/ {print $2}' | sort -V | tail -1)
  [ -n "$version" ] || { echo "build-servers: no source of $pkg in sid" >&2; return 1; }
  version=${version#*:}
  version=${version%%-*}
  version=${version%%+*}
  dir=$root/$pkg-$version
  if [ ! -x "$dir/src/$bin" ]; then
    work=$root/download-$pkg
    rm -rf "$work" && mkdir -p "$work"
    (cd "$work" && apt-get "${APT[@]}" source --download-only -q "$pkg" >&2)
    tar -C "$work" -xf "$work"/"${pkg}"_*.orig.tar.*
    rm -rf "$dir"
    mv "$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -1)" "$dir"
    rm -rf "$work"
    echo "build-servers: building $pkg $version (log: $dir.log)" >&2
    make -C "$dir" -j"$(nproc)" > "$dir.log" 2>&1 || {
      tail -20 "$dir.log" >&2
      return 1
    }
  fi
  echo "$dir/src/$bin"
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(redis valkey)
for p in "${want[@]}"; do
  case $p in
    redis) build redis redis-server ;;
    valkey) build valkey valkey-server ;;
    *) echo "build-servers: unknown package $p (redis or valkey)" >&2; exit 2 ;;
  esac
done
