"""Store a few objects through one side's MooncakeDistributedStore, then ask its master's
admin HTTP (Mooncake's /query_key, /batch_query_keys, /metrics/summary) and print what it
answered, as Python literals: [(label, path, status, body), ...].

  python tests/python/run_mooncake_admin.py mooncake|egmstore --master HOST:PORT --http PORT

test_mooncake_admin.py runs it in a child process per side, as test_mooncake_diff.py does,
so that Mooncake's process-wide state never meets egmstore's; the store stays set up (its
segment mounted) while the master is asked.
"""

import argparse
import os
import sys
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run_mooncake_sequence as runner  # noqa: E402

MIB = 1 << 20

# (key, size) stored first; then (label, path) asked.
OBJECTS = [("adm/a", 5), ("adm/b", 100000), ("adm c", 3)]
QUERIES = [
    ("query_key.present", "/query_key?key=adm/a"),
    ("query_key.present.other_param", "/query_key?foo=1&key=adm/b"),
    ("query_key.absent", "/query_key?key=adm/none"),
    ("query_key.no_param", "/query_key"),
    ("query_key.empty", "/query_key?key="),
    ("query_key.encoded", "/query_key?key=adm%20c"),
    ("batch.mixed", "/batch_query_keys?keys=adm/none,adm/b,adm/a"),
    ("batch.duplicates_and_empty", "/batch_query_keys?keys=adm/a,,adm/a"),
    ("batch.plus_is_space", "/batch_query_keys?keys=adm+c"),
    ("batch.percent", "/batch_query_keys?keys=adm%2Fa%2Cadm%20c"),
    ("batch.trailing_comma", "/batch_query_keys?keys=adm/a,"),
    ("batch.no_keys", "/batch_query_keys"),
    ("batch.empty", "/batch_query_keys?keys="),
    ("summary", "/metrics/summary"),
]


def ask(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("side", choices=["mooncake", "egmstore"])
    ap.add_argument("--master", required=True)
    ap.add_argument("--http", type=int, required=True, help="the master's admin HTTP port")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    store_cls, _ = runner.store_classes(args.side)
    store = store_cls()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MIB, 16 * MIB, "tcp", "", args.master)
    if rc != 0:
        sys.exit("setup answered %r" % rc)
    for key, size in OBJECTS:
        rc = store.put(key, bytes([0x5A]) * size)
        if rc != 0:
            sys.exit("put %r answered %r" % (key, rc))
    results = [(label, path) + ask(args.http, path) for label, path in QUERIES]
    with open(args.out, "w") as f:
        f.write("[\n" + "".join("    %r,\n" % (item,) for item in results) + "]\n")
    sys.stdout.flush()
    # Mooncake's client threads may hang at interpreter exit; the results are out.
    os._exit(0)


if __name__ == "__main__":
    main()
