#!/usr/bin/env bash
# issue 19, session 26, run 29 (the command given to the device, as run): 8 clients' single
# 1 MiB puts and batches of 256 x 64 KiB, "standby" = 2783425 (removal entries), "base" = 49c771a.
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/.devlibs PATH=$PWD/.devlibs:$PATH
B=$PWD/build-gpu/new V=$PWD/build-gpu/cur; o=/tmp/hc26C
timeout 250 bash bench/meta/ha_cost.sh --egmstore $B/bin/egmstore --baseline $V/bin/egmstore --what data \
    --workload single,batch --sizes 1MiB --rounds 3 --clients 8 --seconds 2 --no-on --out $o > $o.log 2>&1
