#!/bin/sh
# Base against head, interleaved: egm-master-mem (memory per object, both put paths) and
# egmstore bench meta (Commit and PutStart+PutEnd, 1024 keys per call), REPS rounds.
# usage: run.sh BASE_BUILD HEAD_BUILD OUT_DIR [REPS]
set -eu
base=$1 head=$2 out=$3 reps=${4:-4}
mkdir -p "$out"
for r in $(seq 1 "$reps"); do
    for side in base head; do
        b=$base; [ "$side" = head ] && b=$head
        "$b/bin/egm-master-mem" >> "$out/mem-$side.jsonl"
        "$b/bin/egm-master-mem" --commit 128 >> "$out/mem-commit-$side.jsonl"
        "$b/bin/egmstore" bench meta --clients 1,8 --batch 1024 --seconds 1 --http-port -1 \
            --log-level warn --out "$out/meta-$side-$r.json" > "$out/meta-$side-$r.txt" 2>&1
    done
done
