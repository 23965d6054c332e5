"""A lean closed-loop HTTP/1.1 load generator for POST /score, run as its own process.

    python -m benches.nlp_load.loadgen --port P --concurrency N --seconds S [--warmup W]
        [--texts FILE] [--repeat-text T --repeat-share 0.9] [--unique] [--path /score]

N workers each keep one kept-alive connection and one request in flight (closed loop), for
`warmup + seconds`; requests started after the warm-up are measured. Request bytes are built
once per text, responses are read by Content-Length: the client costs a few tens of µs of
CPU per request, and because it is a separate process its CPU is measured apart from the
service's (it reports its own, from getrusage). Prints one JSON object: latencies (ms) of the
measured 200s, counts per status, and the client's CPU seconds. Before it, the lines
`start` and `stop` mark the measured window as it opens and closes, so that a caller can
read the service's CPU counters at exactly those moments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MESSAGES = REPO / "nlp" / "data" / "messages.jsonl"


def message_texts() -> list[str]:
    return [json.loads(line)["text"] for line in MESSAGES.read_text().splitlines() if line.strip()]


def score_request(path: str, text: str) -> bytes:
    body = json.dumps({"text": text}).encode()
    head = (f"POST {path} HTTP/1.1\r\nhost: nlp\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()
    return head + body


class TextChooser:
    """Texts in a fixed order; with a repeat share, that text instead, by a seeded coin.

    unique: every text but the repeated one gets a request number appended, so that only
    the repeated text can ever be answered from a cache (a flood over otherwise fresh traffic).
    """

    def __init__(self, path: str, texts: list[str], repeat_text: str | None, repeat_share: float,
                 unique: bool = False, seed: int = 7):
        self.path, self.texts, self.unique = path, texts, unique
        self.requests = [score_request(path, t) for t in texts]
        self.repeat = score_request(path, repeat_text) if repeat_text is not None else None
        self.share = repeat_share
        self.rng = random.Random(seed)
        self.index = 0

    def next(self) -> bytes:
        if self.repeat is not None and self.rng.random() < self.share:
            return self.repeat
        self.index += 1
        if self.unique:
            return score_request(self.path, f"{self.texts[self.index % len(self.texts)]} #{self.index}")
        return self.requests[self.index % len(self.requests)]


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, keep-alive) of one response; its body is read and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length, keep_alive = 0, True
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            keep_alive = False
    if length:
        await reader.readexactly(length)
    return status, keep_alive


async def worker(address: tuple[str, int], chooser: TextChooser, measure_from: float, stop_at: float,
                 out: dict) -> None:
    reader = writer = None
    while (started := time.perf_counter()) < stop_at:
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(*address)
            writer.write(chooser.next())
            status, keep_alive = await read_response(reader)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            status, keep_alive = 0, False  # refused or reset: counted as status 0
        done = time.perf_counter()
        if started >= measure_from:
            out["statuses"][status] = out["statuses"].get(status, 0) + 1
            if status == 200:
                out["latencies_ms"].append(1000 * (done - started))
        if not keep_alive and writer is not None:
            writer.close()
            reader = writer = None
            if status == 0:
                await asyncio.sleep(0.01)  # do not spin on a refusing port
    if writer is not None:
        writer.close()


async def mark_window(measure_from: float, stop_at: float, cpu: dict) -> None:
    await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
    print("start", flush=True)
    cpu["start"] = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
    print("stop", flush=True)
    cpu["stop"] = resource.getrusage(resource.RUSAGE_SELF)


async def run(args: argparse.Namespace, chooser: TextChooser) -> dict:
    out: dict = {"latencies_ms": [], "statuses": {}}
    measure_from = time.perf_counter() + args.warmup
    stop_at = measure_from + args.seconds
    cpu: dict = {}
    address = (args.host, args.port)
    await asyncio.gather(
        mark_window(measure_from, stop_at, cpu),
        *(worker(address, chooser, measure_from, stop_at, out) for _ in range(args.concurrency)),
    )
    before, after = cpu["start"], cpu["stop"]
    out["client_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["seconds"] = args.seconds
    out["statuses"] = {str(k): v for k, v in sorted(out["statuses"].items())}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/score")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--texts", type=Path, help="JSON list of texts (default: the 476 messages)")
    parser.add_argument("--repeat-text", help="one text sent instead of the next, --repeat-share of the time")
    parser.add_argument("--repeat-share", type=float, default=0.0)
    parser.add_argument("--unique", action="store_true", help="make every text but the repeated one unique")
    args = parser.parse_args(argv)
    texts = json.loads(args.texts.read_text()) if args.texts else message_texts()
    chooser = TextChooser(args.path, texts, args.repeat_text, args.repeat_share, args.unique)
    try:
        import uvloop  # lower client CPU per request; ray[serve] brings it
        result = uvloop.run(run(args, chooser))
    except ImportError:
        result = asyncio.run(run(args, chooser))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
