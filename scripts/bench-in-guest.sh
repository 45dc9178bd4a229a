#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest (scripts/bench.sh --rdma starts it through
# scripts/softroce-vm.sh): a module pair over transport=rdma and one over tcp,
# both on $SOFTROCE_IP, plus a plain REPLICAOF pair; replication lag (light
# load) and saturation (64 B) interleaved round by round; then ib_write_lat and
# ib_write_bw on the same rxe device. Raw results go to OUT; bench-report.py
# tabulates them. Soft-RoCE is emulated (and the guest itself may be
# emulated too): only ratios within this guest mean anything.
# Usage: scripts/bench-in-guest.sh OUT [quick: 0|1]
set -uo pipefail
OUT=$1 QUICK=${2:-0}
SO=$(pwd)/target/release/librdmasync.so LAG=$(pwd)/target/release/examples/lagbench
IP=${SOFTROCE_IP:?run me through scripts/softroce-vm.sh} DEV=${SOFTROCE_DEV:-rxe0}
ROUNDS=2 PROBES=1000 RATE=200 SECS=3
[ "$QUICK" = 1 ] && ROUNDS=1 PROBES=200 SECS=2
mkdir -p "$OUT/lag" "$OUT/sat"
W=$(mktemp -d /tmp/rdmasync-guest-bench.XXXXXX)
# rdma pair: 26501/26502, tcp pair: 26503/26504, REPLICAOF: 26505 -> 26506.
PORTS="26501 26502 26503 26504 26505 26506"
cleanup() {
  for p in $PORTS; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  cp "$W"/*.log "$OUT/" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
srv() { local port=$1; shift; mkdir -p "$W/$port"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$W/$port" --save '' --appendonly no \
    --daemonize yes --logfile "$W/$port.log" "$@"; }
mod() { echo --loadmodule "$SO" peer="$IP" port="$2" listen-port="$1" bind="$IP" transport="$3"; }
# shellcheck disable=SC2046
{
  srv 26501 $(mod 26511 26512 rdma)
  srv 26502 $(mod 26512 26511 rdma)
  srv 26503 $(mod 26513 26514 tcp)
  srv 26504 $(mod 26514 26513 tcp)
}
srv 26505
srv 26506 --replicaof 127.0.0.1 26505
st() { redis-cli -p "$1" rdmasync.status | paste - - | awk -v f="$2" '$1 == f { print $2 }'; }
for p in 26501 26503; do
  for _ in $(seq 300); do [ "$(st $p link 2>/dev/null)" = up ] && break; sleep 0.1; done
  echo "pair on $p: link $(st $p link), transport $(st $p transport) $(st $p device)" | tee -a "$OUT/pairs.txt"
done

: > "$OUT/lag.txt"
: > "$OUT/saturation.txt"
for r in $(seq "$ROUNDS"); do
  order=(rdma tcp replicaof); [ $((r % 2)) = 0 ] && order=(replicaof tcp rdma)
  for who in "${order[@]}"; do
    case $who in rdma) w=26501 rd=26502 ;; tcp) w=26503 rd=26504 ;; replicaof) w=26505 rd=26506 ;; esac
    timeout 120 "$LAG" lag --write "$w" --read "$rd" --rate $RATE --count $PROBES \
      --label "$who-light-r$r" --out "$OUT/lag/$who-light-r$r.txt" | tee -a "$OUT/lag.txt"
  done
  for who in "${order[@]}"; do
    case $who in rdma) w=26501 rd=26502 ;; tcp) w=26503 rd=26504 ;; replicaof) continue ;; esac
    redis-cli -p "$w" flushall >/dev/null
    timeout 300 "$LAG" saturate --write "$w" --peer "$rd" --value-size 64 --keys 20000 --seconds $SECS \
      --steps 3 --label "$who-64-r$r" --timeline "$OUT/sat/$who-64-r$r.dat" | tee -a "$OUT/saturation.txt"
  done
done

# The same device, verbs only: latency and bandwidth floors for 64 B and 4 KiB writes.
perf() { # tool size
  timeout 120 "$1" -d "$DEV" -x 1 -s "$2" -n 2000 >"$W/perf.srv" 2>&1 & local sp=$!
  sleep 1
  timeout 100 "$1" -d "$DEV" -x 1 -s "$2" -n 2000 "$IP" 2>&1 | grep -E '^ *[0-9]+ +[0-9]+' | sed "s/^/$1 /"
  wait $sp
}
: > "$OUT/perftest.txt"
for s in 64 4096; do
  perf ib_write_lat $s | tee -a "$OUT/perftest.txt"
  perf ib_write_bw $s | tee -a "$OUT/perftest.txt"
done
echo "(ib_write_lat: bytes iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% [usec];" \
  "ib_write_bw: bytes iterations BW_peak BW_average[MB/s] MsgRate[Mpps])" >> "$OUT/perftest.txt"
