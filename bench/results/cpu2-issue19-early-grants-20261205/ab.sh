#!/usr/bin/env bash
# A/B on the VM: rounds of base/cur x off/standby, 8 clients 1 MiB single puts
rounds=${1:-4} sizes=${2:-1MiB} clients=${3:-8}
for r in $(seq $rounds); do
  for v in base cur; do
    [ $v = base ] && egm=/tmp/base/build/bin/egmstore || egm=/work/main/build-dev/bin/egmstore
    for m in off standby; do
      line=$(/tmp/prof/run.sh $egm $m $sizes $clients 3 2>&1)
      ops=$(echo "$line" | grep -E "^single +put" | awk '{print $(NF-1)}')
      calls=$(echo "$line" | grep -E "^single +put" | awk '{print $10}')
      early=$(echo "$line" | grep grants_early | awk '{print $2}')
      grants=$(echo "$line" | grep "slab_grants_total" | awk '{print $2}')
      echo "round $r $v $m ops/s $ops calls $calls grants $grants early ${early:-0}"
    done
  done
done
