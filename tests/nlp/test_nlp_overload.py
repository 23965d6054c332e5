"""Far more texts than the service can take: bounded queue, fast 503s, and through a real Envoy
the filter fails open within its timeout; nothing hangs, and the service serves on afterwards.

The service is started (nlp.run, its own Ray head) with the smallest admission limits (one
text running, one queued, 0.1 s in the queue at most) so that 24 clients in a closed loop
overrun it whatever the machine's speed: on a loaded machine a client spends most of its loop
in Python and Envoy, not at the service, so wider limits let the service keep up with all 24.
Every text is unique, so no cache can absorb the load. (Not more clients: the recording
upstream behind Envoy is a Python server with a listen backlog of 5.) Needs `make build` for
the Envoy part.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from demo import traffic
from harness import render_envoy
from harness.loopback import free_port
from harness.require import require_build
from nlp.app_spec import DEFAULT_CONFIG_PATH

REPO = Path(__file__).resolve().parents[2]
CLIENTS = 24
BURST_S = 3.0
LIMITS = {"num_replicas": 1, "max_batch_size": 1, "max_queued_texts": 1, "queue_timeout_s": 0.1}
TIMEOUT_S = render_envoy.text_config()["timeout_ms"] / 1000
# What a request may take beyond the NLP timeout on a loaded CI machine: a bound that tells
# failing open from waiting on the overloaded service (benches/nlp_load measures the times).
MARGIN_S = 5.0


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nlp.run", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    work = tmp_path_factory.mktemp("overload")
    document = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    document["applications"][0]["args"]["serving"].update(LIMITS, max_ongoing_requests=None)
    config = work / "small.yaml"
    config.write_text(yaml.safe_dump(document))
    port = free_port()
    started = _run("start", "--port", str(port), "--state-dir", str(work / "state"), "--config", str(config))
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield port
    finally:
        stopped = _run("stop", "--state-dir", str(work / "state"), timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def _stats(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/stats")
    return json.loads(conn.getresponse().read())


def _burst(send) -> list[tuple[float, object]]:
    """CLIENTS threads, each sending unique benign texts back to back for BURST_S."""
    deadline = time.monotonic() + BURST_S

    def client(index: int) -> list[tuple[float, object]]:
        out, n = [], 0
        while time.monotonic() < deadline:
            n += 1
            text = f"see you at practice tomorrow, client {index} message {n}"
            started = time.perf_counter()
            answer = send(text)
            out.append((time.perf_counter() - started, answer))
        return out

    with ThreadPoolExecutor(CLIENTS) as pool:
        return [item for result in pool.map(client, range(CLIENTS)) for item in result]


def test_past_capacity_the_service_answers_503_at_once(service):
    def send(text: str):
        conn = http.client.HTTPConnection("127.0.0.1", service, timeout=30)
        try:
            conn.request("POST", "/score", json.dumps({"text": text}).encode())
            response = conn.getresponse()
            return response.status, json.loads(response.read()), response.getheader("retry-after")
        finally:
            conn.close()

    before = _stats(service)
    answers = _burst(send)
    after = _stats(service)
    statuses = [status for _, (status, _, _) in answers]
    refused = [(took, body) for took, (status, body, _) in answers if status == 503]
    assert set(statuses) <= {200, 503}, set(statuses)
    assert statuses.count(200) > 0 and refused, "expected both verdicts and refusals at this load"
    assert {body["error"] for _, body in refused} <= {"overloaded", "queue_timeout"}
    assert all(retry == "1" for _, (status, _, retry) in answers if status == 503)
    # A full queue answers at once; a timed-out text after queue_timeout_s, not the client's.
    assert statistics.median(took for took, _ in refused) < 0.25
    assert max(took for took, _ in answers) < 5.0, "a request hung"
    assert after["overloaded"] - before["overloaded"] == len(refused)
    assert after["failed"] - before["failed"] == len(refused)
    assert after["queued_texts"] <= LIMITS["max_queued_texts"]


def test_through_envoy_the_filter_fails_open_within_its_timeout(service, upstream, start_envoy):
    require_build()
    cfg = render_envoy.load_config()
    cfg["admin"]["address"]["socket_address"]["port_value"] = 0
    cfg["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] = 0
    render_envoy.wasm_filter(cfg)["vm_config"]["code"]["local"]["filename"] = str(render_envoy.WASM)
    render_envoy.set_cluster_address(cfg, "backend", "127.0.0.1", upstream.port)
    render_envoy.set_cluster_address(cfg, "nlp", "127.0.0.1", service)
    edge = start_envoy(cfg, "overload")
    form = traffic.chat("overload", "ok", b"")

    def send(text: str):
        body = json.dumps({"message": text, "channel": "general"}).encode()
        response = edge.send(dataclasses.replace(form, body=body))
        return response.status if response.status == 200 else (response.status, response.body[:200], response.headers)

    upstream.take()
    overloaded_before = _stats(service)["overloaded"]
    answers = _burst(send)
    records = upstream.take()
    others = [answer for _, answer in answers if answer != 200]
    assert not others, f"every request goes on (benign, or failed open): {len(others)} did not, e.g. {others[:2]}"
    slowest = max(took for took, _ in answers)
    assert slowest <= TIMEOUT_S + MARGIN_S, f"a request took {slowest:.3f} s"
    text_headers = [value for rec in records for name, value in rec["headers"] if name == "x-edgescore-text"]
    assert len(text_headers) == len(answers)
    failed_open = [v for v in text_headers if v.startswith("error=")]
    scored = [v for v in text_headers if "label=" in v]
    assert failed_open and scored, (len(failed_open), len(scored))
    assert set(failed_open) == {"error=status"}  # a non-2xx answer (the service's 503s)
    assert _stats(service)["overloaded"] - overloaded_before > 0
    # Afterwards the queue is empty and a text gets its verdict at once.
    assert _stats(service)["queued_texts"] == 0
    assert send("good game everyone") == 200
    (after,) = upstream.take()
    assert "label=ok" in dict(after["headers"])["x-edgescore-text"]
