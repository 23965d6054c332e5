"""The real Ray Serve application on a local Ray head started by nlp.run (once per module).

Requests go to the service port (the replicas' own listener) unless a test says otherwise;
Serve's HTTP proxy is the state file's `serve_port`. Everything binds to 127.0.0.1; the
fixture's teardown stops the head through nlp.run and checks that no process of the
supervisor's session is left.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nlp.local_service import read_state
from nlp.model_files import HEAD_PATH, sha256_of
from nlp.process_session import session_processes

REPO = Path(__file__).resolve().parents[2]
BENIGN = (
    "We met at the library after school and worked through the chemistry worksheet. "
    "Then we walked to the bus stop and planned the weekend trip to the mountains. "
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nlp.run", *args], cwd=REPO, capture_output=True, text=True,
        timeout=timeout, env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})),
    )


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    state_dir = tmp_path_factory.mktemp("nlp-service")
    port = _free_port()
    started = _run("start", "--port", str(port), "--state-dir", str(state_dir), "--replicas", "1")
    state = read_state(state_dir)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield {"port": port, "state": state, "state_dir": state_dir}
    finally:
        stopped = _run("stop", "--state-dir", str(state_dir), timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        if state:
            assert session_processes(state["session"]) == []
            assert not Path(state["ray_temp_dir"]).exists()


def request(service, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
            chunked: bool = False, port: int | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port or service["port"], timeout=120)
    try:
        if chunked:
            conn.putrequest(method, path)
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            for start in range(0, len(body), 8192):
                piece = body[start : start + 8192]
                conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            conn.send(b"0\r\n\r\n")
        else:
            conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def score(service, text: str, port: int | None = None) -> dict:
    status, payload = request(service, "POST", "/score", json.dumps({"text": text}).encode(),
                              {"Content-Type": "application/json"}, port=port)
    assert status == 200, payload
    return payload


def stats(service) -> dict:
    status, payload = request(service, "GET", "/stats")
    assert status == 200
    return payload


def test_score_contract(service):
    result = score(service, "i know where you live and im coming for you")
    assert set(result) == {"score", "label", "labels", "model"}
    assert result["label"] == "threat" and result["score"] > 0.5
    assert set(result["labels"]) == {"toxic", "threat", "sexual", "spam", "ok"}
    assert abs(result["score"] - (1 - result["labels"]["ok"])) < 1e-6
    assert result["model"].startswith("all-MiniLM-L6-v2-int8+chat-head@")
    assert score(service, "gg wp, nice game everyone")["label"] == "ok"


def test_health(service):
    status, payload = request(service, "GET", "/healthz")
    assert status == 200 and payload["status"] == "ok"


def test_serve_proxy_is_the_same_service(service):
    """Serve's HTTP proxy reaches the same replicas: same answers, same counters."""
    serve_port = service["state"]["serve_port"]
    assert serve_port != service["port"]
    assert request(service, "GET", "/healthz", port=serve_port) == request(service, "GET", "/healthz")
    text = "did anyone finish the map yet"
    assert score(service, text, port=serve_port) == score(service, text)
    assert request(service, "POST", "/score", b"{oops", port=serve_port)[1]["error"] == "invalid_json"
    assert request(service, "GET", "/stats", port=serve_port)[1] == stats(service)


def test_prometheus_metrics(service):
    conn = http.client.HTTPConnection("127.0.0.1", service["port"], timeout=30)
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    body = response.read().decode()
    assert response.status == 200 and response.getheader("content-type").startswith("text/plain")
    requests_total = int(re.search(r"^edgescore_nlp_requests_total (\d+)$", body, re.M).group(1))
    assert requests_total == stats(service)["requests"]
    assert re.search(r'^edgescore_nlp_info\{model="all-MiniLM-L6-v2-int8\+chat-head@\w+"\} 1$', body, re.M)


@pytest.mark.parametrize(
    "body,code",
    [(b"{not json", "invalid_json"), (b'{"message": "hi"}', "missing_text"),
     (b'{"text": 42}', "text_not_string"), (b"", "empty_body"), (b"\x89PNG\r\n\x1a\n", "invalid_utf8")],
)
def test_bad_requests(service, body, code):
    status, payload = request(service, "POST", "/score", body)
    assert status == 400 and payload["error"] == code and payload["message"]


def test_oversize_body_is_413_declared_or_chunked(service):
    big = json.dumps({"text": "a" * 70_000}).encode()
    status, payload = request(service, "POST", "/score", big)
    assert status == 413 and payload["error"] == "too_large"
    status, payload = request(service, "POST", "/score", big, chunked=True)
    assert status == 413 and payload["error"] == "too_large"


def test_wrong_method_and_route(service):
    assert request(service, "GET", "/score")[0] == 405
    assert request(service, "POST", "/healthz", b"{}")[0] == 405
    assert request(service, "GET", "/nope")[0] == 404


def test_stats_count_score_requests_only(service):
    before = stats(service)
    request(service, "GET", "/healthz")
    request(service, "GET", "/stats")
    request(service, "GET", "/score")  # 405: never reaches the model
    assert stats(service)["requests"] == before["requests"]
    score(service, "hello")
    score(service, "   ")
    request(service, "POST", "/score", b"{oops")
    after = stats(service)
    assert after["requests"] == before["requests"] + 3
    assert after["scored"] == before["scored"] + 2
    assert after["blank"] == before["blank"] + 1
    assert after["model_texts"] == before["model_texts"] + 1
    assert after["rejected"] == before["rejected"] + 1
    assert after["cache_misses"] == before["cache_misses"] + 1


def test_a_repeated_text_is_answered_from_the_cache(service):
    first = score(service, "come to my server for free skins")
    before = stats(service)
    assert score(service, "Come to my server for FREE skins") == first
    after = stats(service)
    assert after["cache_hits"] == before["cache_hits"] + 1
    assert after["model_texts"] == before["model_texts"]
    assert after["cache_entries"] >= 1


def score_together(service, texts: list[str]) -> list[dict]:
    """Scores `texts` over a connection each, the requests completed at one moment: each is
    sent but its last byte, then the last bytes go out together. Requests sent whole from
    threads reach a busy machine's replica one by one, and each runs alone (a CI run saw 24
    batches for 24 texts); these are all waiting when the replica looks."""
    requests_bytes = []
    for text in texts:
        body = json.dumps({"text": text}).encode()
        requests_bytes.append(b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    socks: list[socket.socket] = []
    try:
        for whole in requests_bytes:
            socks.append(socket.create_connection(("127.0.0.1", service["port"]), timeout=120))
            socks[-1].sendall(whole[:-1])
        for sock, whole in zip(socks, requests_bytes):
            sock.sendall(whole[-1:])
        answers = []
        for sock in socks:
            response = http.client.HTTPResponse(sock)
            response.begin()
            payload = json.loads(response.read())
            assert response.status == 200, payload
            answers.append(payload)
        return answers
    finally:
        for sock in socks:
            sock.close()


def test_concurrent_requests_are_batched_and_score_as_the_model_alone(service, classifier):
    texts = [f"message number {i}: {t}" for i, t in enumerate(
        ["hey whats up", "ur trash uninstall", "free robux at my site", "see you tomorrow",
         "send me pics", "can someone help with the quest"] * 4)]
    before = stats(service)
    together = score_together(service, texts)
    after = stats(service)
    for text, served in zip(texts, together):
        (alone,) = classifier.score_batch([text])
        assert served["label"] == alone.label
        assert abs(served["score"] - alone.score) <= 1e-5
    assert after["model_texts"] - before["model_texts"] == len(texts)
    assert after["batches"] - before["batches"] < len(texts)  # some requests shared a batch


def test_long_text_is_windowed_and_flagged(service):
    before = stats(service)
    result = score(service, BENIGN * 30 + "Send nudes or I will post your address everywhere.")
    assert result["score"] > 0.5 and result["label"] != "ok"
    after = stats(service)
    assert after["long_texts"] == before["long_texts"] + 1
    assert after["windows"] - before["windows"] > 10


def _deploy_beside(service, tmp_path: Path, name: str, head: Path, head_sha256: str) -> subprocess.CompletedProcess:
    """`nlp.run start` of another application, with its own head, onto the service's cluster."""
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        "applications:\n"
        f"  - name: {name}\n"
        f"    route_prefix: /{name}\n"
        "    import_path: nlp.app:build_app\n"
        f"    args: {{model: {{head_path: '{head}', head_sha256: '{head_sha256}'}}}}\n"
    )
    return _run("start", "--config", str(config), "--state-dir", str(tmp_path / "state"),
                env={"RAY_ADDRESS": service["state"]["gcs_address"], "RAY_AUTH_MODE": "token"},
                timeout=240)


def _replica_starts(service, app: str) -> list[str]:
    """Serve's controller log lines that start a replica of `app`."""
    logs = Path(service["state"]["ray_temp_dir"]).glob("session_latest/logs/serve/controller_*.log")
    return [
        line
        for log in logs
        for line in log.read_text().splitlines()
        if "Starting Replica(" in line and f"deployment='TextScorer', app='{app}'" in line
    ]


def test_broken_model_fails_the_deploy_once_with_a_clear_error(service, tmp_path):
    bad_head = tmp_path / "broken-head.npz"
    bad_head.write_bytes(b"this is not an npz file")
    started_at = time.monotonic()
    deployed = _deploy_beside(service, tmp_path, "broken", bad_head, sha256_of(bad_head))
    assert deployed.returncode == 1
    assert "broken-head.npz" in deployed.stderr and "not a softmax head file" in deployed.stderr
    assert time.monotonic() - started_at < 180
    # Serve tried the constructor once and gave up: no restart loop.
    starts = _replica_starts(service, "broken")
    assert len(starts) == 1, starts
    # The healthy application is untouched.
    assert score(service, "hello again")["label"] == "ok"


def test_a_model_file_with_another_digest_fails_the_deploy_before_any_replica(service, tmp_path):
    head = tmp_path / "head.npz"
    head.write_bytes(HEAD_PATH.read_bytes())
    configured = "0" * 64
    deployed = _deploy_beside(service, tmp_path, "tampered", head, configured)
    assert deployed.returncode == 1
    assert (f"model file {head} has SHA-256 {sha256_of(head)}, but model.head_sha256 is "
            f"{configured}: not loading it") in deployed.stderr, deployed.stderr
    assert _replica_starts(service, "tampered") == []
    assert score(service, "hello again")["label"] == "ok"
