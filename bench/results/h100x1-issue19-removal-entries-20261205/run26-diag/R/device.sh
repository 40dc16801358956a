#!/usr/bin/env bash
# issue 19, session 26: where the standby's cost in 8 clients' single 4 KiB puts lies. "standby" =
# HEAD 49c771a (build-gpu/cur), "base" = a diagnostic build (never committed) of the same code:
# R: a Remove answered without waiting for the standbys (unsafe), C: a Commit journals nothing
# (unsafe), RC: both. 8 clients, 5 rounds of 3 s, without the mode "on".
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
date -u; nproc; nvidia-smi -L; which perf bpftrace 2>&1 | head -2
start=$(date +%s)
for v in R C RC; do
    left=$(( 560 - ($(date +%s) - start) ))
    [ $left -lt 100 ] && { echo "skip $v: $left s left"; continue; }
    o=/tmp/hc26-$v; t0=$(date +%s)
    timeout $((left-5)) bash bench/meta/ha_cost.sh --egmstore $PWD/build-gpu/cur/bin/egmstore --baseline $PWD/build-gpu/diag$v/bin/egmstore \
        --what data --workload single --sizes 4KiB --rounds 5 --clients 8 --seconds 3 --no-on --out $o > $o.log 2>&1
    echo "== $v: ha_cost rc $? in $(( $(date +%s) - t0 )) s"
    grep -E "^\| (op|single put)" $o/summary.md; cat $o/cpu.md
    python3 bench/meta/rpc_time.py $o > $o/rpc-time.md 2>&1; cat $o/rpc-time.md
    (python3 bench/meta/put_call_time.py $o; python3 bench/meta/put_call_time.py --mode base $o) > $o/put-call-time.txt 2>&1; cat $o/put-call-time.txt
    cp $o.log $o/data.log; cp build-gpu/run26.sh $o/device.sh
    (cd $o && tar czf $OUT/run26-$v.tar.gz --exclude etcd .)
done
