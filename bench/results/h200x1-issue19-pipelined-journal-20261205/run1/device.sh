#!/usr/bin/env bash
# issue 19, session 22: pipelined journal (build fe91ca0, "standby") against the build before
# it (d76c7dd, "base"), both against the same "off", on the H200 host.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur O=$PWD/build-gpu/old
date -u; nproc
mkdir -p $OUT/single
start=$(date +%s)
timeout 560 bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --baseline $O/bin/egmstore --what data \
    --workload single --sizes 4KiB,1MiB --rounds 4 --clients 8 --seconds 3 --out /tmp/hc > $OUT/single/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc/summary.md $OUT/single/ 2>/dev/null
(cd /tmp/hc && tar czf $OUT/single/ha-cost-data.tar.gz --exclude etcd . )
cat $OUT/single/summary.md
python3 bench/meta/rpc_time.py /tmp/hc > $OUT/single/rpc-time.md 2>&1; cat $OUT/single/rpc-time.md
cp build-gpu/run5.sh $OUT/single/device.sh
