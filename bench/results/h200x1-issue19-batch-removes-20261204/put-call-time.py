# Per-client put-call throughput ratio (standby/off) from ha_cost.sh --what data JSON.
# Usage: python3 put-call-time.py DIR...  (each DIR holds data/ from a run's ha-cost-data.tar.gz)
import json, statistics, sys
for run in sys.argv[1:]:
    print("==", run)
    def load(m, r):
        d = json.load(open(f"{run}/data/meta-{m}-{r}.json"))
        return {(x["workload"], x["op"], x["bytes"], x["clients"]): x for x in d["results"]}
    rs = {m: [load(m, r) for r in (1, 2, 3)] for m in ("off", "standby")}
    for k in sorted(rs["off"][0]):
        if k[0] != "single" or k[1] != "put": continue
        busy = [(s[k]["calls"] / s[k]["client_seconds"]) / (o[k]["calls"] / o[k]["client_seconds"]) for s, o in zip(rs["standby"], rs["off"])]
        union = [s[k]["keys_s"] / o[k]["keys_s"] for s, o in zip(rs["standby"], rs["off"])]
        share = [s[k]["client_seconds"]/s[k]["wall_seconds"] for s in rs["standby"]]
        print(k, "union %.2f" % statistics.median(union), "per-client-busy %.2f (%.2f-%.2f)" % (statistics.median(busy), min(busy), max(busy)), "busy/wall standby %.2f" % statistics.median(share), "off %.2f" % statistics.median([o[k]["client_seconds"]/o[k]["wall_seconds"] for o in rs["off"]]))
