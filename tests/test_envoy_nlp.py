"""The text path end to end: real Envoy, the real filter and the real Ray Serve NLP service with
its default model, all on 127.0.0.1.

One NLP service is started for the module (`python -m nlp.run start` on a free loopback port
with its own state dir; Ray takes 20-40 s) and stopped through `nlp.run stop`, which ends its
supervisor by PID and checks that nothing of its session is left. Each Envoy gets envoy.yaml's
configuration (harness/render_envoy.py) with the backend pointed at a recording HTTP server of this
process and the `nlp` cluster at the service; it is started in its own session and stopped by
PID. The fail-open tests run last: one stops the service, one points Envoy at a server that
accepts connections and never answers.

Needs `make build` and `make venv` (Ray Serve, the model packages).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from demo import traffic
from harness import client, render_envoy
from harness.loopback import SilentServer, free_port

ROOT = Path(__file__).resolve().parent.parent

TEXT = render_envoy.text_config()
TIMEOUT_S = TEXT["timeout_ms"] / 1000
# What a fail-open request may take beyond the NLP timeout on a loaded CI machine: a bound that
# tells failing open from waiting on the service (a hung one never answers). How long failing
# open takes is measured by benches/text_failure.
MARGIN_S = 5.0

TOXIC = "you are a worthless idiot and everyone hates you"
THREAT = "I know where you live and I'm going to hurt you"
BENIGN = "thanks for the help yesterday, see you at practice tomorrow!"
SPAM = "earn money fast, visit my site for free skins"


def http_json(url: str, body: dict | None = None, timeout: float = 30) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


# ---------------------------------------------------------------------------------------------
# the NLP service


class NlpService:
    """The Ray Serve app on a local head of its own (nlp.run), on a free loopback port."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.running = False

    def _run(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nlp.run", *args, "--state-dir", str(self.state_dir)],
                              cwd=ROOT, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))

    def start(self) -> None:
        r = self._run("start", "--port", str(self.port), "--replicas", "1", timeout=300)
        self.running = True  # stop() also cleans up after a start that failed half-way
        assert r.returncode == 0, f"nlp.run start failed:\n{r.stdout}{r.stderr}"
        self.state = json.loads((self.state_dir / "nlp-service.json").read_text())

    def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        r = self._run("stop", timeout=120)
        assert r.returncode == 0, f"nlp.run stop failed:\n{r.stdout}{r.stderr}"

    def requests(self) -> int:
        """The service's own count of POST /score requests that reached it."""
        status, stats = http_json(self.url + "/stats")
        assert status == 200, stats
        return stats["requests"]


@pytest.fixture(scope="module")
def nlp(tmp_path_factory, kind):
    """One service per filter kind (the last test stops it)."""
    svc = NlpService(tmp_path_factory.mktemp("nlp-state"))
    try:
        svc.start()
        # Warm the model and the proxy's connection path, so the first call through Envoy is
        # not the one that meets a cold start.
        for text in (BENIGN, TOXIC):
            status, out = http_json(svc.url + "/score", {"text": text})
            assert status == 200, out
        yield svc
    finally:
        svc.stop()


# ---------------------------------------------------------------------------------------------
# Envoy (the `upstream` and `start_envoy` fixtures are conftest.py's)


def envoy_config(upstream_port: int, nlp_port: int, kind: str = "wasm") -> dict:
    """envoy.yaml as shipped (text section included), on loopback ports of this test; `kind`
    native: with the native module in the Wasm filter's place."""
    cfg = render_envoy.load_config()
    cfg["admin"]["address"]["socket_address"]["port_value"] = 0
    cfg["stats_flush_interval"] = "1s"
    cfg["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] = 0
    render_envoy.wasm_filter(cfg)["vm_config"]["code"]["local"]["filename"] = str(render_envoy.WASM)
    render_envoy.set_cluster_address(cfg, "backend", "127.0.0.1", upstream_port)
    render_envoy.set_cluster_address(cfg, "nlp", "127.0.0.1", nlp_port)
    return render_envoy.to_native(cfg) if kind == "native" else cfg


@pytest.fixture(scope="module")
def edge(nlp, upstream, start_envoy, kind):
    return start_envoy(envoy_config(upstream.port, nlp.port, kind), f"edge-{kind}")


def chat(body: bytes, content_type: str = "application/json", method: str = "POST",
         path: str = "/api/chat/messages") -> client.Request:
    """A browser's chat POST (the tree models let it through): headers in Chrome's order."""
    return dataclasses.replace(traffic.chat("chat", "test", body, content_type, path), method=method)


def message(text: str) -> bytes:
    return json.dumps({"message": text, "channel": "general"}).encode()


def header(rec: dict, name: str) -> str | None:
    vals = [v for k, v in rec["headers"] if k == name]
    assert len(vals) <= 1, f"{name} sent {len(vals)} times: {vals}"
    return vals[0] if vals else None


def text_header(value: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in value.split(";"))


# ---------------------------------------------------------------------------------------------
# the shipped configuration and its documentation (no service needed)


def _struct_fields(source: str, name: str) -> set[str]:
    body = re.search(r"pub struct " + name + r" \{(.*?)\n\}", source, re.S).group(1)
    return set(re.findall(r"^\s*pub (\w+):", body, re.M))


def test_text_section_matches_the_filter_docs_and_schema():
    source = (ROOT / "core" / "src" / "config" / "text.rs").read_text()
    fields, label_fields = _struct_fields(source, "TextConfig"), _struct_fields(source, "LabelRule")
    assert "cluster" in fields and "serde(rename =" not in source  # field names are the serde names
    schema = json.loads((ROOT / "docs" / "configuration.schema.json").read_text())
    text_schema = schema["properties"]["text"]
    assert set(text_schema["properties"]) == fields
    assert set(text_schema["properties"]["labels"]["additionalProperties"]["properties"]) == label_fields
    docs = (ROOT / "docs" / "configuration.md").read_text()
    undocumented = [f for f in fields if f"`text.{f}`" not in docs]
    assert not undocumented, undocumented
    # envoy.yaml spells out every field, and its plugin configuration is valid by the schema.
    assert set(render_envoy.text_config()) == fields
    import jsonschema
    validator = jsonschema.Draft202012Validator(schema)
    if not render_envoy.missing_artifacts():
        plugin = json.loads(render_envoy.wasm_filter(render_envoy.load_config())["configuration"]["value"])
        assert plugin["text"] == render_envoy.text_config()
        errors = [e.message for e in validator.iter_errors(plugin)]
        assert not errors, errors
    bad = {"hash_key": "0123456789abcdef", "models": [{"artifact": "", "threshold": 1}],
           "text": dict(render_envoy.text_config(), timeout=5)}
    assert not validator.is_valid(bad), "the schema refuses an unknown text field"


# ---------------------------------------------------------------------------------------------
# verdicts


def test_toxic_message_is_blocked(edge, nlp, upstream):
    upstream.take()
    before = nlp.requests()
    for text, label in ((TOXIC, "toxic"), (THREAT, "threat")):
        resp, _ = edge.timed(chat(message(text)))
        assert resp.status == 403, (text, resp.status, json.loads(resp.body)["headers"])
        assert resp.body == b"blocked by edgescore\n"
        assert dict(resp.headers)["x-edgescore-decision"] == f"block;text={label}"
    assert upstream.take() == [], "a blocked request reached the upstream"
    assert nlp.requests() == before + 2
    assert edge.metric('edgescore_text_decision{action="block"}') >= 2
    assert edge.metric('edgescore_text_label{label="toxic"}') >= 1 and edge.metric('edgescore_text_label{label="threat"}') >= 1


def test_benign_message_reaches_the_upstream_with_the_text_header(edge, nlp, upstream):
    upstream.take()
    model = nlp.state["model"]
    cases = [
        (chat(message(BENIGN)), BENIGN.encode()),
        (chat(b"message=" + BENIGN.replace(" ", "+").encode() + b"&user=bob",
              "application/x-www-form-urlencoded"), None),
        (chat(BENIGN.encode(), "text/plain; charset=utf-8"), BENIGN.encode()),
    ]
    for req, _ in cases:
        resp, _ = edge.timed(req)
        assert resp.status == 200, (resp.status, resp.body)
    recs = upstream.take()
    assert len(recs) == len(cases)
    for (req, _), rec in zip(cases, recs):
        assert rec["body"] == req.body, "the body reaches the upstream unchanged"
        value = header(rec, "x-edgescore-text")
        assert value is not None, rec["headers"]
        fields = text_header(value)
        assert fields["label"] == "ok" and float(fields["score"]) < 0.5, value
        assert fields["model"] == model
        assert header(rec, "x-edgescore-decision") == "allow"
    # Spam is tagged, not blocked.
    resp, _ = edge.timed(chat(message(SPAM)))
    assert resp.status == 200
    rec = upstream.take()[0]
    assert header(rec, "x-edgescore-decision") == "tag;text=spam"
    assert text_header(header(rec, "x-edgescore-text"))["label"] == "spam"


def test_get_and_binary_uploads_make_no_nlp_call(edge, nlp, upstream):
    upstream.take()
    service_before, filter_before = nlp.requests(), edge.metric("edgescore_text_calls")
    png = b"\x89PNG\r\n\x1a\n" + TOXIC.encode() + bytes(range(256)) * 8
    skipped = [
        chat(b"", method="GET", path="/api/chat/messages?message=" + TOXIC.replace(" ", "+")),
        chat(png, "image/png", path="/api/upload"),
        chat(TOXIC.encode() + b"\x00\xff" * 100, "application/octet-stream", path="/api/upload"),
        chat(b"--b\r\ncontent-disposition: form-data; name=message\r\n\r\n" + TOXIC.encode() + b"\r\n--b--\r\n",
             "multipart/form-data; boundary=b"),
    ]
    for req in skipped:
        if req.method == "GET":
            req = dataclasses.replace(req, headers=[(k, v) for k, v in req.headers
                                                    if k not in ("content-type", "content-length")])
        resp, _ = edge.timed(req)
        assert resp.status == 200, (req.method, req.path, resp.status)
    recs = upstream.take()
    assert len(recs) == len(skipped)
    assert all(header(rec, "x-edgescore-text") is None for rec in recs)
    assert [rec["body"] for rec in recs[1:]] == [r.body for r in skipped[1:]]
    assert nlp.requests() == service_before, "the service was called"
    assert edge.metric("edgescore_text_calls") == filter_before, "the filter made a call"
    # Both counters are live: one qualifying request moves each by exactly one.
    resp, _ = edge.timed(chat(message(BENIGN)))
    assert resp.status == 200
    assert nlp.requests() == service_before + 1
    assert edge.metric("edgescore_text_calls") == filter_before + 1


def test_text_metrics_and_access_log(edge):
    resp, _ = edge.timed(chat(message(BENIGN), path="/api/chat/probe-log"))
    assert resp.status == 200
    deadline = time.monotonic() + 6
    while not (lines := [ln for ln in edge.envoy.access_log() if ln.get("path") == "/api/chat/probe-log"]):
        assert time.monotonic() < deadline, "no access-log line"
        time.sleep(0.1)
    assert text_header(lines[0]["edgescore_text"])["label"] == "ok"
    deadline = time.monotonic() + 10
    while edge.metric("edgescore_text_latency_ms_count") < 1 and time.monotonic() < deadline:
        time.sleep(0.2)  # histograms reach the admin API at the next stats flush (1 s here)
    assert edge.metric("edgescore_text_latency_ms_count") >= 1
    assert edge.metric("edgescore_text_errors") == 0
    assert edge.metric('edgescore_text_verdict{label="ok"}') >= 1


# ---------------------------------------------------------------------------------------------
# failures: fail open, within the timeout


def test_a_hanging_service_times_out_and_fails_open(nlp, upstream, start_envoy, kind):
    silent = SilentServer()
    try:
        hang = start_envoy(envoy_config(upstream.port, silent.port, kind), f"hang-{kind}")
        upstream.take()
        for _ in range(3):
            resp, elapsed = hang.timed(chat(message(TOXIC)))
            assert resp.status == 200, (resp.status, resp.body)
            assert elapsed <= TIMEOUT_S + MARGIN_S, elapsed
        recs = upstream.take()
        assert [header(r, "x-edgescore-text") for r in recs] == ["error=status"] * 3
        assert hang.metric("edgescore_text_timeouts") == 3
        assert hang.metric("edgescore_text_errors") == 3
    finally:
        silent.close()


def test_stopped_service_fails_open_within_the_timeout(edge, nlp, upstream):
    """Last: stops the module's service."""
    nlp.stop()
    upstream.take()
    errors_before = edge.metric("edgescore_text_errors")
    n = 8
    for _ in range(n):
        resp, elapsed = edge.timed(chat(message(TOXIC)))
        assert resp.status == 200, (resp.status, resp.body)
        assert elapsed <= TIMEOUT_S + MARGIN_S, elapsed
    recs = upstream.take()
    assert len(recs) == n
    for rec in recs:
        assert header(rec, "x-edgescore-text").startswith("error="), rec["headers"]
        assert header(rec, "x-edgescore-decision") == "allow"
    assert edge.metric("edgescore_text_errors") == errors_before + n
    # Never a trap (FAIL_RELOAD would have recreated the VM and counted it).
    assert edge.envoy.stats(r"wasm\.edgescore\.vm_reload$").get("wasm.edgescore.vm_reload", 0) == 0
