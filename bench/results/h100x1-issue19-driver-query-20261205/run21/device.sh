#!/usr/bin/env bash
# issue 19, for the next session with a device: the same 8 clients' single 4 KiB puts (HEAD), with
# the standby and etcd on CPUs 12-15 and everything else on 0-11 in every mode (ha_cost.sh
# --standby-cpus): the protocol's cost when the standby takes no CPU from the clients.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/cur
date -u; nproc
mkdir -p $OUT/pinned
start=$(date +%s)
timeout 300 bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --what data --standby-cpus 12-15 \
    --workload single --sizes 4KiB --rounds 5 --clients 8 --seconds 3 --out /tmp/hc10 > $OUT/pinned/data.log 2>&1
echo "ha_cost rc $? in $(( $(date +%s) - start )) s"
cp /tmp/hc10/summary.md /tmp/hc10/cpu.md $OUT/pinned/ 2>/dev/null
(cd /tmp/hc10 && tar czf $OUT/pinned/ha-cost-data.tar.gz --exclude etcd . )
cat $OUT/pinned/summary.md $OUT/pinned/cpu.md
python3 bench/meta/rpc_time.py /tmp/hc10 > $OUT/pinned/rpc-time.md 2>&1; cat $OUT/pinned/rpc-time.md
cp build-gpu/run10.sh $OUT/pinned/device.sh
