#!/usr/bin/env python3
"""A soak with faults (issue 14): the whole edge path under constant load for minutes while its
parts fail, and what that did to the requests and to memory.

    .venv/bin/python -m benches.soak.run [--minutes 60] [--rate 40] [--rss-target 2] [--out DIR] [--write-readme]

What runs (all on 127.0.0.1, every process stopped by PID, also on failure): a real Envoy with
`--concurrency 2` and envoy.yaml's configuration (the example models from the signed registry,
the text path to the NLP service); the real Ray Serve NLP service (`nlp.run`), reached through a
small TCP relay of this process that can delay its answers; the demo registry (a copy of
target/registry); the recording backend.

Load: an open loop at `--rate` requests per second (each request sent at its scheduled time on
its own connection, so a slow answer never delays the next), cycling browser-like and bot-like
requests (demo/traffic.py), chat POSTs for the text path, 256 KiB bodies, and hostile requests
(raw bytes: bad header bytes, thousands of headers, huge values).

Faults, at fractions of the run (an hour: minute 9, 15-24, 27-33, 42, 51):
  - every 10 s a new version of `bot` is published to the registry (two artifacts alternately);
  - at 15 % the NLP service is killed (SIGKILL to every process of its session) and started
    again (Ray takes ~30 s: the text path fails open meanwhile);
  - from 25 % to 40 % the registry is frozen: its server shows the manifest of the freeze's
    start, renewed for a third of the freeze, while the models are published on behind it; the
    pollers refuse it once it expires, and accept the live one once the server thaws
    (registry_faults.py);
  - from 45 % to 55 % the relay holds the NLP answers beyond the text timeout;
  - at 70 % a bad model is published (its artifact corrupted after signing): refused, the old
    one keeps serving;
  - at 85 % an expired manifest is published (signed, its `expires` a minute past): refused,
    the models stay; the next publish, 10 s later, is accepted.

Report: requests sent and answered (nothing may be lost: every request gets an HTTP answer),
answers by cause (expected blocks, text blocks, errors), p50/p99/p999 per minute, Envoy's RSS
and the NLP service's processes' RSS at the start and the end (Envoy growth < `--rss-target`), the
filter's and Envoy's Wasm counters (VM failures, reloads, swaps, refusals, text errors and
timeouts); results.json and soak.png (latency and RSS over time, faults marked) in `--out`.
Exit status 1 if a request was lost, an answer was an unexpected 5xx, Envoy grew by
`--rss-target` or more, or a fault did not happen (the restart failed, a refusal went uncounted,
the thawed registry's manifest was not accepted). The last line sums it up.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
from benches.soak import registry_faults  # noqa: E402
from benches.soak.relay import Relay  # noqa: E402
from benches.soak.traffic_mix import Outcome, mix  # noqa: E402
from demo.run import NlpService  # noqa: E402
from harness import backend as demo_backend  # noqa: E402
from harness import envoyctl, render_envoy  # noqa: E402
from harness.registry import RegistryServer, publish  # noqa: E402
from harness.running import REGISTRY_STATS  # noqa: E402
from nlp.local_service import read_state  # noqa: E402
from nlp.process_session import session_processes  # noqa: E402
from tqdm import tqdm  # noqa: E402

CLI = ROOT / "target" / "release" / "edgescore"  # the default of --cli (make test has only the debug build)
SCHEMA = ROOT / "models" / "example" / "schema.json"


@dataclass
class Timeline:
    """What happened when (seconds from the start of the load)."""
    faults: list[tuple[float, float, str]] = field(default_factory=list)  # start, end, what
    samples: list[dict] = field(default_factory=list)  # t, envoy_rss_kib, nlp_rss_kib

    def mark(self, start: float, end: float, what: str) -> None:
        self.faults.append((start, end, what))
        print(f"  [{start:6.1f} s] {what}", flush=True)


@dataclass
class Rig:
    """What the faults act on and read."""
    t0: float
    nlp: NlpService
    relay: Relay
    registry: RegistryServer
    registry_dir: Path
    envoy: envoyctl.Envoy
    cli: Path
    versions: list[Path]
    timeline: Timeline
    publish_after: float = 0.0  # seconds from t0: publishes wait while an expired manifest is shown

    def now(self) -> float:
        return time.monotonic() - self.t0


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def nlp_rss_kib(state_dir: Path) -> int:
    state = read_state(state_dir) or {}
    session = state.get("session")
    return sum(rss_kib(p.pid) for p in session_processes(session)) if session else 0


def kill_nlp(state_dir: Path) -> int:
    """SIGKILL every process of the NLP service's session (Ray's included): a crash, not a stop."""
    state = read_state(state_dir) or {}
    procs = session_processes(state["session"]) if state.get("session") else []
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(procs)


def bot_versions(cli: Path, work: Path) -> list[Path]:
    """Two artifacts of `bot` that differ (their version strings), published alternately."""
    import subprocess
    out = []
    for v in ("soak-a", "soak-b"):
        path = work / f"bot-{v}.esm"
        subprocess.run([str(cli), "compile", str(ROOT / "models" / "example" / "bot.json"), "--schema", str(SCHEMA),
                        "--name", "bot", "--version", v, "-o", str(path)], check=True, capture_output=True)
        out.append(path)
    return out


def envoy_config(backend_port: int, nlp_port: int, registry_port: int) -> dict:
    cfg = render_envoy.load_config(registry=True)
    cfg["admin"]["address"]["socket_address"]["port_value"] = 0
    cfg["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] = 0
    render_envoy.wasm_filter(cfg)["vm_config"]["code"]["local"]["filename"] = str(render_envoy.WASM)
    for b in cfg.get("bootstrap_extensions", []):
        b["typed_config"]["config"]["vm_config"]["code"]["local"]["filename"] = str(render_envoy.WASM)
    render_envoy.set_cluster_address(cfg, "backend", "127.0.0.1", backend_port)
    render_envoy.set_cluster_address(cfg, "nlp", "127.0.0.1", nlp_port)
    render_envoy.set_cluster_address(cfg, "registry", "127.0.0.1", registry_port)
    return cfg


def wasm_stats(e: envoyctl.Envoy) -> dict[str, int]:
    """Envoy's Wasm VM counters (failures, reloads) and the filter's; the registry's refusal
    reasons only when they happened."""
    stats = e.stats(r"^(wasm\.(edgescore|envoy\.wasm)|wasmcustom\.edgescore\.(errors|requests_scored|decision\.|text\.(calls|errors|timeouts)|registry\.))")
    return {k: v for k, v in sorted(stats.items()) if v or ".refused." not in k}


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=40.0, help="requests per second, open loop")
    ap.add_argument("--rss-target", type=float, default=2.0, help="Envoy's RSS may grow less than this many percent")
    ap.add_argument("--out", type=Path, default=HERE / "last_run")
    ap.add_argument("--write-readme", action="store_true")
    ap.add_argument("--cli", type=Path, default=CLI, help="the edgescore CLI that compiles and publishes the bot versions")
    args = ap.parse_args(argv)
    duration = args.minutes * 60
    args.out.mkdir(parents=True, exist_ok=True)
    timeline = Timeline()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="edgescore-soak-") as tmp:
        work = Path(tmp)
        registry_dir = work / "registry"
        import shutil
        shutil.copytree(ROOT / "target" / "registry", registry_dir)
        versions = bot_versions(args.cli, work)
        backend = demo_backend.make_server("127.0.0.1", 0)
        demo_backend.serve_in_thread(backend)
        registry = RegistryServer(registry_dir)
        nlp = NlpService(envoyctl_free_port(), work / "nlp")
        relay = Relay(nlp.port)
        envoy = envoyctl.Envoy(envoy_config(backend.server_port, relay.port, registry.port),
                               work / "envoy", name="soak", concurrency=2)
        try:
            print("== starting the NLP service (Ray), the registry, Envoy", flush=True)
            nlp.start()
            if not nlp.wait_ready():
                return 1
            envoy.start()
            port = envoy.listener_port("edge")
            time.sleep(3)  # the poller's first manifest, the workers' first copy
            t0 = time.monotonic()
            base = {"envoy_rss_kib": rss_kib(envoy.proc.pid), "nlp_rss_kib": nlp_rss_kib(nlp.state_dir)}
            stop = threading.Event()
            sender = threading.Thread(target=mix, args=(port, args.rate, t0, duration, outcomes, stop), daemon=True)
            sender.start()
            schedule = faults(duration)
            rig = Rig(t0, nlp, relay, registry, registry_dir, envoy, args.cli, versions, timeline)
            next_publish, published, last_sample = 10.0, 0, -10.0
            # A bar on a terminal only (disable=None): CI logs get the fault lines and the summary.
            progress = tqdm(total=round(duration), unit="s", desc="soak", disable=None, leave=False)
            while (now := time.monotonic() - t0) < duration + 5:
                progress.n = min(round(now), progress.total)
                progress.set_postfix(sent=len(outcomes), refresh=False)
                progress.refresh()
                if now - last_sample >= 5:
                    timeline.samples.append({"t": now, "envoy_rss_kib": rss_kib(envoy.proc.pid),
                                             "nlp_rss_kib": nlp_rss_kib(nlp.state_dir)})
                    last_sample = now
                if now >= max(next_publish, rig.publish_after) and now < duration:
                    publish(args.cli, versions[published % 2], registry_dir)
                    published += 1
                    next_publish += 10
                for f in [f for f in schedule if f["at"] <= now and not f.get("done")]:
                    f["done"] = True
                    run_fault(f, rig)
                time.sleep(0.2)
            progress.close()
            stop.set()
            sender.join(timeout=30)
            end = {"envoy_rss_kib": rss_kib(envoy.proc.pid), "nlp_rss_kib": nlp_rss_kib(nlp.state_dir)}
            time.sleep(1.5)  # the filter's last counts reach Envoy
            stats = wasm_stats(envoy)
        finally:
            envoy.stop()
            relay.close()
            nlp.stop()
            registry.down()
            backend.shutdown()
            backend.server_close()
    results = analyse(outcomes, timeline, base, end, stats, duration, args, published)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    plot(outcomes, timeline, args.out / "soak.png")
    report = render(results)
    print("\n" + report)
    print(summary_line(results), flush=True)
    if args.write_readme:
        readme = HERE / "README.md"
        text = readme.read_text()
        start, stop_mark = "<!-- results:begin -->", "<!-- results:end -->"
        readme.write_text(text[:text.index(start) + len(start)] + "\n" + report + "\n" + text[text.index(stop_mark):])
    return 0 if results["ok"] else 1


def envoyctl_free_port() -> int:
    from harness.loopback import free_port
    return free_port()


def faults(duration: float) -> list[dict]:
    return [
        {"at": 0.15 * duration, "what": "kill_nlp"},
        {"at": 0.25 * duration, "what": "freeze_registry", "until": 0.40 * duration},
        {"at": 0.45 * duration, "what": "slow_nlp", "until": 0.55 * duration},
        {"at": 0.70 * duration, "what": "bad_model"},
        {"at": 0.85 * duration, "what": "expired_manifest"},
    ]


# Seconds for a registry counter to move: the poller polls every 2 s (envoy.yaml), and a
# manifest's checks and the workers' swaps take a few more.
REGISTRY_SETTLE_S = 12.0


def wait_until(moved: Callable[[], bool]) -> None:
    """Returns once `moved()` holds, or after REGISTRY_SETTLE_S."""
    deadline = time.monotonic() + REGISTRY_SETTLE_S
    while not moved() and time.monotonic() < deadline:
        time.sleep(0.5)


def run_fault(f: dict, rig: Rig) -> None:
    now, nlp, relay, timeline = rig.now(), rig.nlp, rig.relay, rig.timeline
    if f["what"] == "kill_nlp":
        n = kill_nlp(nlp.state_dir)

        def restart() -> None:
            nlp.stop()  # cleans the state of the killed service (nothing left to stop)
            nlp.start()
            ok = nlp.wait_ready()
            timeline.mark(now, rig.now(), f"NLP service killed ({n} processes, SIGKILL) and started again"
                          + ("" if ok else " (FAILED to start)"))
        threading.Thread(target=restart, daemon=True).start()
    elif f["what"] == "slow_nlp":
        relay.delay_s = 0.8  # beyond text.timeout_ms (500)
        until = f["until"]

        def undo() -> None:
            time.sleep(max(0.0, until - rig.now()))
            relay.delay_s = 0.0
            timeline.mark(now, rig.now(), "NLP answers held 800 ms (timeout 500 ms)")
        threading.Thread(target=undo, daemon=True).start()
    elif f["what"] == "bad_model":
        what = registry_faults.publish_bad(rig.cli, rig.registry_dir, rig.versions[0])
        timeline.mark(now, now + 1, f"bad model published: {what}")
    elif f["what"] == "freeze_registry":
        until = f["until"]
        valid_s = max(3.0, (until - now) / 3)
        expired_before = registry_faults.refused(rig.envoy, "expired")
        sequence = registry_faults.freeze(rig.registry, rig.registry_dir, rig.registry_dir.parent / "frozen", valid_s)

        def thaw() -> None:
            time.sleep(max(0.0, until - rig.now()))
            accepted_frozen = registry_faults.accepted(rig.envoy)
            registry_faults.thaw(rig.registry, rig.registry_dir)
            wait_until(lambda: registry_faults.accepted(rig.envoy) > accepted_frozen)
            expired = registry_faults.refused(rig.envoy, "expired") - expired_before
            thawed = registry_faults.accepted(rig.envoy) > accepted_frozen
            timeline.mark(now, rig.now(), f"registry frozen at seq {sequence} (valid {valid_s:.0f} s), publishing on behind it: "
                          f"refused {expired} times as expired" + (" (NOT refused)" if expired <= 0 else "")
                          + ("; the live manifest accepted after the thaw" if thawed else "; the live manifest NOT accepted after the thaw"))
        threading.Thread(target=thaw, daemon=True).start()
    elif f["what"] == "expired_manifest":
        before = registry_faults.refused(rig.envoy, "expired")
        rig.publish_after = now + REGISTRY_SETTLE_S  # the pollers see it before a publish replaces it
        sequence = registry_faults.publish_expired(rig.registry_dir)

        def check() -> None:
            wait_until(lambda: registry_faults.refused(rig.envoy, "expired") > before)
            expired = registry_faults.refused(rig.envoy, "expired") - before
            timeline.mark(now, rig.now(), f"expired manifest published (seq {sequence}, expired a minute before): refused {expired} times as expired"
                          + (" (NOT refused)" if expired <= 0 else ""))
        threading.Thread(target=check, daemon=True).start()


def analyse(outcomes: list[Outcome], timeline: Timeline, base: dict, end: dict, stats: dict, duration: float,
            args, published: int) -> dict:
    by_cause: dict[str, int] = {}
    for o in outcomes:
        by_cause[o.cause] = by_cause.get(o.cause, 0) + 1
    lost = sum(1 for o in outcomes if o.status is None)
    unexpected = sum(1 for o in outcomes if o.cause.startswith("unexpected"))
    minutes = []
    for m in range(int(duration // 60) + (1 if duration % 60 else 0)):
        lat = [o.latency_s * 1e3 for o in outcomes if m * 60 <= o.sent_at < (m + 1) * 60 and o.status is not None]
        minutes.append({"minute": m + 1, "requests": len(lat), "p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99),
                        "p999_ms": percentile(lat, 0.999)})
    kinds = {}
    for kind in sorted({o.kind for o in outcomes}):
        lat = [o.latency_s * 1e3 for o in outcomes if o.kind == kind and o.status is not None]
        kinds[kind] = {"requests": len(lat), "p50_ms": percentile(lat, 0.5), "p99_ms": percentile(lat, 0.99), "max_ms": max(lat, default=0)}
    growth = (end["envoy_rss_kib"] - base["envoy_rss_kib"]) / max(1, base["envoy_rss_kib"])
    missed = faults_missed(timeline, stats)
    return {
        "minutes": args.minutes, "rate": args.rate, "sent": len(outcomes), "answered": len(outcomes) - lost, "lost": lost,
        "by_cause": dict(sorted(by_cause.items())), "per_minute": minutes, "per_kind": kinds, "start": base, "end": end,
        "envoy_rss_growth": growth, "stats": stats, "faults": timeline.faults, "samples": timeline.samples,
        "models_published": published, "faults_missed": missed,
        "rss_target": args.rss_target / 100,
        "ok": lost == 0 and unexpected == 0 and growth < args.rss_target / 100 and not missed and published > 0,
    }


def faults_missed(timeline: Timeline, stats: dict[str, int]) -> list[str]:
    """The faults that did not happen as scheduled: a soak whose faults silently did nothing
    proves nothing (the restart failing, the hold window never closing, the refusal uncounted)."""
    marks = [what for _, _, what in timeline.faults]
    missed = []
    if not any(m.startswith("NLP service killed") and "FAILED" not in m for m in marks):
        missed.append("NLP service killed and started again")
    if not any(m.startswith("NLP answers held") for m in marks):
        missed.append("NLP answers held beyond the timeout")
    if not any(m.startswith("bad model published") for m in marks):
        missed.append("bad model published")
    if stats.get(f"{REGISTRY_STATS}refused.sha_mismatch", 0) <= 0:
        missed.append("the bad model's refusal counted by the filter")
    if not any(m.startswith("registry frozen") and "NOT" not in m for m in marks):
        missed.append("registry frozen: its manifest refused as expired, the live one accepted after")
    if not any(m.startswith("expired manifest published") and "NOT" not in m for m in marks):
        missed.append("expired manifest refused")
    return missed


def summary_line(r: dict) -> str:
    verdict = "OK" if r["ok"] else "FAILED"
    extra = f", faults missed: {', '.join(r['faults_missed'])}" if r["faults_missed"] else ""
    return (f"soak {verdict}: {r['minutes']:g} min at {r['rate']:g}/s, sent {r['sent']:,}, answered {r['answered']:,}, "
            f"lost {r['lost']}, Envoy RSS {100 * r['envoy_rss_growth']:+.1f} %, {r['models_published']} models published{extra}")


def render(r: dict) -> str:
    lines = [f"{r['minutes']:g} minutes at {r['rate']:g} requests/s (open loop), Envoy --concurrency 2; "
             f"`python -m benches.soak.run --minutes {r['minutes']:g} --rate {r['rate']:g}`", "",
             f"- requests sent **{r['sent']:,}**, answered **{r['answered']:,}**, lost **{r['lost']}**",
             "- answers by cause: " + ", ".join(f"{k} {v:,}" for k, v in r["by_cause"].items()),
             f"- Envoy RSS {r['start']['envoy_rss_kib'] / 1024:.1f} → {r['end']['envoy_rss_kib'] / 1024:.1f} MiB "
             f"(**{100 * r['envoy_rss_growth']:+.1f} %**, target < {100 * r['rss_target']:g} %); NLP service processes "
             f"{r['start']['nlp_rss_kib'] / 1024:.0f} → {r['end']['nlp_rss_kib'] / 1024:.0f} MiB",
             f"- models published: {r['models_published']} (every 10 s), one bad one and one expired manifest", "- faults: " +
             "; ".join(f"{what} ({a:.0f}–{b:.0f} s)" for a, b, what in r["faults"]), "",
             "| minute | requests | p50 | p99 | p999 |", "|---:|---:|---:|---:|---:|"]
    for m in r["per_minute"]:
        lines.append(f"| {m['minute']} | {m['requests']:,} | {m['p50_ms']:.1f} ms | {m['p99_ms']:.1f} ms | {m['p999_ms']:.1f} ms |")
    lines += ["", "| requests | answered | p50 | p99 | max |", "|---|---:|---:|---:|---:|"]
    for kind, k in r["per_kind"].items():
        lines.append(f"| {kind} | {k['requests']:,} | {k['p50_ms']:.1f} ms | {k['p99_ms']:.1f} ms | {k['max_ms']:.1f} ms |")
    lines += ["", "Envoy's Wasm and the filter's counters at the end:", "", "```"]
    lines += [f"{k}: {v}" for k, v in r["stats"].items()]
    lines += ["```", "", "![latency and RSS over the run](last_run/soak.png)"]
    return "\n".join(lines)


def plot(outcomes: list[Outcome], timeline: Timeline, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    buckets: dict[int, list[float]] = {}
    for o in outcomes:
        if o.status is not None:
            buckets.setdefault(int(o.sent_at // 10), []).append(o.latency_s * 1e3)
    xs = sorted(buckets)
    for q, label in ((0.5, "p50"), (0.99, "p99"), (0.999, "p999")):
        ax.plot([10 * x + 5 for x in xs], [percentile(buckets[x], q) for x in xs], label=label)
    ax.set_yscale("log")
    ax.set_ylabel("latency per 10 s (ms)")
    ax.legend(loc="upper right")
    ax2.plot([s["t"] for s in timeline.samples], [s["envoy_rss_kib"] / 1024 for s in timeline.samples], label="Envoy RSS")
    ax2.plot([s["t"] for s in timeline.samples], [s["nlp_rss_kib"] / 1024 for s in timeline.samples], label="NLP service RSS")
    ax2.set_ylabel("MiB")
    ax2.set_xlabel("seconds")
    ax2.legend(loc="upper right")
    for a, b, what in timeline.faults:
        for axis in (ax, ax2):
            axis.axvspan(a, max(b, a + 2), color="tab:red", alpha=0.15)
        ax.annotate(what.split(":")[0][:40], (a, ax.get_ylim()[1]), fontsize=7, rotation=90, va="top")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    sys.exit(main())
