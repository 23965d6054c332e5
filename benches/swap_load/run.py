#!/usr/bin/env python3
"""Model updates under load (docs/registry.md): what a live swap costs the requests in flight.

    .venv/bin/python -m benches.swap_load.run [--duration 60] [--rate R] [--rss-swaps 600]
                                              [--write-readme]

A real Envoy (`--concurrency 2`) with the edgescore filter on reference-size models (300 trees
of depth 6 each, target/bench-models, `make bench-models`) answers every request itself (a
`direct_response` route: no upstream shares the CPU). `oha` (crates.io; installed under
target/tools on first use) sends an open-loop, constant-rate load — half of what this Envoy
answers closed-loop here, measured first — with coordinated-omission correction, and records
every request (start, corrected start, end, status) in SQLite, from which the percentiles and
the per-second p999 are computed. Three runs of `--duration` seconds each, after a 5 s warm-up:

  (a) steady     models from the registry, nothing published;
  (b) registry   a new version of `bot` published every second (`edgescore publish`,
                 alternating two artifacts of different trees); the poller (main thread) fetches
                 and checks it, each worker copies it in slices and swaps;
  (c) inline     the old path: the same two artifacts alternately inlined (base64) in the plugin
                 configuration of a listener pushed every second through file-based LDS.

Every request's score header goes to an access log, which shows that each request was scored
by a published version (runs a, b: `bot@N` for a manifest version N). Then, without load, the
publishing goes on until the workers have swapped `--rss-swaps` times: Envoy's RSS after that
against after 10 swaps. Output: a table, results.json, p999.png (p999 per second, swaps
marked) and, with --write-readme, the results section of README.md. Every process started is
stopped by PID.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
from demo import envoyctl, render_envoy  # noqa: E402
from demo.loopback import free_port  # noqa: E402
from demo.registry import RegistryServer  # noqa: E402

CLI = ROOT / "target" / "release" / "edgescore"
BENCH_MODELS = ROOT / "target" / "bench-models"
SCHEMA = ROOT / "models" / "example" / "schema.json"
OHA_VERSION = "1.16.0"
OHA = ROOT / "target" / "tools" / "bin" / "oha"
CONNECTIONS = 32
SWAPS = "wasmcustom.edgescore.registry.swaps"
WORKERS = 2
# The models every request runs, at thresholds above 1: all are scored, none answers locally.
NEVER = tuple(render_envoy.ModelPolicy(m.name, 1.5, "tag") for m in render_envoy.EXAMPLE_MODELS)


def cli(*args) -> str:
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"edgescore {args[0]}: {p.stderr.strip()}")
    return p.stdout


def ensure_oha() -> Path:
    if not OHA.is_file():
        print(f"installing oha {OHA_VERSION} into {OHA.parent.parent} (once) ...", flush=True)
        subprocess.run(["cargo", "install", "oha", "--version", OHA_VERSION, "--locked", "--root", str(OHA.parent.parent)],
                       check=True)
    return OHA


def artifacts(work: Path) -> dict[str, Path]:
    """The reference-size example models, and a second `bot` of other trees (the scanner's
    LightGBM model compiled under the name bot) to alternate with."""
    arts = {m.name: BENCH_MODELS / f"{m.name}.esm" for m in render_envoy.EXAMPLE_MODELS}
    missing = [p for p in arts.values() if not p.is_file()]
    if missing:
        raise SystemExit(f"missing {', '.join(map(str, missing))}: run `make bench-models`")
    arts["bot-alt"] = work / "bot-alt.esm"
    cli("compile", BENCH_MODELS / "scanner.txt", "--schema", SCHEMA, "--name", "bot", "--version", "alt", "-o", arts["bot-alt"])
    return arts


def base_config(port: int, access_log: Path) -> dict:
    cfg = render_envoy.load_config()
    cfg["admin"]["address"]["socket_address"]["port_value"] = 0
    cfg["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] = port
    hcm = render_envoy.hcm(cfg)
    hcm["route_config"]["virtual_hosts"][0]["routes"] = [
        {"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}}]
    # One line per request: the models that scored it (the score header the filter added).
    hcm["access_log"] = [{"name": "envoy.access_loggers.file", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
        "path": str(access_log), "log_format": {"text_format_source": {"inline_string": "%REQ(X-EDGESCORE)%\n"}}}}]
    return cfg


def inline_plugin(arts: dict[str, Path], bot: Path) -> dict:
    cfg = render_envoy.plugin_config("enforce", NEVER, text=False)
    for entry, m in zip(cfg["models"], NEVER):
        entry["artifact"] = base64.b64encode((bot if m.name == "bot" else arts[m.name]).read_bytes()).decode()
    return cfg


class Bench:
    def __init__(self, args, work: Path):
        self.args, self.work = args, work
        self.arts = artifacts(work)
        self.oha = ensure_oha()
        cli("keygen", "-o", work / "bench")
        self.registry = work / "registry"
        self.registry.mkdir()
        for m in render_envoy.EXAMPLE_MODELS:
            self.publish(self.arts[m.name])
        self.server = RegistryServer(self.registry)
        self.published: set[str] = set()
        self.flip = False

    def publish(self, artifact: Path) -> str:
        out = cli("publish", artifact, "--registry", self.registry, "--key", self.work / "bench.key").strip()
        return out

    def publish_next_bot(self) -> int:
        """Publishes the other bot artifact; its new version."""
        self.flip = not self.flip
        out = self.publish(self.arts["bot-alt" if self.flip else "bot"])
        version = int(out.split(" v", 1)[1].split(" ", 1)[0])
        self.published.add(f"bot@{version}")
        return version

    # Envoys

    def registry_envoy(self, name: str) -> envoyctl.Envoy:
        port = free_port()
        cfg = base_config(port, self.work / f"{name}.access.log")
        pub = json.loads((self.work / "bench.pub").read_text())
        plugin = render_envoy.plugin_config("enforce", NEVER, text=False, registry=render_envoy.registry_section(
            [pub], poll_seconds=1, max_artifact_bytes=64 << 20))
        render_envoy.set_plugin_config(cfg, plugin)
        render_envoy.add_registry(cfg, plugin, "127.0.0.1", self.server.port)
        e = envoyctl.Envoy(cfg, self.work / name, name=name, concurrency=WORKERS, log_level="warning")
        e.port = port
        e.start()
        deadline = time.monotonic() + 30
        while counter(e, SWAPS) < WORKERS + 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no models from the registry\n{e.log_tail()}")
            time.sleep(0.2)
        return e

    def inline_envoy(self, name: str) -> tuple[envoyctl.Envoy, callable]:
        port = free_port()
        lds_dir = self.work / f"{name}-lds"
        lds_dir.mkdir()
        lds = lds_dir / "lds.json"

        def push(bot: Path) -> None:
            cfg = base_config(port, self.work / f"{name}.access.log")
            render_envoy.set_plugin_config(cfg, inline_plugin(self.arts, bot))
            doc = {"resources": [{"@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
                                  **cfg["static_resources"]["listeners"][0]}]}
            tmp = lds_dir / "lds.json.tmp"
            tmp.write_text(json.dumps(doc))
            os.rename(tmp, lds)  # the watched directory reacts to a move

        push(self.arts["bot"])
        boot = base_config(port, self.work / f"{name}.access.log")
        boot["static_resources"].pop("listeners")
        boot["node"] = {"id": "swap-load", "cluster": "swap-load"}
        boot["dynamic_resources"] = {"lds_config": {"resource_api_version": "V3", "path_config_source": {
            "path": str(lds), "watched_directory": {"path": str(lds_dir)}}}}
        e = envoyctl.Envoy(boot, self.work / name, name=name, concurrency=WORKERS, log_level="warning")
        e.port = port
        e.start()
        return e, push

    # load

    def oha_run(self, port: int, db: Path, seconds: float, rate: float | None) -> dict:
        args = [str(self.oha), "--no-tui", "--output-format", "json", "-z", f"{seconds}s", "-c", str(CONNECTIONS),
                "-H", "user-agent: Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
                "-H", "accept: text/html,application/xhtml+xml", "-H", "accept-language: en-US,en;q=0.5"]
        if rate is not None:
            args += ["-q", str(rate), "--latency-correction", "--db-url", str(db)]
        args.append(f"http://127.0.0.1:{port}/products/shoes?color=blue")
        p = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 120)
        if p.returncode != 0:
            raise RuntimeError(f"oha failed: {p.stderr[-2000:]}")
        return json.loads(p.stdout)

    def capacity(self) -> float:
        e = self.registry_envoy("capacity")
        try:
            self.oha_run(e.port, self.work / "warm.db", 3, None)
            return self.oha_run(e.port, self.work / "cap.db", 10, None)["summary"]["requestsPerSec"]
        finally:
            e.stop()

    def measure(self, name: str, e: envoyctl.Envoy, rate: float, updates: str, during=None) -> dict:
        """Warm-up, then `duration` s of load while `during(stop, marks)` runs in a thread and
        another samples the counter `updates` (every 100 ms, in every run alike) to time when
        the updates took effect."""
        self.oha_run(e.port, self.work / f"{name}.warm.db", 5, rate)
        stop = threading.Event()
        marks: list[float] = []
        applied: list[float] = []

        def sample() -> None:
            last = counter(e, updates)
            while not stop.wait(0.1):
                now = counter(e, updates)
                if now > last:
                    applied.append(time.time())
                last = now

        threads = [threading.Thread(target=sample, daemon=True)]
        if during is not None:
            threads.append(threading.Thread(target=during, args=(stop, marks), daemon=True))
        db = self.work / f"{name}.db"
        t0 = time.time()
        for t in threads:
            t.start()
        summary = self.oha_run(e.port, db, self.args.duration, rate)
        stop.set()
        for t in threads:
            t.join(30)
        res = analyse(db)
        res["applied_s"] = [round(m - t0, 3) for m in applied]
        # Requests that got no response at all (oha records only answered ones in the db); the
        # ones oha itself cut off at the end of the run are not Envoy's doing.
        dist = summary.get("errorDistribution", {})
        res["error_kinds"] = dist
        res["errors"] = sum(n for kind, n in dist.items() if "deadline" not in kind)
        res["marks_s"] = [round(m - t0, 3) for m in marks]
        res["rss_kib"] = rss_kib(e)
        return res


def counter(e: envoyctl.Envoy, name: str) -> int:
    return e.stats(name.replace(".", r"\.") + "$").get(name, 0)


def rss_kib(e: envoyctl.Envoy) -> int:
    for line in Path(f"/proc/{e.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def analyse(db: Path) -> dict:
    """Percentiles over every request of the run, latency corrected for coordinated omission
    (end - the time the request was due), and the p999 of each second."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT start_latency_correction, start, end, status FROM oha").fetchall()
    con.close()
    if not rows:
        raise RuntimeError(f"{db}: no requests recorded")
    t0 = min(r[1] if r[0] is None else r[0] for r in rows)
    lat, per_second, non2xx = [], {}, 0
    for due, start, end, status in rows:
        begin = start if due is None else due
        ms = (end - begin) * 1000.0
        lat.append(ms)
        per_second.setdefault(int(begin - t0), []).append(ms)
        if not 200 <= status < 300:
            non2xx += 1
    lat.sort()

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    return {"requests": len(lat), "non2xx": non2xx, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
            "p999_ms": pct(lat, 0.999), "max_ms": lat[-1],
            "p999_per_second_ms": [pct(sorted(per_second[s]), 0.999) for s in sorted(per_second)]}


def scored_by(access_log: Path) -> dict[str, int]:
    """How many requests each `bot` id scored, from the access log."""
    out: dict[str, int] = {}
    for line in access_log.read_text().splitlines():
        bot = next((part.split("=", 1)[0] for part in line.split(";") if part.startswith("bot")), "none")
        out[bot] = out.get(bot, 0) + 1
    return out


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for key, label in (("a", "(a) steady"), ("b", "(b) registry: publish every second"), ("c", "(c) inline config via LDS every second")):
        ys = results[key]["p999_per_second_ms"]
        ax.plot(range(len(ys)), ys, label=label, lw=1.4)
    for i, m in enumerate(results["b"]["applied_s"]):
        ax.axvline(m, color="tab:orange", alpha=0.3, lw=0.8, label="(b) a swap (100 ms resolution)" if i == 0 else None)
    for i, m in enumerate(results["c"]["applied_s"]):
        ax.axvline(m, color="tab:green", alpha=0.3, lw=0.8, ls=":", label="(c) an LDS update applied" if i == 0 else None)
    ax.set_yscale("log")
    ax.set_xlabel("second of the run")
    ax.set_ylabel("p999 latency (ms, CO-corrected)")
    ax.set_title(f"edgescore: model updates under {results['rate']:.0f} req/s open-loop load (Envoy, 2 workers)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_readme(results: dict, cmd: str) -> None:
    readme = HERE / "README.md"
    rows = []
    for key, label in (("a", "(a) steady"), ("b", "(b) registry, publish every 1 s"), ("c", "(c) inline config (LDS) every 1 s")):
        r = results[key]
        rows.append(f"| {label} | {r['requests']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} | {r['max_ms']:.1f} | {r['non2xx']} | {r['errors']} |")
    a, b = results["a"], results["b"]
    section = "\n".join([
        "## Results", "",
        f"`{cmd}` on {results['machine']}, {results['date']}: {results['rate']:.0f} req/s open-loop "
        f"(half of the {results['capacity']:.0f} req/s measured closed-loop), {results['duration']} s per run, "
        f"{CONNECTIONS} connections, latencies corrected for coordinated omission.", "",
        "| run | requests | p50 ms | p99 ms | p999 ms | max ms | non-2xx | no response |", "|---|---|---|---|---|---|---|---|", *rows, "",
        f"- (b)/(a): p999 {b['p999_ms'] / a['p999_ms']:.2f}x, p99 {b['p99_ms'] / a['p99_ms']:.2f}x; "
        f"{len(b['marks_s'])} publishes during (b), {results['swaps_b']} swaps (each worker and Envoy's main-thread root context).",
        f"- Requests per scoring `bot` version in (b): {results['scored_by_b']} (published: every one is a manifest version).",
        f"- Envoy RSS after {results['rss']['swaps_first']} swaps {results['rss']['first_kib'] / 1024:.1f} MiB, after "
        f"{results['rss']['swaps_last']} swaps {results['rss']['last_kib'] / 1024:.1f} MiB: "
        f"{results['rss']['last_kib'] / results['rss']['first_kib']:.3f}x.",
        "", "![p999 per second](p999.png)", ""])
    text = readme.read_text() if readme.exists() else "# swap_load\n"
    head = text.split("## Results", 1)[0].rstrip() + "\n\n"
    readme.write_text(head + section)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=int, default=60)
    ap.add_argument("--rate", type=float, help="requests/s (default: half the measured capacity)")
    ap.add_argument("--rss-swaps", type=int, default=600)
    ap.add_argument("--write-readme", action="store_true")
    args = ap.parse_args(argv)
    if not CLI.is_file():
        print(f"missing {CLI}: run `make build`", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="edgescore-swap-load-"))
    bench = Bench(args, work)
    started: list[envoyctl.Envoy] = []
    try:
        cap = bench.capacity()
        rate = args.rate or round(cap / 2)
        print(f"capacity {cap:.0f} req/s closed-loop; load {rate:.0f} req/s open-loop, {args.duration} s per run", flush=True)
        results: dict = {"capacity": cap, "rate": rate, "duration": args.duration, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                         "date": time.strftime("%Y-%m-%d")}

        e = bench.registry_envoy("steady")
        started.append(e)
        results["a"] = bench.measure("a", e, rate, SWAPS)
        e.stop()

        e = bench.registry_envoy("registry")
        started.append(e)
        swaps0 = counter(e, SWAPS)
        rss_first: dict = {}

        def publishing(stop: threading.Event, marks: list[float]) -> None:
            while not stop.is_set():
                marks.append(time.time())
                bench.publish_next_bot()
                if not rss_first and counter(e, SWAPS) - swaps0 >= 10:
                    rss_first.update(swaps=counter(e, SWAPS) - swaps0, kib=rss_kib(e))
                stop.wait(max(0.0, 1.0 - (time.time() - marks[-1])))

        results["b"] = bench.measure("b", e, rate, SWAPS, publishing)
        results["swaps_b"] = counter(e, SWAPS) - swaps0
        time.sleep(2)  # the access log's last lines
        by = scored_by(work / "registry.access.log")
        results["scored_by_b"] = by
        stray = {k: n for k, n in by.items() if k not in bench.published and k != "bot@1"}
        # RSS over many swaps, without load.
        print(f"publishing until {args.rss_swaps} swaps (RSS) ...", flush=True)
        while counter(e, SWAPS) - swaps0 < args.rss_swaps:
            t = time.time()
            bench.publish_next_bot()
            if not rss_first and counter(e, SWAPS) - swaps0 >= 10:
                rss_first.update(swaps=counter(e, SWAPS) - swaps0, kib=rss_kib(e))
            time.sleep(max(0.0, 1.0 - (time.time() - t)))
        time.sleep(2)
        results["rss"] = {"swaps_first": rss_first.get("swaps"), "first_kib": rss_first.get("kib"),
                          "swaps_last": counter(e, SWAPS) - swaps0, "last_kib": rss_kib(e)}
        e.stop()

        e, push = bench.inline_envoy("inline")
        started.append(e)

        def pushing(stop: threading.Event, marks: list[float]) -> None:
            flip = False
            while not stop.is_set():
                marks.append(time.time())
                flip = not flip
                push(bench.arts["bot-alt" if flip else "bot"])
                stop.wait(max(0.0, 1.0 - (time.time() - marks[-1])))

        results["c"] = bench.measure("c", e, rate, "listener_manager.lds.update_success", pushing)
        results["lds_updates_c"] = counter(e, "listener_manager.lds.update_success")
        e.stop()

        print(f"\n{'run':40} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {'p999 ms':>8} {'max ms':>8} {'non-2xx':>8} {'no resp':>8}")
        for key, label in (("a", "(a) steady"), ("b", "(b) registry, publish every 1 s"), ("c", "(c) inline config (LDS) every 1 s")):
            r = results[key]
            print(f"{label:40} {r['requests']:>9} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['p999_ms']:>8.2f} {r['max_ms']:>8.1f} {r['non2xx']:>8} {r['errors']:>8}")
        a, b = results["a"], results["b"]
        print(f"(b)/(a) p999 {b['p999_ms'] / a['p999_ms']:.2f}x; swaps during (b) {results['swaps_b']}; "
              f"requests by bot version {by}; not a published version: {stray or 'none'}")
        rss = results["rss"]
        if rss["first_kib"]:
            print(f"RSS after {rss['swaps_first']} swaps {rss['first_kib']} KiB, after {rss['swaps_last']} swaps "
                  f"{rss['last_kib']} KiB: {rss['last_kib'] / rss['first_kib']:.3f}x")
        (HERE / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        plot(results, HERE / "p999.png")
        if args.write_readme:
            write_readme(results, "make bench-swap")
        return 0
    finally:
        for e in started:
            e.stop()
        bench.server.down()
        if not os.environ.get("EDGESCORE_BENCH_KEEP"):
            import shutil

            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
