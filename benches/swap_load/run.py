#!/usr/bin/env python3
"""Model updates under load (docs/registry.md): what a live swap costs the requests in flight.

    .venv/bin/python -m benches.swap_load.run [--duration 60] [--rounds 2] [--rate R]
                                              [--rss-swaps 600] [--native] [--write-readme]

A real Envoy (`--concurrency 2`) with the edgescore filter on reference-size models (300 trees
of depth 6 each, target/bench-models, `make bench-models`) answers every request itself (a
`direct_response` route: no upstream shares the CPU). `oha` (crates.io; `make bench-swap`
installs it under target/tools) sends an open-loop, constant-rate load — half of what this Envoy
answers closed-loop here, measured first — with coordinated-omission correction, and records
every request (start, corrected start, end, status) in SQLite, from which the percentiles and
the per-second p999 are computed. Three runs of `--duration` seconds each, after a 5 s warm-up,
interleaved over `--rounds` rounds (a b c a b c ...; medians and every round's p999 reported):

  (a) steady     models from the registry, nothing published;
  (b) registry   a new version of `bot` published every second (`edgescore publish`,
                 alternating two artifacts of different trees); the poller (main thread) fetches
                 and checks it, each worker copies it in slices and swaps;
  (c) inline     the old path: the same two artifacts alternately inlined (base64) in the plugin
                 configuration of a listener pushed every second through file-based LDS;
  (d) publish only  the control of (b): the same publishing, into a registry this Envoy does
                 not poll. The publisher and the registry server share the machine's cores with
                 Envoy and oha; (b) against (d) is what the swaps themselves cost.

`--runs` picks the runs (default all four, in the order a b c d).

Every request's score header goes to an access log, which shows that each request was scored
by a published version (`bot@N` for a manifest version N). After the last round's (b), without
load, the publishing goes on until the workers have swapped `--rss-swaps` times: Envoy's RSS after that
against after 10 swaps. `--native` runs the same with the native module (native/) in the Wasm
filter's place: each worker takes the scorer the main thread built for it before its next
request. Output: a table, results.json, p999.png (p999 per second, swaps
marked) and, with --write-readme, the results section of README.md. Every process started is
stopped by PID.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tqdm import tqdm

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
from harness import envoyctl, render_envoy  # noqa: E402
from harness import oha  # noqa: E402
from harness.loopback import free_port  # noqa: E402
from harness.registry import RegistryServer  # noqa: E402

CLI = ROOT / "target" / "release" / "edgescore"
BENCH_MODELS = ROOT / "target" / "bench-models"
SCHEMA = ROOT / "models" / "example" / "schema.json"
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
        self.oha = oha.find(args.oha)
        cli("keygen", "-o", work / "bench")
        self.registry = work / "registry"
        self.registry.mkdir()
        # (d)'s: the same publishing, polled by no Envoy.
        self.unpolled = work / "registry-unpolled"
        self.unpolled.mkdir()
        for m in render_envoy.EXAMPLE_MODELS:
            self.publish(self.arts[m.name])
            self.publish(self.arts[m.name], self.unpolled)
        self.server = RegistryServer(self.registry)
        self.published: set[str] = set()
        self.flip = False

    def publish(self, artifact: Path, registry: Path | None = None) -> str:
        return cli("publish", artifact, "--registry", registry or self.registry, "--key", self.work / "bench.key").strip()

    def publish_next_bot(self, registry: Path | None = None) -> int:
        """Publishes the other bot artifact (to the polled registry unless told); its new version."""
        self.flip = not self.flip
        out = self.publish(self.arts["bot-alt" if self.flip else "bot"], registry)
        version = int(out.split(" v", 1)[1].split(" ", 1)[0])
        if registry is None:
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
        if self.args.native:
            cfg = render_envoy.to_native(cfg)
        e = envoyctl.Envoy(cfg, self.work / name, name=name, concurrency=WORKERS, log_level="warning")
        e.port = port
        e.start()
        deadline = time.monotonic() + 30
        # The Wasm filter's main-thread root context swaps too; the native module counts workers.
        while e.counter(SWAPS) < WORKERS + (0 if self.args.native else 1):
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
            if self.args.native:
                cfg = render_envoy.to_native(cfg)
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
        if self.args.native:  # the listener (in LDS) is native; the runtime flag is bootstrap's
            boot["layered_runtime"] = {"layers": [{"name": "edgescore_native", "static_layer": dict(render_envoy.NATIVE_RUNTIME)},
                                                  {"name": "admin", "admin_layer": {}}]}
        e = envoyctl.Envoy(boot, self.work / name, name=name, concurrency=WORKERS, log_level="warning")
        e.port = port
        e.start()
        return e, push

    # load

    def oha_run(self, port: int, db: Path, seconds: float, rate: float | None) -> dict:
        return oha.run(self.oha, port, seconds, CONNECTIONS, rate, db if rate is not None else None)

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
            last = e.counter(updates)
            while not stop.wait(0.1):
                now = e.counter(updates)
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
    for key, label in LABELS:
        if key in results:
            ys = results[key]["p999_per_second_ms"]
            ax.plot(range(len(ys)), ys, label=label, lw=1.4)
    for i, m in enumerate(results.get("b", {}).get("applied_s", [])):
        ax.axvline(m, color="tab:orange", alpha=0.3, lw=0.8, label="(b) a swap (100 ms resolution)" if i == 0 else None)
    for i, m in enumerate(results.get("c", {}).get("applied_s", [])):
        ax.axvline(m, color="tab:green", alpha=0.3, lw=0.8, ls=":", label="(c) an LDS update applied" if i == 0 else None)
    ax.set_yscale("log")
    ax.set_xlabel("second of the run")
    ax.set_ylabel("p999 latency (ms, CO-corrected)")
    ax.set_title(f"edgescore: model updates under {results['rate']:.0f} req/s open-loop load (Envoy, 2 workers)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


LABELS = (("a", "(a) steady"), ("b", "(b) registry, publish every 1 s"), ("c", "(c) inline config (LDS) every 1 s"),
          ("d", "(d) publish every 1 s, not polled"))
METRICS = ("p50_ms", "p99_ms", "p999_ms")


def summarise(runs: list[dict]) -> dict:
    """Over rounds: the median of each percentile, the p999 of every round, and the sums."""
    out = {m: statistics.median(r[m] for r in runs) for m in METRICS}
    out.update(max_ms=max(r["max_ms"] for r in runs), p999_rounds_ms=[round(r["p999_ms"], 2) for r in runs], requests=sum(r["requests"] for r in runs),
               non2xx=sum(r["non2xx"] for r in runs), errors=sum(r["errors"] for r in runs))
    return out


def table(results: dict) -> list[str]:
    rows = ["| run | requests | p50 ms | p99 ms | p999 ms (median) | p999 ms per round | max ms | non-2xx | no response |",
            "|---|---|---|---|---|---|---|---|---|"]
    for key, label in LABELS:
        if key not in results["summary"]:
            continue
        r = results["summary"][key]
        rows.append(f"| {label} | {r['requests']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['p999_ms']:.2f} | "
                    f"{', '.join(f'{x:.1f}' for x in r['p999_rounds_ms'])} | {r['max_ms']:.1f} | {r['non2xx']} | {r['errors']} |")
    return rows


def ratios(results: dict) -> list[str]:
    """p999 and p99 ratios (medians over rounds) of the runs made: each against (a), and (b) against its control (d)."""
    sm = results["summary"]
    pairs = [(k, "a") for k in "bcd" if k in sm and "a" in sm] + ([("b", "d")] if "b" in sm and "d" in sm else [])
    return [f"({x})/({y}): p999 {sm[x]['p999_ms'] / sm[y]['p999_ms']:.2f}x, p99 {sm[x]['p99_ms'] / sm[y]['p99_ms']:.2f}x"
            for x, y in pairs]


def conclusions(results: dict) -> list[str]:
    rss = results.get("rss", {})
    lines = ["- " + "; ".join(ratios(results)) + " (medians over rounds)."]
    if "b" in results["summary"]:
        lines.append(
            f"- (b): {results['publishes_b']} publishes, {results['swaps_b']} swaps ("
            f"{'one per worker' if results.get('native') else 'each worker' + chr(39) + 's root context and the one Envoy keeps on its main thread'}); requests by the `bot` version that scored them: "
            f"{len(results['scored_by_b'])} versions, "
            f"{'every one a published manifest version' if not results['stray_b'] else 'NOT published: ' + str(results['stray_b'])}.")
    if rss.get("first_kib"):
        lines.append(f"- Envoy RSS after {rss['swaps_first']} swaps {rss['first_kib'] / 1024:.1f} MiB, after {rss['swaps_last']} "
                     f"swaps {rss['last_kib'] / 1024:.1f} MiB: {rss['last_kib'] / rss['first_kib']:.3f}x.")
    return lines


def summary_line(results: dict, elapsed_s: float) -> str:
    rss = results.get("rss", {})
    rss_text = (f"Envoy RSS after {rss['swaps_last']} swaps {rss['last_kib'] / rss['first_kib']:.3f}x that after {rss['swaps_first']}"
                if rss.get("first_kib") else "no RSS comparison (fewer than 10 swaps)")
    stray = ("scored only by published versions" if not results["stray_b"]
             else f"scored by {len(results['stray_b'])} versions NOT published")
    rounds = f"{results['rounds']} round{'s' if results['rounds'] != 1 else ''}"
    return (f"swap_load: {rounds} × {len(results['summary'])} runs of {results['duration']} s at {results['rate']:.0f} req/s in {elapsed_s:.0f} s; "
            + "; ".join(r.split(", p99")[0] for r in ratios(results))
            + f"; {results['swaps_b']} swaps, {stray}; {rss_text}")


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True)
    return (out.stdout.strip() or "an unknown commit") + (" with local changes" if dirty.stdout.strip() else "")


def heading(native: bool) -> str:
    return "## Results: the native module" if native else "## Results"


def write_readme(results: dict, cmd: str, native: bool) -> None:
    """Replaces this build's results section of README.md (the Wasm filter's or the native module's), keeping the other."""
    readme = HERE / "README.md"
    png = "p999-native.png" if native else "p999.png"
    section = "\n".join([
        heading(native), "",
        f"Measured on {commit()}. `{cmd}` on {results['machine']}, {results['date']}: {results['rate']:.0f} req/s open-loop "
        f"(half of the {results['capacity']:.0f} req/s measured closed-loop), {results['rounds']} interleaved rounds "
        f"({' '.join(results['summary'])} {' '.join(results['summary'])} ...) of {results['duration']} s per run, {CONNECTIONS} connections, latencies corrected for "
        f"coordinated omission.", "", *table(results), "", *conclusions(results), "",
        "p999 per second of the last round (swaps and LDS updates marked):", "", f"![p999 per second]({png})", ""])
    text = readme.read_text() if readme.exists() else "# swap_load\n"
    head, _, results_part = text.partition("\n## Results")
    wasm_part, _, native_part = ("## Results" + results_part).partition("\n" + heading(True))
    parts = {False: wasm_part.strip() if results_part else "", True: (heading(True) + native_part).strip() if native_part else ""}
    parts[native] = section.strip()
    readme.write_text(head.rstrip() + "\n\n" + "\n\n".join(p for p in (parts[False], parts[True]) if p) + "\n")


def registry_run(bench: Bench, results: dict, rnd: int, last: bool, rate: float, started: list, progress, rss_first: dict) -> None:
    """(b): a publish a second under load; after the last round's, Envoy's RSS over `--rss-swaps` swaps without load."""
    args = bench.args
    e = bench.registry_envoy(f"registry{rnd}")
    started.append(e)
    swaps0 = e.counter(SWAPS)

    def publishing(stop: threading.Event, marks: list[float]) -> None:
        while not stop.is_set():
            marks.append(time.time())
            bench.publish_next_bot()
            if last and not rss_first and e.counter(SWAPS) - swaps0 >= 10:
                rss_first.update(swaps=e.counter(SWAPS) - swaps0, kib=rss_kib(e))
            stop.wait(max(0.0, 1.0 - (time.time() - marks[-1])))

    progress.set_postfix_str(f"round {rnd + 1}/{args.rounds} (b) registry")
    run = bench.measure(f"b{rnd}", e, rate, SWAPS, publishing)
    progress.update()
    results["runs"]["b"].append(run)
    results["publishes_b"] += len(run["marks_s"])
    results["swaps_b"] += e.counter(SWAPS) - swaps0
    time.sleep(2)  # the access log's last lines
    for k, n in scored_by(bench.work / f"registry{rnd}.access.log").items():
        results["scored_by_b"][k] = results["scored_by_b"].get(k, 0) + n
    if last:
        # RSS over many swaps, without load.
        with tqdm.external_write_mode():
            print(f"publishing until {args.rss_swaps} swaps (RSS) ...", flush=True)
        # A publish a second until --rss-swaps swaps take minutes without a sign of life
        # otherwise: a bar of its own over the swaps counted so far.
        with tqdm(total=args.rss_swaps, desc="swaps for RSS", unit="swap", disable=None, leave=False) as swaps:
            while (done := e.counter(SWAPS) - swaps0) < args.rss_swaps:
                swaps.update(done - swaps.n)
                t = time.time()
                bench.publish_next_bot()
                if not rss_first and e.counter(SWAPS) - swaps0 >= 10:
                    rss_first.update(swaps=e.counter(SWAPS) - swaps0, kib=rss_kib(e))
                time.sleep(max(0.0, 1.0 - (time.time() - t)))
        time.sleep(2)
        results["rss"] = {"swaps_first": rss_first.get("swaps"), "first_kib": rss_first.get("kib"),
                          "swaps_last": e.counter(SWAPS) - swaps0, "last_kib": rss_kib(e)}
    e.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--rate", type=float, help="requests/s (default: half the measured capacity)")
    ap.add_argument("--rss-swaps", type=int, default=600)
    ap.add_argument("--native", action="store_true", help="the native module instead of the .wasm")
    ap.add_argument("--runs", default="abcd", help="which runs, of a b c d (default: all)")
    ap.add_argument("--write-readme", action="store_true")
    ap.add_argument("--oha", type=Path, default=oha.OHA, help=f"the oha binary (default: {oha.OHA.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    runs = [k for k, _ in LABELS if k in args.runs]
    if not runs or set(args.runs) - set(runs):
        ap.error(f"--runs: letters of {''.join(k for k, _ in LABELS)}")
    t0 = time.monotonic()
    envoyctl.exit_on_sigterm()
    if not CLI.is_file():
        print(f"missing {CLI}: run `make build`", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="edgescore-swap-load-"))
    bench = Bench(args, work)
    started: list[envoyctl.Envoy] = []
    # One step per measured run (5 s warm-up + --duration s), on stderr and on a terminal only
    # (disable=None): CI logs get the per-round lines and the summary.
    progress = tqdm(total=len(runs) * args.rounds, desc="swap_load", unit="run", disable=None, leave=False)
    try:
        progress.set_postfix_str("capacity")
        cap = bench.capacity()
        rate = args.rate or round(cap / 2)
        print(f"capacity {cap:.0f} req/s closed-loop; load {rate:.0f} req/s open-loop, {args.rounds} rounds of "
              f"{args.duration} s per run", flush=True)
        results: dict = {"capacity": cap, "rate": rate, "duration": args.duration, "rounds": args.rounds,
                         "native": args.native, "machine": f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
                         "runs": {k: [] for k in runs}, "publishes_b": 0, "swaps_b": 0, "scored_by_b": {}}
        rss_first: dict = {}
        for rnd in range(args.rounds):
            last = rnd == args.rounds - 1
            if "a" in runs:
                progress.set_postfix_str(f"round {rnd + 1}/{args.rounds} (a) steady")
                e = bench.registry_envoy(f"steady{rnd}")
                started.append(e)
                results["runs"]["a"].append(bench.measure(f"a{rnd}", e, rate, SWAPS))
                progress.update()
                e.stop()
            if "b" in runs:
                registry_run(bench, results, rnd, last, rate, started, progress, rss_first)
            if "c" in runs:
                e, push = bench.inline_envoy(f"inline{rnd}")
                started.append(e)

                def pushing(stop: threading.Event, marks: list[float], push=push) -> None:
                    flip = False
                    while not stop.is_set():
                        marks.append(time.time())
                        flip = not flip
                        push(bench.arts["bot-alt" if flip else "bot"])
                        stop.wait(max(0.0, 1.0 - (time.time() - marks[-1])))

                progress.set_postfix_str(f"round {rnd + 1}/{args.rounds} (c) inline")
                results["runs"]["c"].append(bench.measure(f"c{rnd}", e, rate, "listener_manager.lds.update_success", pushing))
                progress.update()
                e.stop()
            if "d" in runs:
                e = bench.registry_envoy(f"unpolled{rnd}")
                started.append(e)

                def publishing_unpolled(stop: threading.Event, marks: list[float]) -> None:
                    while not stop.is_set():
                        marks.append(time.time())
                        bench.publish_next_bot(bench.unpolled)
                        stop.wait(max(0.0, 1.0 - (time.time() - marks[-1])))

                progress.set_postfix_str(f"round {rnd + 1}/{args.rounds} (d) publish, not polled")
                results["runs"]["d"].append(bench.measure(f"d{rnd}", e, rate, SWAPS, publishing_unpolled))
                progress.update()
                e.stop()
            with tqdm.external_write_mode():  # the line above the bar, not through it
                print(f"round {rnd + 1}: p999 ms " + ", ".join(f"{k} {results['runs'][k][-1]['p999_ms']:.1f}" for k in runs),
                      flush=True)
        progress.close()

        results["summary"] = {k: summarise(results["runs"][k]) for k in runs}
        # bot@1 is what every Envoy starts with; the others must be versions the bench published.
        results["stray_b"] = {k: n for k, n in results["scored_by_b"].items() if k not in bench.published and k != "bot@1"}
        print()
        print("\n".join(table(results)))
        print("\n".join(conclusions(results)))
        suffix = "-native" if args.native else ""
        (HERE / f"results{suffix}.json").write_text(json.dumps(results, indent=1) + "\n")
        plot({k: results["runs"][k][-1] for k in runs} | {"rate": rate}, HERE / f"p999{suffix}.png")
        if args.write_readme:
            write_readme(results, "make bench-swap" + (" SWAP_FLAGS=--native" if args.native else ""), args.native)
        print(summary_line(results, time.monotonic() - t0))
        return 0
    finally:
        progress.close()
        for e in started:
            e.stop()
        bench.server.down()
        if not os.environ.get("EDGESCORE_BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main())
