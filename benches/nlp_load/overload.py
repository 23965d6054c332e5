"""Envoy and the filter at twice the NLP service's capacity, open loop (through_envoy.py).

The capacity is measured first, closed loop, straight at the service (saturation: 32 texts
in flight, every text unique so the cache cannot help). Then chat POSTs go to Envoy at twice
that rate for a fixed time, on a schedule that does not wait for answers (a closed loop would
slow down with the service and never overload it). Each qualifying request makes the filter
call the service; what the service cannot take it refuses at once (503), and the filter lets
those requests through without a verdict (fail-open). Reported: offered and answered rates,
verdicts versus fail-opens (the filter's counters), the service's refusals (its /stats), and
the latency of every request against the filter's timeout.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from benches.nlp_load.loadgen import read_response

REPO = Path(__file__).resolve().parents[2]
MARGIN_MS = 250  # beyond the filter's timeout: Envoy's timer and this Python client on a busy machine
MAX_CONNECTIONS = 1024


def capacity(service_port: int, seconds: float = 5.0) -> float:
    done = subprocess.run(
        [sys.executable, "-m", "benches.nlp_load.loadgen", "--port", str(service_port), "--concurrency", "32",
         "--seconds", str(seconds), "--warmup", "1", "--unique"],
        cwd=REPO, capture_output=True, text=True, timeout=seconds + 120, check=True,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    return len(result["latencies_ms"]) / seconds


def chat_request(headers: list[tuple[str, str]], text: str) -> bytes:
    body = json.dumps({"message": text, "channel": "general"}).encode()
    lines = ["POST /api/chat/messages HTTP/1.1", *(f"{k}: {v}" for k, v in headers), f"content-length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def open_loop(port: int, rate: float, seconds: float, request_for) -> list[tuple[float, int]]:
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    results: list[tuple[float, int]] = []
    in_flight = 0

    async def one(index: int) -> None:
        nonlocal in_flight
        started = time.perf_counter()
        connection = idle.pop() if idle else None
        try:
            if connection is None:
                connection = await asyncio.open_connection("127.0.0.1", port)
            reader, writer = connection
            writer.write(request_for(index))
            status, keep_alive = await read_response(reader)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            status, keep_alive = 0, False
        results.append((time.perf_counter() - started, status))
        if keep_alive and connection is not None:
            idle.append(connection)
        elif connection is not None:
            connection[1].close()
        in_flight -= 1

    tasks = []
    start = time.perf_counter()
    for index in range(int(rate * seconds)):
        delay = start + index / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if in_flight >= MAX_CONNECTIONS:
            results.append((0.0, -1))  # the client's own limit: counted, not sent
            continue
        in_flight += 1
        tasks.append(asyncio.create_task(one(index)))
    await asyncio.gather(*tasks)
    for _, writer in idle:
        writer.close()
    return results


def run(envoy, listener_port: int, service_port: int, texts: list[str], json_headers: list[tuple[str, str]],
        seconds: float, timeout_ms: int) -> dict:
    def service_stats() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{service_port}/stats", timeout=30) as response:
            return json.loads(response.read())

    def filter_counters() -> dict:
        return envoy.stats(r"wasmcustom\.edgescore\.text\.")

    capacity_rps = capacity(service_port)
    rate = 2 * capacity_rps
    service_before, filter_before = service_stats(), filter_counters()

    def request_for(index: int) -> bytes:  # unique texts: the cache cannot absorb the load
        return chat_request(json_headers, f"{texts[index % len(texts)]} #{index}")

    results = asyncio.run(open_loop(listener_port, rate, seconds, request_for))
    time.sleep(2)  # the filter hands its counts to Envoy every second
    service_after, filter_after = service_stats(), filter_counters()
    latencies = sorted(1000 * took for took, status in results if status > 0)
    statuses: dict[str, int] = {}
    for _, status in results:
        statuses[str(status)] = statuses.get(str(status), 0) + 1

    def filter_delta(name: str) -> int:
        key = f"wasmcustom.edgescore.text.{name}"
        return filter_after.get(key, 0) - filter_before.get(key, 0)

    return {
        "capacity_rps": capacity_rps,
        "offered_rps": rate,
        "seconds": seconds,
        "statuses": statuses,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "max_ms": latencies[-1],
        "timeout_ms": timeout_ms,
        "within_timeout": latencies[-1] <= timeout_ms + MARGIN_MS and set(statuses) <= {"200", "403"},
        "text_calls": filter_delta("calls"),
        "text_errors": filter_delta("errors"),
        "text_timeouts": filter_delta("timeouts"),
        "service_scored": service_after["scored"] - service_before["scored"],
        "service_overloaded": service_after["overloaded"] - service_before["overloaded"],
        "service_queued_texts_after": service_after["queued_texts"],
    }


def describe(r: dict) -> str:
    answered = sum(n for status, n in r["statuses"].items() if status in ("200", "403"))
    return "\n".join([
        f"Overload: the service's capacity measured directly {r['capacity_rps']:.0f} texts/s; Envoy offered "
        f"{r['offered_rps']:.0f} qualifying requests/s for {r['seconds']:g} s (open loop):",
        "",
        "| | |",
        "|---|---|",
        f"| requests answered by Envoy (200/403) | {answered} of {sum(r['statuses'].values())} ({r['statuses']}) |",
        f"| with a verdict (service answered 200) | {r['service_scored']} |",
        f"| failed open (filter errors; of them timeouts) | {r['text_errors']} ({r['text_timeouts']}) |",
        f"| refused by the service at once (503, its /stats) | {r['service_overloaded']} |",
        f"| latency of every request p50 / p99 / max (ms) | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} / {r['max_ms']:.1f} |",
        f"| the filter's timeout (ms) | {r['timeout_ms']} — {'nothing exceeded it' if r['within_timeout'] else 'EXCEEDED'} |",
        f"| texts left in the service's queue afterwards | {r['service_queued_texts_after']} |",
    ])
