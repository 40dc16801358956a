#!/usr/bin/env python3
"""Check that a Grafana dashboard refers only to metrics egmstore emits.

  scripts/check-dashboard-metrics.py --egmstore build/bin/egmstore [deploy/grafana/egmstore.json ...]

Starts a real master (admin HTTP on a free port), a provider (its /metrics on a free port) and a
client in this process (the Python binding, `egmstore.Store`, on PYTHONPATH), puts and gets an
object, and scrapes the three: the master's /metrics, the provider's /metrics and the client's
Store.metrics(). Then every metric name the dashboards' PromQL refers to (panel targets' `expr`,
template variables' queries) must be among the scraped names: egm_master_* in the master's text,
egm_client_* in the provider's or the client's. A histogram `h` offers h_bucket, h_sum and
h_count (not `h`). A name of the old scheme (egmstore_*), an expression without any egm_ metric,
or an expression promtool cannot parse (each is checked as a recording rule by
`promtool check rules`, Grafana's $__rate_interval and $variables replaced) fails too; so does a
dashboard whose panels' ids repeat or whose queries do not use the ${datasource} variable.

So renaming a metric without updating the dashboard fails `make test` (ctest
deploy/grafana-dashboard). Exit status 0 when everything is found, 1 with a list of problems
otherwise. Metrics emitted but on no panel are listed, for information only.
"""

import argparse
import glob
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
START_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 10.0

NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
RANGE_VAR = re.compile(r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}")
VAR = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
LABEL_VALUES = re.compile(r"^\s*label_values\((.*)\)\s*$", re.S)


# ---- the dashboards' expressions -------------------------------------------

def dashboard_queries(doc):
    """(where, expression, is_promql) of every query in a dashboard."""
    out = []

    def walk(node, where):
        if isinstance(node, dict):
            title = node.get("title", where)
            if isinstance(node.get("expr"), str):
                out.append((title, node["expr"], True))
            for key, value in node.items():
                if key != "templating":
                    walk(value, title)
        elif isinstance(node, list):
            for item in node:
                walk(item, where)

    walk(doc.get("panels", []), doc.get("title", "?"))
    for var in doc.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        query = query or var.get("definition") or ""
        match = LABEL_VALUES.match(query)
        if match:  # label_values(metric{...}, label): Grafana's, not PromQL
            out.append(("variable $" + var["name"], match.group(1).rsplit(",", 1)[0], True))
        else:
            out.append(("variable $" + var["name"], query, True))
    return out


def metric_names(expr):
    """Names in expr that are egmstore metrics (egm_*) and ones of the old scheme (egmstore_*)."""
    text = STRING.sub('""', expr)  # label values are not names
    names = [n for n in NAME.findall(text) if n.startswith(("egm_", "egmstore_"))]
    return names


def promql_for_promtool(expr):
    expr = RANGE_VAR.sub("5m", expr)
    return VAR.sub("x", expr)


def structure_problems(path, doc):
    problems = []
    ids = []

    def walk(panels):
        for p in panels:
            ids.append(p.get("id"))
            for t in p.get("targets", []):
                ds = t.get("datasource") or p.get("datasource") or {}
                if ds.get("uid") != "${datasource}":
                    problems.append("%s: panel %r: a query's data source is %r, not the "
                                    "${datasource} variable" % (path, p.get("title"), ds))
            refs = [t.get("refId") for t in p.get("targets", [])]
            if len(refs) != len(set(refs)):
                problems.append("%s: panel %r: refIds repeat: %r" % (path, p.get("title"), refs))
            walk(p.get("panels", []))

    walk(doc.get("panels", []))
    dup = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    if dup:
        problems.append("%s: panel ids used more than once: %r" % (path, dup))
    names = [v.get("name") for v in doc.get("templating", {}).get("list", [])]
    if "datasource" not in names:
        problems.append("%s: no `datasource` template variable (queries name ${datasource})" % path)
    return problems


def promtool_problems(exprs, where):
    """Parse every expression with promtool (as recording rules); [] when all parse. where[i]
    says where exprs[i] comes from."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return ["promtool not found: the PromQL check needs it (Debian package prometheus; "
                "scripts/install-deps.sh installs it)"]
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(exprs):
        rules.append("      - record: dashboard:expr_%d" % i)
        rules.append("        expr: %s" % json.dumps(promql_for_promtool(expr)))
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("\n".join(rules) + "\n")
        path = f.name
    try:
        proc = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True,
                              timeout=60)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        bad = sorted({int(n) for n in re.findall(r"dashboard:expr_(\d+)", out)})
        return ["promtool cannot parse %s: %s" % (where[i], exprs[i]) for i in bad] or \
            ["promtool check rules refused the expressions:\n" + out]
    return []


# ---- what egmstore emits -----------------------------------------------------

class Daemon:
    """A child whose stdout is read until a line starting with `ready`, then into a log file."""

    def __init__(self, argv, ready, log_path):
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        self.lines = []
        self.partial = b""
        self.ready_line = self.wait_line(ready)

    def wait_line(self, prefix):
        """The first line starting with prefix (bounded wait)."""
        seen = 0
        deadline = time.monotonic() + START_TIMEOUT_S
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while True:
                for line in self.lines[seen:]:
                    if line.startswith(prefix):
                        return line
                seen = len(self.lines)
                if time.monotonic() >= deadline:
                    break
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                self.log.write(chunk)
                *done, self.partial = (self.partial + chunk).split(b"\n")
                self.lines += [line.decode(errors="replace") for line in done]
        finally:
            sel.close()
        raise RuntimeError("%s printed no line starting %r within %.0f s (log %s)"
                           % (self.proc.args, prefix, START_TIMEOUT_S, self.log.name))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.proc.stdout.close()
        self.log.close()


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=HTTP_TIMEOUT_S) as r:
        return r.read().decode()


def exposed_names(text):
    """Series names a Prometheus scrape of `text` gives."""
    types, samples = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            samples.add(NAME.match(line).group(0))
    names = set(samples)
    for name, kind in types.items():
        if kind == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
        elif kind == "summary":
            names |= {name, name + "_sum", name + "_count"}
        else:
            names.add(name)
    return names


def emitted(egmstore_bin, log_dir):
    """{"master": names, "provider": names, "client": names} from real processes."""
    import egmstore  # the build's binding (PYTHONPATH=<build>/python)

    daemons = []
    try:
        master = Daemon([egmstore_bin, "master", "--port", "0", "--listen-address", "127.0.0.1",
                         "--http-port", "0"], "egmstore master listening on ",
                        os.path.join(log_dir, "master.log"))
        daemons.append(master)
        addr = master.ready_line.rsplit(" ", 1)[1]
        http = int(master.wait_line("egmstore master admin http on ").rsplit(":", 1)[1])
        provider = Daemon([egmstore_bin, "provider", "--master", addr, "--global-segment-size",
                           "64MiB", "--local-hostname", "127.0.0.1", "--provider-http-port", "0"],
                          "egmstore provider ready", os.path.join(log_dir, "provider.log"))
        daemons.append(provider)
        match = re.search(r"\bhttp (\d+)", provider.ready_line)
        if match is None:
            raise RuntimeError("no http port in the provider's ready line %r" % provider.ready_line)
        provider_http = int(match.group(1))
        with egmstore.Store(master_server_addr=addr, protocol="tcp",
                            global_segment_size=0) as store:
            store.put("dashboard/check", b"x" * 100000)
            if store.get("dashboard/check") != b"x" * 100000:
                raise RuntimeError("the client read back other bytes")
            client_text = store.metrics()
        return {"master": exposed_names(scrape(http)),
                "provider": exposed_names(scrape(provider_http)),
                "client": exposed_names(client_text)}
    finally:
        for d in reversed(daemons):
            d.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dashboards", nargs="*",
                    help="dashboard JSON files (default: deploy/grafana/*.json)")
    ap.add_argument("--egmstore", required=True, help="the egmstore binary of the build")
    ap.add_argument("--log-dir", help="where the daemons' logs go (default: a temporary folder)")
    args = ap.parse_args()
    paths = args.dashboards or sorted(glob.glob(os.path.join(ROOT, "deploy", "grafana", "*.json")))
    if not paths:
        sys.exit("no dashboard given and none in deploy/grafana/")

    problems, queries = [], []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        problems += structure_problems(path, doc)
        queries += [(path, where, expr) for where, expr, _ in dashboard_queries(doc)]
    problems += promtool_problems([expr for _, _, expr in queries],
                                  ["%s: %s" % (path, where) for path, where, _ in queries])

    log_dir = args.log_dir or tempfile.mkdtemp(prefix="egm-dashboard-")
    os.makedirs(log_dir, exist_ok=True)
    names = emitted(args.egmstore, log_dir)
    client_names = names["provider"] | names["client"]
    used = set()
    for path, where, expr in queries:
        found = metric_names(expr)
        if not found:
            problems.append("%s: %s: refers to no egm_ metric: %s" % (path, where, expr))
        for name in found:
            used.add(name)
            if name.startswith("egmstore_"):
                problems.append("%s: %s: %s is a name of the old scheme (docs/metrics.md)"
                                % (path, where, name))
            elif name.startswith("egm_master_") and name not in names["master"]:
                problems.append("%s: %s: %s is not on the master's /metrics" % (path, where, name))
            elif name.startswith("egm_client_") and name not in client_names:
                problems.append("%s: %s: %s is on neither the provider's /metrics nor the "
                                "client's metrics()" % (path, where, name))
            elif not name.startswith(("egm_master_", "egm_client_")):
                problems.append("%s: %s: %s is neither egm_master_* nor egm_client_*"
                                % (path, where, name))
    emitted_all = names["master"] | client_names
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in emitted_all}
    used_families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    unused = sorted(f for f in families - used_families if f in emitted_all or
                    f + "_bucket" in emitted_all)
    print("checked %d queries of %s: %d metric names, against %d master, %d provider and %d "
          "client series names" % (len(queries), ", ".join(os.path.relpath(p) for p in paths),
                                   len(used), len(names["master"]), len(names["provider"]),
                                   len(names["client"])))
    if unused:
        print("note: emitted but on no panel: " + ", ".join(unused))
    if problems:
        print("\n".join(["FAIL:"] + ["  " + p for p in problems]))
        return 1
    print("OK: every metric the dashboards use is emitted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
