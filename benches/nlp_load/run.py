"""Load benchmark of the NLP service against its own model called in a plain loop (issue 16).

    .venv/bin/python -m benches.nlp_load.run [--rounds 3] [--seconds 10] [--json F] [--write-readme]

One local Ray head (nlp.run, free loopback ports, nlp/serve_config.yaml). Each round, in this
order so that a change in machine load hits all alike:
  raw      the same model in a plain loop in a process with a replica's environment
           (benches/nlp_load/raw_model.py): batch sizes 1, 4, 16 over the 476 messages, and
           long posts one at a time;
  service  through the replicas' own listener (the shipped path) and through Serve's HTTP
           proxy: concurrency 1 (latency) and 2 x max_batch_size (saturation), with the cache
           on but unable to hit (a 1 ms TTL: the messages repeat); long posts at concurrency 1;
           then a spam flood (one message 90 % of the time, every other text unique) at
           saturation with the shipped cache and, redeployed, with the cache off.
The service's CPU is that of every process in its Unix session (GCS, raylet, agents, Serve's
controller and proxy, the replicas); the load generator (loadgen.py) is another process, in
another session, whose CPU is reported apart. After the rounds, --layouts redeploys
replicas x ONNX Runtime threads combinations once each against raw loops with the same cores.
Prints every figure as median (min–max) over rounds and the targets; --write-readme puts the
tables into benches/nlp_load/README.md. Only 127.0.0.1 is contacted; every process is stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

from benches.nlp_load import report
from benches.nlp_load.loadgen import message_texts
from benches.nlp_load.raw_model import long_texts, run_subprocess
from benches.nlp_load.service_under_test import ServiceUnderTest, config_file
from nlp.app_spec import load_app_spec
from nlp.config import ServiceConfig

REPO = Path(__file__).resolve().parents[2]
README = Path(__file__).with_name("README.md")
MESSAGES = REPO / "nlp" / "data" / "messages.jsonl"
SHIPPED = ServiceConfig.from_mapping(load_app_spec().args).serving
BATCH = SHIPPED.max_batch_size  # saturation: 2 x BATCH texts in flight per replica


def raw_loops(replicas: int, seconds: float, batch_sizes: list[int], long: bool, config: Path | None = None) -> dict:
    """The raw loop with the service's cores: one process per replica, all at once; texts/s
    add up, latencies and CPU per text are those of the first."""
    with ThreadPoolExecutor(replicas) as pool:
        runs = list(pool.map(lambda _: run_subprocess(seconds, batch_sizes, long, config=config), range(replicas)))
    combined = runs[0]
    for size, figures in combined["batch"].items():
        figures["texts_per_s"] = sum(run["batch"][size]["texts_per_s"] for run in runs)
    combined["processes"] = replicas
    return combined


def flood_text() -> str:
    spam = [json.loads(line) for line in MESSAGES.read_text().splitlines() if '"spam"' in line]
    return spam[0]["text"]


def one_round(service: ServiceUnderTest, configs: dict[str, Path], args: argparse.Namespace, index: int) -> dict:
    seconds, warmup = args.seconds, args.warmup
    measure = service.measure
    r: dict = {}
    if index:
        service.redeploy(configs["no_repeat"])
    saturation = 2 * BATCH * SHIPPED.num_replicas
    r["raw"] = raw_loops(SHIPPED.num_replicas, args.raw_seconds, [1, 4, BATCH], long=True)
    r["fast_c1"] = measure(1, seconds, warmup).as_dict()
    r["fast_sat"] = measure(saturation, seconds, warmup).as_dict()
    r["serve_c1"] = measure(1, seconds, warmup, serve_proxy=True).as_dict()
    r["serve_sat"] = measure(saturation, seconds, warmup, serve_proxy=True).as_dict()
    r["long_c1"] = measure(1, seconds, warmup, texts=long_texts(message_texts())).as_dict()
    service.redeploy(configs["shipped"])
    r["flood_cache"] = measure(saturation, seconds, warmup, flood_text=flood_text()).as_dict()
    service.redeploy(configs["no_cache"])
    r["flood_nocache"] = measure(saturation, seconds, warmup, flood_text=flood_text()).as_dict()
    return r


def measure_layouts(service: ServiceUnderTest, work: Path, args: argparse.Namespace) -> list[dict]:
    layouts = []
    for name in args.layouts:
        replicas, threads = (int(part) for part in name.split("x"))
        # Capacity is what is compared here, so admission is relaxed: Linux spreads the
        # client's connections over the replicas' shared port unevenly, and with the shipped
        # 0.25 s budget the busier replica would refuse while the other idles.
        serving = {"num_replicas": replicas, "num_cpus_per_replica": threads, "omp_num_threads": threads,
                   "queue_timeout_s": 5.0, "max_queued_texts": 256}
        config = config_file(work, f"layout-{name}", serving=serving, model={"intra_op_threads": threads},
                             cache={"ttl_s": 0.001})
        service.redeploy(config)
        raw = raw_loops(replicas, args.raw_seconds, [BATCH], long=False, config=config)
        sat = service.measure(2 * BATCH * replicas, args.seconds, args.warmup).as_dict()
        c1 = service.measure(1, args.seconds, args.warmup).as_dict()
        layouts.append({"name": name, "raw_texts_per_s": raw["batch"][str(BATCH)]["texts_per_s"],
                        "sat": sat, "c1": c1})
        print(f"layout {name}: {sat['requests_per_s']:.1f} texts/s at saturation", file=sys.stderr)
    return layouts


def markdown(args: argparse.Namespace, rounds: list[dict], figures: list[dict], layouts: list[dict],
             load: tuple[float, float]) -> str:
    command = "`" + " ".join([".venv/bin/python -m benches.nlp_load.run", *args.argv]) + "`"
    lines = [
        f"{command} ({date.today().isoformat()}, {platform.node()}, {os.cpu_count()} CPUs, load average "
        f"{load[0]:.1f} before / {load[1]:.1f} after; {args.rounds} round(s), {args.seconds:g} s per "
        f"measurement after {args.warmup:g} s of warm-up):",
    ]
    if rounds:
        lines += [
            "",
            *report.targets_table(figures),
            "",
            *report.doors_table(figures),
            "",
            *report.raw_table([r["raw"] for r in rounds]),
            "",
            *report.other_table(figures),
            "",
            "Where the service's CPU went at saturation (last round): through the replica's listener: "
            + report.cpu_roles_line(rounds[-1]["fast_sat"]) + "; through Serve's proxy: "
            + report.cpu_roles_line(rounds[-1]["serve_sat"]) + ".",
        ]
    if layouts:
        lines += ["", *report.layouts_table(layouts)]
    return "\n".join(lines)


def write_readme(text: str) -> None:
    start, end = "<!-- bench:start -->", "<!-- bench:end -->"
    readme = README.read_text()
    head, _, rest = readme.partition(start)
    _, _, tail = rest.partition(end)
    README.write_text(f"{head}{start}\n{text}\n{end}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="per service measurement")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--raw-seconds", type=float, default=5.0, help="per raw batch size")
    parser.add_argument("--layouts", nargs="*", default=["1x1", "2x1", "1x2"],
                        help="replicas x ORT threads to compare after the rounds (none: skip)")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--write-readme", action="store_true", help="put the tables into the README")
    args = parser.parse_args()
    args.argv = sys.argv[1:]
    args.layouts = [name for name in args.layouts if name != "none"]

    load_before = os.getloadavg()[0]
    rounds: list[dict] = []
    layouts: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="nlp-bench-") as tmp:
        work = Path(tmp)
        configs = {
            # The 476 messages repeat every few seconds under load: with the shipped TTL they
            # would be answered from the cache. A 1 ms TTL keeps every step of the cache (key,
            # lookup, store) and lets none hit, so the model path is what is compared.
            "no_repeat": config_file(work, "no-repeat", cache={"ttl_s": 0.001}),
            "shipped": config_file(work, "shipped"),
            "no_cache": config_file(work, "no-cache", cache={"max_entries": 0}),
        }
        service = ServiceUnderTest(work)
        try:
            service.start(configs["no_repeat"])
            for index in range(args.rounds):
                started = time.monotonic()
                rounds.append(one_round(service, configs, args, index))
                figures = report.round_figures(rounds[-1])
                print(f"round {index}: {time.monotonic() - started:.0f} s; throughput ratio "
                      f"{figures['throughput_ratio']:.2f}, p50 delta {figures['p50_delta_ms']:.1f} ms, CPU ratio "
                      f"{figures['cpu_ratio']:.2f}, flood ratio {figures['flood_ratio']:.1f}", file=sys.stderr)
            layouts = measure_layouts(service, work, args) if args.layouts else []
        finally:
            service.stop()
    figures = [report.round_figures(r) for r in rounds]
    text = markdown(args, rounds, figures, layouts, (load_before, os.getloadavg()[0]))
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "figures": figures, "layouts": layouts}, indent=1))
    if args.write_readme:
        write_readme(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
