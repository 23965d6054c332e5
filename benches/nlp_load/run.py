"""Load test of the NLP service's POST /score: batched versus max_batch_size=1.

    .venv/bin/python -m benches.nlp_load.run [--seconds 10] [--rounds 2] [--concurrency 1 8 32]

It starts the service once on a local Ray head of its own (nlp.run, a free loopback port)
and drives it with an asyncio client (aiohttp) at each concurrency level, for a fixed time
after a warm-up. The two configurations are measured in alternating rounds (batched,
unbatched, unbatched, batched, ...), redeploying the app onto the same head between them,
so that a change in machine load (this machine is shared) hits both alike; each table
row pools all rounds. Texts are the chat messages of nlp/data/messages.jsonl in a fixed
order. Only 127.0.0.1 is contacted; every loop is bounded in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from demo.loopback import free_port

REPO = Path(__file__).resolve().parents[2]
MESSAGES = REPO / "nlp" / "data" / "messages.jsonl"


def nlp_run(*args: str, env: dict | None = None) -> None:
    full_env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    done = subprocess.run([sys.executable, "-m", "nlp.run", *args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=400)
    if done.returncode != 0:
        raise SystemExit(f"nlp.run {' '.join(args)} failed:\n{done.stdout}{done.stderr}")


async def drive(url: str, texts: list[str], concurrency: int, seconds: float, warmup: float) -> list[float]:
    """Latencies of the requests started after the warm-up; raises if any failed."""
    latencies: list[float] = []
    errors = 0
    counter = iter(range(10**9))
    measure_from = time.perf_counter() + warmup
    stop_at = measure_from + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        while (now := time.perf_counter()) < stop_at:
            text = texts[next(counter) % len(texts)]
            async with session.post(url, json={"text": text}) as response:
                await response.read()
                ok = response.status == 200
            if now >= measure_from:
                if ok:
                    latencies.append(time.perf_counter() - now)
                else:
                    errors += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    if errors:
        raise SystemExit(f"{errors} requests failed at concurrency {concurrency}")
    return latencies


def summary(config: str, concurrency: int, latencies: list[float], seconds: float) -> dict:
    latencies = sorted(latencies)
    return {
        "config": config,
        "concurrency": concurrency,
        "requests": len(latencies),
        "throughput_rps": len(latencies) / seconds,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per level and round")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--max-ongoing-requests", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()

    texts = [json.loads(line)["text"] for line in MESSAGES.read_text().splitlines() if line.strip()]
    configs = {
        f"batched (max_batch_size={args.max_batch_size})": args.max_batch_size,
        "unbatched (max_batch_size=1)": 1,
    }
    latencies: dict[tuple[str, int], list[float]] = {}
    port = free_port()
    common = ["--replicas", str(args.replicas), "--max-ongoing-requests", str(args.max_ongoing_requests)]
    with tempfile.TemporaryDirectory(prefix="nlp-bench-") as state_dir:
        first_batch_size = next(iter(configs.values()))
        nlp_run("start", "--port", str(port), "--state-dir", state_dir,
                "--max-batch-size", str(first_batch_size), *common)
        try:
            state = json.loads((Path(state_dir) / "nlp-service.json").read_text())
            cluster_env = {"RAY_ADDRESS": state["gcs_address"], "RAY_AUTH_MODE": "token"}
            deployed = first_batch_size
            url = f"http://127.0.0.1:{port}/score"
            for round_index in range(args.rounds):
                names = list(configs) if round_index % 2 == 0 else list(reversed(configs))
                for name in names:
                    if configs[name] != deployed:  # redeploy the app on the same head
                        nlp_run("start", "--state-dir", str(Path(state_dir) / "redeploy"),
                                "--max-batch-size", str(configs[name]), *common, env=cluster_env)
                        deployed = configs[name]
                    for concurrency in args.concurrency:
                        measured = asyncio.run(drive(url, texts, concurrency, args.seconds, args.warmup))
                        latencies.setdefault((name, concurrency), []).extend(measured)
                        print(f"round {round_index} {name} c={concurrency}: "
                              f"{len(measured) / args.seconds:.1f} req/s", file=sys.stderr)
        finally:
            nlp_run("stop", "--state-dir", state_dir)

    total_seconds = args.seconds * args.rounds
    rows = [summary(name, c, latencies[(name, c)], total_seconds)
            for name in configs for c in args.concurrency]
    print(f"\n{platform.node()}: {os.cpu_count()} CPUs (load average before/after: see the "
          f"README), {args.replicas} replica(s), {args.rounds} alternating rounds x "
          f"{args.seconds:g}s per level after {args.warmup:g}s warm-up, "
          f"max_ongoing_requests={args.max_ongoing_requests}\n")
    print("| config | concurrency | throughput (req/s) | p50 (ms) | p99 (ms) | requests |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['config']} | {row['concurrency']} | {row['throughput_rps']:.1f} | "
              f"{row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {row['requests']} |")
    print()
    batched_name, unbatched_name = configs
    for c in args.concurrency:
        ratio = len(latencies[(batched_name, c)]) / len(latencies[(unbatched_name, c)])
        print(f"concurrency {c}: batched / unbatched throughput = {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
