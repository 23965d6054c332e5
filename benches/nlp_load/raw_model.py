"""The floor: the service's own model called in a plain Python loop, no Ray, no HTTP.

    python -m benches.nlp_load.raw_model [--seconds 5] [--batch-sizes 1 4 16] [--long]

The same TextClassifier the replicas run (encoder + head, tokenizer, ONNX Runtime session
options and thread counts from nlp/serve_config.yaml's `model` section), in a process whose
environment is a replica's (nlp.app.replica_env: OMP/BLAS threads, tokenizer parallelism).
For each batch size it scores the 476 messages of nlp/data/messages.jsonl in order, in
batches of that size, for a fixed time; with --long, the long posts of long_texts() one at a
time. Prints JSON: per batch size, texts/s, per-call latency (ms) and CPU seconds per 1,000
texts (process CPU: every thread of the process, ONNX Runtime's included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def long_texts(messages: list[str], count: int = 8, min_chars: int = 800) -> list[str]:
    """Posts of about 800 characters (~200 tokens: two windows and ~10 sentences each),
    made of consecutive messages, so the long lane has work the model sees as a long text."""
    posts, current = [], []
    for message in messages:
        current.append(message.rstrip(".!? ") + ".")
        if sum(len(m) + 1 for m in current) >= min_chars:
            posts.append(" ".join(current))
            current = []
            if len(posts) == count:
                break
    return posts


def measure(score, batches: list[list[str]], seconds: float) -> dict:
    for batch in batches[:2]:  # warm-up: ORT's first runs allocate
        score(batch)
    texts, calls = 0, []
    cpu_before, started = time.process_time(), time.perf_counter()
    i = 0
    while (now := time.perf_counter()) - started < seconds:
        batch = batches[i % len(batches)]
        score(batch)
        calls.append(time.perf_counter() - now)
        texts += len(batch)
        i += 1
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_before
    calls.sort()
    return {
        "texts": texts,
        "texts_per_s": texts / wall,
        "call_p50_ms": 1000 * statistics.median(calls),
        "call_p99_ms": 1000 * calls[min(len(calls) - 1, int(0.99 * len(calls)))],
        "cpu_s_per_1000": 1000 * cpu / texts,
    }


def run_in_process(args: argparse.Namespace) -> dict:
    from benches.nlp_load.loadgen import message_texts
    from nlp.app_spec import load_app_spec
    from nlp.config import ServiceConfig
    from nlp.model import TextClassifier

    config = ServiceConfig.from_mapping(load_app_spec(args.config).args)
    classifier = TextClassifier(config.model)
    messages = message_texts()
    out: dict = {"model": classifier.model_id, "intra_op_threads": config.model.intra_op_threads, "batch": {}}
    for size in args.batch_sizes:
        batches = [messages[i : i + size] for i in range(0, len(messages) - size + 1, size)]
        out["batch"][str(size)] = measure(classifier.score_batch, batches, args.seconds)
    if args.long:
        posts = [[post] for post in long_texts(messages)]
        out["long"] = measure(classifier.score_batch, posts, args.seconds)
        out["long"]["windows_per_text"] = statistics.fmean(
            len(classifier.prepare(post).windows) for post in posts
        )
    return out


def run_subprocess(seconds: float, batch_sizes: list[int], long: bool, config: Path | None = None) -> dict:
    """This module in a process of its own with a replica's environment (the bench's call)."""
    from nlp.app import replica_env
    from nlp.app_spec import DEFAULT_CONFIG_PATH, load_app_spec
    from nlp.config import ServiceConfig

    config = config or DEFAULT_CONFIG_PATH
    env = dict(os.environ, **replica_env(ServiceConfig.from_mapping(load_app_spec(config).args)))
    command = [sys.executable, "-m", "benches.nlp_load.raw_model", "--seconds", str(seconds),
               "--config", str(config), "--batch-sizes", *map(str, batch_sizes)] + (["--long"] if long else [])
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120 + 2 * seconds * (len(batch_sizes) + 1))
    if done.returncode != 0:
        raise RuntimeError(f"the raw model loop failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    from nlp.app_spec import DEFAULT_CONFIG_PATH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per batch size")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--long", action="store_true", help="also the long posts, one at a time")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)
    args = parser.parse_args(argv)
    json.dump(run_in_process(args), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
