#!/usr/bin/env bash
# issue 19, for the next session with a device: 8 clients' single 4 KiB puts, 6 rounds of 3 s,
# "standby" = HEAD (RPC threads send their own batch when nobody waits behind them), "base" =
# HEAD with RPC threads that never wait a round trip (handlers.c wait_for_standbys:
# egm__journal_try(st->journal, 0)), against the same "off"; with the CPU of each process.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur V=$PWD/build-gpu/var
date -u; nproc
mkdir -p $OUT/ab
start=$(date +%s)
timeout 330 bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --baseline $V/bin/egmstore --what data \
    --workload single --sizes 4KiB --rounds 6 --clients 8 --seconds 3 --out /tmp/hc9 > $OUT/ab/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc9/summary.md /tmp/hc9/cpu.md $OUT/ab/ 2>/dev/null
(cd /tmp/hc9 && tar czf $OUT/ab/ha-cost-data.tar.gz --exclude etcd . )
cat $OUT/ab/summary.md $OUT/ab/cpu.md
python3 bench/meta/rpc_time.py /tmp/hc9 > $OUT/ab/rpc-time.md 2>&1; cat $OUT/ab/rpc-time.md
cp build-gpu/run9.sh $OUT/ab/device.sh
