#!/usr/bin/env bash
# Runs inside the Soft-RoCE guest (see scripts/test-rdma.sh). Exit status: number of failed runs.
set -u
TOPO=${1:-single}
# The guest emulates its CPU (TCG): a smaller keyspace for the full-sync test.
# (20,000: stop 36's CI spent 199 s on the file with 50,000.)
export RDMASYNC_FULLSYNC_KEYS=${RDMASYNC_FULLSYNC_KEYS:-20000}
fails=0
# Suites that run on the host only (tests/<name>.rs), with why:
#  - hotkeys: when a hot key rests is decided on the main thread, the same
#    for every transport (its changes ship as any batch, which the rdma
#    passes cover); under emulation one read of its 40,000-field hash takes
#    0.3-1 s, so the file took 770 s a pass (CI, stop 22);
#  - faults: its link runs through TCP proxies the test owns (transport=tcp);
#  - durability and fidelity: what survives a restart or a reload, and what
#    a change of each kind carries, is decided on the main thread from the
#    versions and the keyspace, the same for every transport; what they
#    ship crosses the link as the batches, syncs, reconnects and restarts
#    of replication, fullsync and lifecycle, which run here over rdma
#    (stop 23's CI: 154 s and 67 s a pass in the guest);
#  - merges, set_merges, hash_merges, ttl_merges, list_merges,
#    rewrite_merges and function_merges (171 s for the first five in
#    the guest, stop 47): what a merge writes is decided on
#    the main thread from the states a batch carries, the same for every
#    transport; their states cross the link as the batches, catch-ups and
#    full syncs of replication, convergence and fullsync do here (stop
#    34's CI: 89, 111 and 113 s in the guest, while the host runs each
#    four times, once per server);
#  - big_values: which values a catch-up reads a slice at a time is decided
#    on the main thread, the same for every transport; the values cross the
#    link as any batch (20,000-element values read under emulation);
#    big_states likewise for the merge states a catch-up ships a slice at a
#    time (138 s in the guest, stop 47).
#  - architecture: reads the sources, starts no server.
#  - mixed: pairs of different servers (what crosses is decided by their
#    RDB formats, not by the transport).
#  - keys_at_rest: which catch-up a restart gets is decided on the main
#    thread from the versions loaded, the same for every transport; its
#    60,000 keys written and loaded from the AOF under emulation took 108
#    s, and the load outlasted the harness's 10 s wait for a restarted
#    node (stop 46's CI).
#  - functions: what a library change ships (its code, a delete, a flush)
#    is decided on the main thread from the function registry; it crosses
#    the link as any batch (65 and 52 s in the guest in stop 48's CI runs).
HOST_ONLY=" hotkeys faults durability fidelity merges set_merges hash_merges ttl_merges list_merges rewrite_merges function_merges big_values big_states architecture mixed keys_at_rest functions "
# The pair topology (one node per address, two rxe devices) runs the suites
# that set up, lose and restore links; the single one (rxe0) runs the others.
# Each suite runs over rdma once (stop 23's CI ran the pair suites in both
# topologies: 1,555 s of guests, past the hour with the rest).
PAIR_SUITES=" replication lifecycle liveness security operations link_progress "
run_suite() { # label, then env assignments
  local label=$1; shift
  for bin in $RDMASYNC_TEST_BINS; do
    local name; name=$(basename "$bin" | sed 's/-[0-9a-f]*$//')
    if [[ $HOST_ONLY == *" $name "* ]]; then
      echo "== [$label] $name: skipped (runs on the host: see HOST_ONLY in $0)"
      continue
    fi
    if [ "$TOPO" = pair ] && [[ $PAIR_SUITES != *" $name "* ]]; then
      echo "== [$label] $name: skipped (the single topology's rdma pass runs it)"
      continue
    fi
    if [ "$TOPO" = single ] && [[ $PAIR_SUITES == *" $name "* ]]; then
      echo "== [$label] $name: skipped (the pair topology's rdma pass runs it)"
      continue
    fi
    local t0; t0=$(date +%s.%N)
    echo "== [$label] $name"
    env "$@" RDMASYNC_TEST_HAS_RDMA=1 RDMASYNC_TEST_EMULATED=1 "$bin" --test-threads 1 --nocapture ${RDMASYNC_TEST_FILTER:+"$RDMASYNC_TEST_FILTER"} \
      >"/tmp/$name.$$.log" 2>&1
    local rc=$?
    # Results, panics with their message, and the figures the tests print.
    grep -E -A1 '^(test |test result|thread .* panicked)' "/tmp/$name.$$.log" | grep -v -E '^(--|stack backtrace:)$'
    grep -E '^(mixed workload|idle CPU|full sync of|hostile clients)' "/tmp/$name.$$.log" | cut -c1-400
    [ "$rc" = 0 ] || tail -60 "/tmp/$name.$$.log" | grep -E '<module>|<rdmasync>|# ' | tail -20
    echo "== [$label] $name: exit $rc in $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-6) s"
    [ "$rc" = 0 ] || fails=$((fails + 1))
  done
}
latency_floor() { # server-ip client-source-ip device-a device-b
  timeout 60 ib_write_lat -d "$3" -x 1 -n 1000 >/tmp/lat.srv 2>&1 & local sp=$!
  sleep 1
  timeout 45 ib_write_lat -d "$4" -x 1 -n 1000 "$1" 2>&1 | grep -E '^ *[0-9]+ +[0-9]+' | sed 's/^/ib_write_lat: /'
  wait $sp
  echo "(ib_write_lat columns: bytes iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% [usec])"
}
if [ "$TOPO" = single ]; then
  run_suite "rdma on $SOFTROCE_DEV" RDMASYNC_TEST_IP="$SOFTROCE_IP" RDMASYNC_TEST_TRANSPORT=rdma
  latency_floor "$SOFTROCE_IP" "$SOFTROCE_IP" "$SOFTROCE_DEV" "$SOFTROCE_DEV"
else
  run_suite "rdma across $SOFTROCE_DEV_A/$SOFTROCE_DEV_B" RDMASYNC_TEST_IP="$SOFTROCE_IP_A" \
    RDMASYNC_TEST_IP_B="$SOFTROCE_IP_B" RDMASYNC_TEST_TRANSPORT=rdma
  latency_floor "$SOFTROCE_IP_A" "$SOFTROCE_IP_B" "$SOFTROCE_DEV_A" "$SOFTROCE_DEV_B"
fi
echo "rdma-suite-in-guest ($TOPO): $fails failed run(s)"
exit "$fails"
