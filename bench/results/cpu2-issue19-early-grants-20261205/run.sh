#!/usr/bin/env bash
# usage: run.sh EGM MODE(off|standby) SIZES CLIENTS SECONDS [WORKLOAD]
set -u
egm=$1 mode=$2 sizes=$3 clients=$4 secs=$5 wl=${6:-single}
out=/tmp/prof/out-$mode; rm -rf $out; mkdir -p $out
fp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cp=$(fp) pp=$(fp) mp=$(fp) sp=$(fp) hp=$(fp)
etcd --data-dir $out/etcd --listen-client-urls http://127.0.0.1:$cp --advertise-client-urls http://127.0.0.1:$cp \
  --listen-peer-urls http://127.0.0.1:$pp --initial-advertise-peer-urls http://127.0.0.1:$pp \
  --initial-cluster default=http://127.0.0.1:$pp --log-level error > $out/etcd.log 2>&1 &
epid=$!
sleep 1.5
extra=(--default-kv-lease-ttl 1000)
[ $mode != off ] && extra+=(--enable-ha true --etcd-endpoints 127.0.0.1:$cp --cluster-id c$RANDOM)
$egm master --port $mp --http-port $hp --listen-address 127.0.0.1 "${extra[@]}" > $out/master.log 2>&1 &
mpid=$!
for _ in $(seq 100); do $egm ls --master 127.0.0.1:$mp > /dev/null 2>&1 && break; sleep 0.1; done
spid=
if [ $mode = standby ]; then
  $egm master --port $sp --http-port -1 --listen-address 127.0.0.1 "${extra[@]}" > $out/standby.log 2>&1 &
  spid=$!
  for _ in $(seq 200); do curl -s http://127.0.0.1:$hp/health | grep -q '"standbys_in_sync":1' && break; sleep 0.1; done
fi
$egm provider --master 127.0.0.1:$mp --global-segment-size 2GiB --max-mr-size 1GiB --local-hostname 127.0.0.1 > $out/provider.log 2>&1 &
ppid=$!
for _ in $(seq 100); do grep -q "provider ready" $out/provider.log && break; sleep 0.1; done
$egm bench data --master 127.0.0.1:$mp --http-port $hp --default-kv-lease-ttl 1000 --workload $wl --sizes $sizes \
  --keys 256 --clients $clients --protocol shm --seconds $secs --no-ceiling --warm ${EXTRA:-} --out $out/r.json > $out/r.txt 2>&1
curl -s http://127.0.0.1:$hp/metrics | grep -E "^egm_master_(slab_grants_total|slab_grants_early_total|commits_total|ha_commits_described|evict|objects_evicted|slabs_expired)" > $out/metrics.txt
kill $ppid; wait $ppid 2>/dev/null
kill $mpid $spid; wait $mpid $spid 2>/dev/null
kill $epid; wait $epid 2>/dev/null
rm -rf $out/etcd
cat $out/r.txt | tail -15; cat $out/metrics.txt
