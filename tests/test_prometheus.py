"""The filter's metrics as Prometheus stores them: a real Envoy with the filter, its models from a
signed registry (with a shadow challenger and a refused publish), the text path answered by a
scripted stand-in for the NLP service, and a real Prometheus scraping Envoy's admin
`/stats/prometheus` every second with deploy/prometheus/prometheus.yml's `envoy` job and its
rules (deploy/prometheus/edgescore.rules.yml). `bot` is published compiled with a drift
reference (`compile --reference`), so the drift series and the dashboard's drift row have data.

Known traffic goes through Envoy between two instants t0 and t1; every labelled counter's
increase over [t0, t1], read back through Prometheus' query API, must equal what the access log
says the filter did with each request (its feature log: the tree decision and every model's
exact score) and what the NLP stand-in was asked and answered. Then every query of the Grafana
dashboard (deploy/grafana/dashboards/edgescore.json) must return data from this Prometheus.

Envoy, Prometheus and the stand-ins bind 127.0.0.1 (free ports) and are stopped by PID.
Needs `make build` and Debian's prometheus (`make system-tools`).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import yaml

from demo import traffic
from harness import client, render_envoy
from harness import registry as demo_registry
from harness.prometheus import Prometheus, finite
from harness.require import require_build
from harness.running import Running
from harness.scripted_nlp import HANG, ScriptedNlp
from test_envoy import MODELS, envoy_config, header
from test_registry_envoy import edgescore_bin

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "edgescore.json"
PROMETHEUS_YML = ROOT / "deploy" / "prometheus" / "prometheus.yml"
RULES = ROOT / "deploy" / "prometheus" / "edgescore.rules.yml"
SCHEMA = ROOT / "models" / "example" / "schema.json"
SCRAPE_S = 1
SCORE_BOUNDS = [10, 50, 100, 200, 300, 400, 500, 600, 700, 800, 850, 900, 950, 980, 990, 1000]
POLICY = {m.name: m for m in MODELS}
STRENGTH = {"allow": 0, "tag": 1, "block": 2, "shadow_block": 2}

# The NLP stand-in's script: the demo's chat texts get their obvious labels, two texts get a
# failure each (no answer: a timeout; a 503), anything else is `ok`.
HANG_TEXT = "this one waits for an answer that never comes"
FAIL_TEXT = "this one meets a failing service"
ANSWERS = {
    "you are a worthless idiot and everyone hates you": "toxic",
    "I know where you live and I'm going to hurt you": "threat",
    "earn money fast, visit my site for free skins": "spam",
    HANG_TEXT: HANG,
    FAIL_TEXT: 503,
}


def chat_message(name: str, text: str) -> client.Request:
    return traffic.chat(name, "text", json.dumps({"channel": "general", "message": text}).encode())


def traffic_mix() -> list[client.Request]:
    """Browser-like and bot-like requests, chat posts for every verdict, two failing calls."""
    return [*traffic.requests(), *traffic.chat_requests(), chat_message("nlp hangs", HANG_TEXT),
            chat_message("nlp fails", FAIL_TEXT)]


# ---------------------------------------------------------------------------------------------
# what the filter did, from the access log


def band(model: str, score: float) -> str:
    p = POLICY[model]
    return p.action if score >= p.threshold else "allow"


def permille(score: float) -> int:
    """As the filter computes it: f32 arithmetic, Rust's round (half away from zero)."""
    return math.floor(float(np.float32(min(max(score, 0.0), 1.0)) * np.float32(1000.0)) + 0.5)


@dataclass
class Expected:
    """Counts the filter must have added between t0 and t1, from the access log."""

    scored: int = 0
    decision: Counter = field(default_factory=Counter)
    model_requests: Counter = field(default_factory=Counter)  # (model, action)
    shadow_requests: Counter = field(default_factory=Counter)  # (model, action)
    permille: dict[str, list[int]] = field(default_factory=dict)  # model (or "shadow:" model) -> scores
    verdicts: Counter = field(default_factory=Counter)  # the service's label
    raised: Counter = field(default_factory=Counter)  # action

    def add(self, line: dict) -> None:
        # The feature log (sample_rate 1) holds the tree decision and the exact scores.
        features = json.loads(line["edgescore_features"])
        tree = features["decision"]
        self.scored += 1
        self.decision[tree] += 1
        for model_id, score in features["scores"].items():
            name, shadow = model_id.split("@")[0], model_id.endswith("~shadow")
            (self.shadow_requests if shadow else self.model_requests)[(name, band(name, score))] += 1
            self.permille.setdefault(("shadow:" if shadow else "") + name, []).append(permille(score))
        text = dict(kv.split("=", 1) for kv in (line.get("edgescore_text") or "").split(";") if "=" in kv)
        if "label" in text:
            self.verdicts[text["label"]] += 1
            # The stand-in answers its label at 0.99, above every configured threshold.
            action = render_envoy.TEXT_LABELS.get(text["label"], (0, "allow"))[1]
            if STRENGTH[action] > STRENGTH[tree]:
                self.raised[action] += 1


def expected_from(lines: list[dict]) -> Expected:
    exp = Expected()
    for line in lines:
        exp.add(line)
    return exp


# ---------------------------------------------------------------------------------------------
# the system under test


def cli(*args: str | Path) -> None:
    p = subprocess.run([edgescore_bin(), *map(str, args)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (args, p.stderr)


@dataclass
class Scraped:
    """Everything the tests read after the traffic."""

    prom: Prometheus
    nlp_texts: list[str]
    t0: float
    t1: float
    expected: Expected
    sequence: int

    def increase(self, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
        """value(t1) - value(t0) per label set (a series new since t0 counts from 0)."""
        after = self.prom.by_labels(expr, *labels, at=self.t1)
        before = self.prom.by_labels(expr, *labels, at=self.t0)
        return {k: v - before.get(k, 0.0) for k, v in after.items()}

    def window(self) -> str:
        """A range that reaches back from t1 past the baseline scrape."""
        return f"{math.ceil(self.t1 - self.t0) + 3 * SCRAPE_S}s"


def wait_for(what: str, pred, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def prom_text_value(running: Running, series: str) -> float:
    for line in running.envoy.prometheus().splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def scrape_config(admin: str) -> dict:
    """deploy/prometheus/prometheus.yml's `envoy` job, pointed at this Envoy's admin address,
    every SCRAPE_S."""
    shipped = yaml.safe_load(PROMETHEUS_YML.read_text())
    job = next(j for j in shipped["scrape_configs"] if j["job_name"] == "envoy")
    job["static_configs"] = [{"targets": [admin.removeprefix("http://")]}]
    assert shipped["rule_files"] == [RULES.name]
    return {"global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
            "rule_files": [str(RULES)], "scrape_configs": [job]}


def answered_by(running: Running, upstream, req: client.Request) -> str:
    """The score header the upstream got for `req` (sent now)."""
    upstream.take()
    assert running.send(req).status == 200
    recs = upstream.take()
    return header(recs[0], "x-edgescore") or "" if recs else ""


def with_reference(m, tmp: Path) -> Path:
    """The example model compiled as the Makefile does, with a drift reference from the
    training generator's feature vectors (models/traffic.py, `edgescore features`)."""
    from models import traffic as training
    src, rows, out = tmp / f"{m.name}-reference.jsonl", tmp / f"{m.name}-reference.csv", tmp / f"{m.name}.esm"
    src.write_text("".join(json.dumps(r) + "\n" for r in training.requests(500, 1)))
    cli("features", "--schema", SCHEMA, "--hash-key", render_envoy.hash_key(), "--requests", src, "-o", rows)
    example = next(e for e in render_envoy.read_example_list() if e.policy.name == m.name)
    shipped = json.loads(subprocess.run([edgescore_bin(), "inspect", "--json", str(m.artifact)], capture_output=True, check=True).stdout)
    cli("compile", example.source, "--schema", SCHEMA, "--name", m.name, "--version", shipped["version"], "-o", out, "--reference", rows)
    return out


@pytest.fixture(scope="module")
def scraped(upstream, start_envoy, tmp_path_factory) -> Scraped:
    require_build()
    tmp = tmp_path_factory.mktemp("prometheus")
    cli_path = Path(edgescore_bin())
    reg_dir = tmp / "registry"
    reg_dir.mkdir()
    for m in MODELS:
        demo_registry.publish(cli_path, with_reference(m, tmp) if m.name == "bot" else m.artifact, reg_dir)
    # A challenger for `bot` (other trees under its name) and a later `bot` the poller refuses.
    challenger, refused = tmp / "bot-challenger.esm", tmp / "bot-next.esm"
    cli("compile", ROOT / "models" / "example" / "scanner.txt", "--schema", SCHEMA, "--name", "bot", "--version", "challenger", "-o", challenger)
    cli("compile", ROOT / "models" / "example" / "bot.json", "--schema", SCHEMA, "--name", "bot", "--version", "next", "-o", refused)
    registry = demo_registry.RegistryServer(reg_dir)
    nlp = ScriptedNlp(lambda text: ANSWERS.get(text, "ok"))
    prom = None
    try:
        public = json.loads(render_envoy.DEMO_PUB.read_text())
        plugin = render_envoy.plugin_config(
            sample_rate=1.0, registry=render_envoy.registry_section([public], poll_seconds=1, check_ms=50))
        cfg = envoy_config(upstream.port, plugin)
        render_envoy.add_registry(cfg, plugin, "127.0.0.1", registry.port)
        render_envoy.set_cluster_address(cfg, "nlp", "127.0.0.1", nlp.port)
        running = start_envoy(cfg, "prometheus")
        probe = traffic.requests()[0]
        sent = 0

        def probe_until(what: str, pred) -> None:
            nonlocal sent

            def once():
                nonlocal sent
                sent += 1
                return pred(answered_by(running, upstream, probe))
            wait_for(what, once)

        probe_until("the registry's models", lambda h: "bot@1=" in h)
        # One text call before t0, as a running system has had: the series the text path's
        # first call creates (Envoy's histograms of the `nlp` cluster, the `ok` verdict) then
        # hold samples from before the traffic, and rate() over the window sees it.
        running.send(traffic.chat_requests()[0])
        sent += 1
        wait_for("Envoy's stats flush", lambda: prom_text_value(running, "edgescore_text_latency_ms_count{}") == 1)
        prom = Prometheus(scrape_config(running.envoy.admin), tmp / "prom").start()

        # t0: Prometheus holds a scrape of every count so far.
        running.settle()
        scored0 = prom_text_value(running, "edgescore_requests_scored{}")
        wait_for("Prometheus' baseline scrape", lambda: prom.by_labels("edgescore_requests_scored").get(()) == scored0
                 and prom.by_labels("edgescore_text_latency_ms_count").get(()) == 1)
        wait_for("the access log", lambda: len(running.envoy.access_log()) == sent)
        n0, texts0 = sent, len(nlp.received())
        t0 = time.time()
        # A scrape takes milliseconds: none stamped before t0 can see what follows.
        time.sleep(0.2)

        demo_registry.publish(cli_path, challenger, reg_dir, shadow=True)
        probe_until("the shadow challenger", lambda h: "bot@2~shadow=" in h)
        # Published into a copy with the artifact then altered, and served only then: the poller
        # meets the altered bytes on its first fetch (sha_mismatch, counted once).
        staging = tmp / "staging"
        shutil.copytree(reg_dir, staging)
        demo_registry.publish(cli_path, refused, staging)
        entry = next(e for e in demo_registry.manifest(staging)["models"] if e["name"] == "bot" and e["version"] == 3)
        altered = bytearray((staging / entry["artifact"]).read_bytes())
        altered[len(altered) // 2] ^= 1
        (reg_dir / entry["artifact"]).write_bytes(bytes(altered))
        shutil.copy(staging / "manifest.json", reg_dir / "manifest.json.next")
        (reg_dir / "manifest.json.next").replace(reg_dir / "manifest.json")
        wait_for("the refusal", lambda: running.counter("wasmcustom.edgescore.registry.refused.sha_mismatch") == 1)

        for req in traffic_mix():
            running.send(req)
            sent += 1
        running.settle()
        wait_for("the access log", lambda: len(running.envoy.access_log()) == sent)
        expected = expected_from(running.envoy.access_log()[n0:])
        calls = len(nlp.received())
        # Envoy's own histograms reach /stats/prometheus at its next stats flush (1 s here).
        wait_for("the latency histogram", lambda: prom_text_value(running, "edgescore_text_latency_ms_count{}") == calls)
        final = prom_text_value(running, "edgescore_requests_scored{}")
        wait_for("Prometheus' scrape of the last counts", lambda: prom.by_labels("edgescore_text_latency_ms_count").get(()) == calls
                 and prom.by_labels("edgescore_requests_scored").get(()) == final)
        # And one scrape more: a series born with the traffic (the first verdict of a label,
        # Envoy's stats of the `nlp` cluster) needs two samples for rate().
        stamp = prom.by_labels("timestamp(edgescore_requests_scored)")[()]
        wait_for("one more scrape", lambda: prom.by_labels("timestamp(edgescore_requests_scored)")[()] > stamp)
        t1 = time.time()
        yield Scraped(prom, nlp.received()[texts0:], t0, t1, expected, demo_registry.manifest(reg_dir)["sequence"])
    finally:
        if prom is not None:
            prom.stop()
        nlp.close()
        registry.down()


# ---------------------------------------------------------------------------------------------
# the counts


def test_decisions_and_model_bands_count_every_request(scraped):
    exp = scraped.expected
    n = len(traffic_mix())
    assert exp.scored >= n and exp.decision["block"] >= 1 and exp.decision["allow"] >= 1, exp.decision
    assert scraped.increase("edgescore_requests_scored") == {(): exp.scored}
    decisions = scraped.increase("edgescore_decision", "action")
    assert decisions == {(a,): float(exp.decision[a]) for a in ("allow", "tag", "block", "shadow_block")}
    bands = scraped.increase("edgescore_model_requests", "model", "action")
    assert bands == {(m.name, a): float(exp.model_requests[(m.name, a)]) for m in MODELS for a in ("allow", "tag", "block")}
    shadow = scraped.increase("edgescore_shadow_requests", "model", "action")
    assert shadow == {("bot", a): float(exp.shadow_requests[("bot", a)]) for a in ("allow", "tag", "block")}
    assert sum(exp.shadow_requests.values()) >= n, "the challenger scored the traffic"
    assert scraped.increase("edgescore_feature_log_lines") == {(): exp.scored}
    assert scraped.increase("edgescore_errors") == {(): 0.0}


def test_score_histograms_hold_every_score(scraped):
    for family, prefix in (("edgescore_model_score_permille", ""), ("edgescore_shadow_score_permille", "shadow:")):
        buckets = scraped.increase(f"{family}_bucket", "model", "le")
        counts = scraped.increase(f"{family}_count", "model")
        sums = scraped.increase(f"{family}_sum", "model")
        models = [m.name for m in MODELS] if not prefix else ["bot"]
        assert set(counts) == {(m,) for m in models}
        for m in models:
            scores = scraped.expected.permille[prefix + m]
            assert counts[(m,)] == len(scores) and sums[(m,)] == sum(scores), m
            for le in [*SCORE_BOUNDS, "+Inf"]:
                want = len(scores) if le == "+Inf" else sum(s <= le for s in scores)
                assert buckets[(m, str(le))] == want, (m, le)


def bucket_quantile(q: float, scores: list[int]) -> float:
    """What Prometheus' histogram_quantile computes from exact buckets: the bucket holding the
    rank q * count, interpolated linearly within it."""
    cumulative = [sum(s <= b for s in scores) for b in SCORE_BOUNDS]
    rank = q * len(scores)
    i = next(i for i, c in enumerate(cumulative) if c >= rank)
    start, below = (0, 0) if i == 0 else (SCORE_BOUNDS[i - 1], cumulative[i - 1])
    return start + (SCORE_BOUNDS[i] - start) * (rank - below) / (cumulative[i] - below)


def test_histogram_quantile_over_the_score_buckets(scraped):
    """histogram_quantile over the bucket counters' increase since t0 gives, per model, what
    the exact scores of the traffic give."""
    t0 = f"{scraped.t0:.3f}"
    for q in (0.5, 0.9, 0.99):
        got = scraped.prom.by_labels(
            f"histogram_quantile({q}, sum by (model, le) (edgescore_model_score_permille_bucket"
            f" - edgescore_model_score_permille_bucket @ {t0}))", "model", at=scraped.t1)
        assert set(got) == {(m.name,) for m in MODELS}
        for m in MODELS:
            want = bucket_quantile(q, scraped.expected.permille[m.name])
            assert got[(m.name,)] == pytest.approx(want, abs=1e-6), (m.name, q)


def test_text_path_counts_calls_verdicts_and_failures(scraped):
    texts, exp = scraped.nlp_texts, scraped.expected
    answers = Counter(ANSWERS.get(t, "ok") for t in texts)
    assert answers[HANG] == 1 and answers[503] == 1 and answers["toxic"] == 1, answers
    assert scraped.increase("edgescore_text_calls") == {(): len(texts)}
    assert scraped.increase("edgescore_text_errors") == {(): 2.0}
    assert scraped.increase("edgescore_text_timeouts") == {(): 1.0}
    assert scraped.increase("edgescore_text_latency_ms_count") == {(): len(texts)}
    # The login form qualifies (a form-urlencoded POST) but has none of the listed fields.
    assert scraped.increase("edgescore_text_skipped_empty") == {(): 1.0}
    answered = {(label,): float(n) for label, n in answers.items() if label not in (HANG, 503)}
    assert {(k,): float(v) for k, v in exp.verdicts.items()} == answered
    assert scraped.increase("edgescore_text_verdict", "label") == answered
    labels = scraped.increase("edgescore_text_label", "label")
    assert labels == {(label,): float(answers[label]) for label in render_envoy.TEXT_LABELS}
    assert exp.raised["block"] >= 2 and exp.raised["tag"] >= 1, exp.raised
    raised = scraped.increase("edgescore_text_decision", "action")
    assert raised == {(a,): float(exp.raised[a]) for a in ("tag", "block", "shadow_block")}


def test_registry_counts_updates_and_refusals(scraped):
    reasons = scraped.increase("edgescore_registry_refused", "reason")
    assert reasons[("sha_mismatch",)] == 1.0 and sum(reasons.values()) == 1.0, reasons
    # The challenger's manifest and the refused one; one new model; one swap per worker plus
    # the root context Envoy keeps on its main thread (docs/registry.md).
    assert scraped.increase("edgescore_registry_manifests_accepted") == {(): 2.0}
    assert scraped.increase("edgescore_registry_models_accepted") == {(): 1.0}
    assert scraped.increase("edgescore_registry_swaps") == {(): 2.0}
    at = scraped.t1
    assert scraped.prom.by_labels("edgescore_registry_version", "model", at=at) == {(m.name,): 1.0 for m in MODELS}
    assert scraped.prom.by_labels("edgescore_registry_shadow_version", "model", at=at) == {("bot",): 2.0}
    assert scraped.prom.by_labels("edgescore_registry_manifest_sequence", at=at) == {(): float(scraped.sequence)}
    assert scraped.increase("edgescore_registry_polls")[()] >= 2


# ---------------------------------------------------------------------------------------------
# the dashboard


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expr) for every query target of every panel, rows' panels included."""
    dash = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((p["title"], t["expr"]))
            walk(p.get("panels", []))
    walk(dash["panels"])
    return out


def concrete(expr: str, window: str) -> str:
    """The expr as Grafana sends it with every template variable at its All value."""
    dash = json.loads(DASHBOARD.read_text())
    for var in dash["templating"]["list"]:
        assert var.get("includeAll") and var.get("allValue"), f"variable {var['name']} needs an All value"
        expr = re.sub(r"\$\{" + var["name"] + r"(:[a-z]+)?\}|\$" + var["name"] + r"\b", var["allValue"], expr)
    for builtin in ("__rate_interval", "__interval", "__range"):
        expr = expr.replace("${" + builtin + "}", window).replace("$" + builtin, window)
    assert "$" not in expr, expr
    return expr


def test_every_dashboard_query_returns_data(scraped):
    queries = dashboard_queries()
    assert len(queries) >= 20
    empty = []
    for title, expr in queries:
        values = scraped.prom.query(concrete(expr, scraped.window()), at=scraped.t1)
        if not finite(values):
            empty.append(f"{title}: {expr} -> {values}")
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)


def test_metrics_doc_shows_the_shipped_stats_tags():
    """docs/metrics.md's `stats_tags` block is the one envoy.yaml ships."""
    doc = (ROOT / "docs" / "metrics.md").read_text()
    block = re.search(r"```yaml\n(stats_config:\n.*?)```", doc, re.S).group(1)
    assert yaml.safe_load(block)["stats_config"]["stats_tags"] == render_envoy.load_config()["stats_config"]["stats_tags"]
