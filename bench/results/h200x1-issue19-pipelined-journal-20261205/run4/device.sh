#!/usr/bin/env bash
# issue 19, session 22: 8 clients' single 4 KiB puts only, 6 rounds of 3 s: the pipelined
# journal (e573de8, "standby") against d76c7dd ("base"), against the same "off".
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur O=$PWD/build-gpu/old
date -u
mkdir -p $OUT/single4k
start=$(date +%s)
timeout 330 bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --baseline $O/bin/egmstore --what data \
    --workload single --sizes 4KiB --rounds 6 --clients 8 --seconds 3 --out /tmp/hc4 > $OUT/single4k/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc4/summary.md $OUT/single4k/ 2>/dev/null
(cd /tmp/hc4 && tar czf $OUT/single4k/ha-cost-data.tar.gz --exclude etcd . )
cat $OUT/single4k/summary.md
python3 bench/meta/rpc_time.py /tmp/hc4 > $OUT/single4k/rpc-time.md 2>&1; cat $OUT/single4k/rpc-time.md
cp build-gpu/run7.sh $OUT/single4k/device.sh
