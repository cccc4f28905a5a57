"""Checks every PromQL expression of a Grafana dashboard against a real Prometheus.

    python3 prometheus_check.py --metrics-url URL [--metrics-url URL ...] \
        --dashboard deploy/grafana/otpmcp.json --workdir DIR [--redis]

Starts Prometheus (env PROMETHEUS, else `prometheus` on the PATH, else /usr/bin/prometheus)
on a free loopback port, scraping every URL each second, waits until every target is up and
scraped a few times, then runs each expression of the dashboard (Grafana's variables
replaced) as an instant query until it returns data or the deadline passes; a NaN sample
(histogram_quantile over zero rates) is data. Without --redis, expressions about Redis are
not checked. Prints the Prometheus version, then one line per expression in dashboard order
(`ok`, `EMPTY`, `ERROR`, `n/a`), and exits 1 if any failed. Standard library only; waits by
polling conditions, each stage (start, checks) bounded by its own deadline.
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

DEADLINE = 60  # seconds, per stage
POLL = 0.25
REDIS_ONLY = ("otpmcp_redis_", "otpmcp_leases_held")
VARIABLES = {"rate_interval": "1m", "interval": "1m", "range": "5m"}
VARIABLE = re.compile(r"\$(?:__(rate_interval|interval|range)\b|\{__(rate_interval|interval|range)\})")


def promql(expr):
    """The expression as Prometheus takes it: `$__rate_interval` (or `${__rate_interval}`) etc. replaced."""
    return VARIABLE.sub(lambda m: VARIABLES[m.group(1) or m.group(2)], expr)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expressions(node):
    """Every `expr` in the dashboard, in order, once each."""
    found = []

    def walk(n):
        if isinstance(n, dict):
            if isinstance(n.get("expr"), str) and n["expr"].strip():
                found.append(n["expr"])
            for v in n.values():
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)

    walk(node)
    return list(dict.fromkeys(found))


def query(base, expr):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as e:
        # Prometheus answers a bad query with 400 and a JSON error.
        try:
            body = json.loads(e.read() or b"{}")
        except ValueError:
            return "error", f"HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return "error", str(e)
    if body.get("status") != "success":
        return "error", body.get("error", "no status")
    return ("ok", "") if body["data"]["result"] else ("empty", "")


class Exited(Exception):
    """Prometheus stopped on its own."""


def wait_for(what, check, deadline, server):
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise Exited(f"prometheus exited ({server.returncode}) while waiting for {what}")
        if check():
            return
        time.sleep(POLL)
    raise TimeoutError(what)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--metrics-url", action="append", required=True)
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--redis", action="store_true")
    args = parser.parse_args()

    binary = os.environ.get("PROMETHEUS") or shutil.which("prometheus") or "/usr/bin/prometheus"
    try:
        version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"ERROR no prometheus ({binary}): {e}; scripts/test installs Debian's", flush=True)
        return 1
    print(((version.stdout or version.stderr).splitlines() or [f"{binary}: no version"])[0],
          flush=True)

    targets, paths = [], set()
    for url in args.metrics_url:
        parsed = urllib.parse.urlparse(url)
        targets.append(parsed.netloc)
        paths.add(parsed.path or "/metrics")
    if len(paths) != 1:
        sys.exit("every --metrics-url must have the same path")
    os.makedirs(args.workdir, exist_ok=True)
    config = os.path.join(args.workdir, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: otpmcp\n"
                f"    metrics_path: {paths.pop()}\n"
                f"    static_configs:\n      - targets: {json.dumps(targets)}\n")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = os.path.join(args.workdir, "prometheus.log")
    log = open(log_path, "w")
    # Quiet (warnings and errors only) and small (an hour kept, few queries at once).
    server = subprocess.Popen(
        [binary, f"--config.file={config}",
         f"--storage.tsdb.path={os.path.join(args.workdir, 'data')}",
         f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn", "--storage.tsdb.retention.time=1h",
         "--query.max-concurrency=4", "--web.max-connections=16"],
        stdout=log, stderr=subprocess.STDOUT)
    failed = True
    try:
        deadline = time.monotonic() + DEADLINE

        def all_up():
            try:
                with urllib.request.urlopen(base + "/api/v1/targets", timeout=5) as resp:
                    active = json.load(resp)["data"]["activeTargets"]
            except (urllib.error.URLError, OSError, ValueError, KeyError):
                return False
            return len(active) == len(targets) and all(t["health"] == "up" for t in active)

        wait_for("every target up", all_up, deadline, server)
        # rate() over 1m needs a few samples of every target.
        wait_for("five scrapes of every target",
                 lambda: query(base, "min(count_over_time(up[1m])) >= 5")[0] == "ok", deadline,
                 server)

        with open(args.dashboard) as f:
            dashboard = json.load(f)
        results = {}
        pending = []
        for expr in expressions(dashboard):
            if not args.redis and any(k in expr for k in REDIS_ONLY):
                results[expr] = ("n/a", "")
                continue
            results[expr] = ("empty", "not queried")
            pending.append(expr)
        if not pending:
            print("ERROR the dashboard has no expressions to check", flush=True)
            return 1
        # The servers are under load meanwhile: an expression empty now may fill later.
        deadline = time.monotonic() + DEADLINE
        while pending and time.monotonic() < deadline:
            if server.poll() is not None:
                raise Exited(f"prometheus exited ({server.returncode}) during the checks")
            still = []
            for expr in pending:
                results[expr] = query(base, promql(expr))
                if results[expr][0] != "ok":
                    still.append(expr)
            pending = still
            if pending:
                time.sleep(POLL * 4)
        for expr, (outcome, message) in results.items():
            line = {"ok": "ok", "empty": "EMPTY", "error": "ERROR", "n/a": "n/a"}[outcome]
            print(f"{line} {expr}" + (f": {message}" if message else ""), flush=True)
        failed = any(o in ("empty", "error") for o, _ in results.values())
    except TimeoutError as e:
        print(f"ERROR waiting for {e} ({DEADLINE} s)", flush=True)
    except Exited as e:
        print(f"ERROR {e}", flush=True)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        if failed:
            with open(log_path) as f:
                print("".join(f.readlines()[-20:]), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
