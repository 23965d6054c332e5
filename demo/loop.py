"""The tour's loop, docs/security-teams.md's workflow run on the demo's own traffic:

1. clients that copy a browser send through both listeners, and the shipped bot model lets
   them through: Chromium's own headers replayed through Python's TLS stack (each round, the
   requests Chromium itself sent in it), and a burst of
   browser-like requests; beside them Chromium itself, browser-like clients at a person's
   pace and the demo's scripted bots;
2. the filter logs every request's features, with the TLS fingerprint's first part
   (`tls_ja4_a`: TLS version, cipher and extension counts, ALPN) and the client's request count
   (`client_requests_10s`) that no shipped model reads (`feature_log.features`);
3. the log, labelled with what each client is, trains a new bot model
   (models/train_from_log.py), compiled by `edgescore compile`;
4. demo/run.py publishes it while requests flow; the same clients then send again.

Each Python client sends from a loopback address of its own: the filter counts requests per
client address (`velocity`), and everything else on loopback comes from 127.0.0.1. Chromium
cannot choose its address: the loop's requests from 127.0.0.1 are Chromium's alone, and the
first round waits until the tour's earlier ones have left the 10-second counts. Not the whole
JA4, and not `address+ja4`: Debian's Chromium presents another JA4 `_c` part (the hash of its
extensions and signature algorithms) on every connection, its `_a` part stays.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from demo import clients, traffic
from demo.access_log import client_address, parse_reasons, parse_state
from harness import client, envoyctl, render_envoy

ROOT = Path(__file__).resolve().parent.parent
# What the filter logs beside the shipped models' features, and whose requests it counts.
LOGGED_FEATURES = [{"name": "tls_ja4_a", "buckets": 1024}, {"name": "client_requests_10s"}]
VELOCITY = {"key": "address"}
# Chromium's navigations, one run each (most also ask for the favicon).
PATHS = ("/products/shoes", "/blog/2026/11/edge-scoring", "/", "/cart")
# Captures of a navigation until one holds the favicon: Chromium asks for it about 3 times in 4.
CAPTURE_TRIES = 8
# Chromium's navigations start this far apart, a person's pace: at most three in any 10 s, so
# its request count (a favicon each at most) stays within the browser-like clients' six, and
# a model trained on a round where it asked for few favicons still lets a round of many through.
CHROMIUM_PACE_S = 3.5
BURST = 40
BROWSER_SOURCES = ("127.0.3.11", "127.0.3.12", "127.0.3.13", "127.0.3.14")
SCRIPTED_SOURCES = ("127.0.3.21", "127.0.3.22")
# Where demo/run.py's live update sends its load from while the loop runs: one address per
# request, a crowd.
CROWD_SOURCES = tuple(f"127.0.4.{i}" for i in range(1, 251))
# The counts' window: the second round starts this long after the first one ended.
WINDOW_S = 11.0


@dataclass(frozen=True)
class Client:
    name: str
    truth: str  # browser | bot
    source: str  # its loopback address; "": several (BROWSER_SOURCES, SCRIPTED_SOURCES)


CHROMIUM = Client("Chromium (Chrome's TLS)", "browser", "127.0.0.1")
REPLAY = Client("Chromium's headers, Python's TLS", "bot", "127.0.3.2")
BURSTING = Client(f"burst: {BURST} browser-like requests", "bot", "127.0.3.3")
BROWSERS = Client("browser-like, a person's pace", "browser", "")
SCRIPTED = Client("the demo's scripted bots", "bot", "")
CLIENTS = (CHROMIUM, REPLAY, BURSTING, BROWSERS, SCRIPTED)


def plugin_edit(plugin: dict) -> None:
    """The loop's part of the demo's plugin JSON: every request logged, with the two signals."""
    plugin["feature_log"] = {"sample_rate": 1.0, "features": LOGGED_FEATURES}
    plugin["velocity"] = VELOCITY


def client_of(line: dict) -> Client | None:
    address = client_address(line)
    if address == CHROMIUM.source:
        return CHROMIUM if line.get("ja4") else None
    if address in BROWSER_SOURCES:
        return BROWSERS
    if address in SCRIPTED_SOURCES:
        return SCRIPTED
    return next((c for c in CLIENTS if c.source == address), None)


@dataclass
class Round:
    lines: list[dict]
    ended: float


def logged(envoy: envoyctl.Envoy, start: int, count: Callable[[dict], bool], wanted: int, what: str) -> list[dict]:
    """The loop's clients' access-log lines from line `start` on, once `wanted` of them are
    `count`ed: Envoy writes its access log about once a second."""
    deadline = time.monotonic() + 10
    while True:
        lines = [ln for ln in envoy.access_log()[start:] if client_of(ln) is not None]
        shown = sum(map(count, lines))
        if shown >= wanted:
            return lines
        if time.monotonic() > deadline:
            raise RuntimeError(f"the access log shows {shown} of the {wanted} {what} after 10 s")
        time.sleep(0.2)


def chromium_lines(envoy: envoyctl.Envoy, start: int) -> list[dict]:
    """Chromium's access-log lines from line `start` on, once each of its navigations shows."""
    logged(envoy, start, lambda ln: client_of(ln) is CHROMIUM and ln.get("path") in PATHS, len(PATHS), "Chromium's navigations")
    time.sleep(1.0)  # a favicon's line may follow its page's by a write
    return [ln for ln in envoy.access_log()[start:] if client_of(ln) is CHROMIUM]


def asked_per_navigation(lines: list[dict]) -> list[tuple[str, set[str]]]:
    """Chromium's lines in log order, as (page, the paths it asked for on that navigation):
    each run ends before the next starts, so a favicon's line follows its page's."""
    out: list[tuple[str, set[str]]] = []
    for ln in lines:
        if ln.get("path") in PATHS:
            out.append((ln["path"], {ln["path"]}))
        elif out:
            out[-1][1].add(ln.get("path"))
    return out


def send_round(envoy: envoyctl.Envoy, listener: tuple[str, int], tls: tuple[str, int],
               captured: list) -> Round:
    """Every client's requests, once; the access-log lines they left."""
    start = len(envoy.access_log())
    began = time.monotonic()
    for k, path in enumerate(PATHS):
        time.sleep(max(0.0, began + k * CHROMIUM_PACE_S - time.monotonic()))
        clients.chromium_get(tls, path, traffic.CHROME_UA)
    # Chromium asks for the favicon on some navigations and not on others (its exit races the
    # request): the replay asks for what Chromium asked for in this round, so that the two
    # differ in their TLS alone, and a model trained on them can tell them apart by nothing else.
    sent = 0
    for page, asked in asked_per_navigation(chromium_lines(envoy, start)):
        for r in clients.replay(captured, page, tls[1], REPLAY.name, REPLAY.truth):
            if r.path in asked:
                client.send(*tls, r, tls=True, source=REPLAY.source)
                sent += 1
    browser_like = [r for r in traffic.requests() if r.kind == "browser"]
    for source in BROWSER_SOURCES:
        for r in browser_like:
            client.send(*listener, r, source=source)
            sent += 1
    for source in SCRIPTED_SOURCES:
        for r in traffic.requests():
            if r.kind == "bot":
                client.send(*listener, r, source=source)
                sent += 1
    # One of the browser-like requests, the same bytes: only its rate tells it apart.
    product = next(r for r in browser_like if r.name == "chrome product")
    for _ in range(BURST):
        client.send(*listener, product, source=BURSTING.source)
        sent += 1
    ended = time.monotonic()
    return Round(logged(envoy, start, lambda ln: client_of(ln) is not CHROMIUM, sent, "requests sent"), ended)


def print_round(title: str, rnd: Round) -> None:
    print(title)
    hdr = f"   {'client':38} {'truth':7} {'requests':>8}  {'decisions':32} top reason of the blocks"
    print(hdr)
    print("   " + "-" * (len(hdr) - 3))
    for c in CLIENTS:
        lines = [ln for ln in rnd.lines if client_of(ln) is c]
        decisions = Counter(parse_state(ln.get("edgescore"))[0].split(";")[0] for ln in lines)
        told = ", ".join(f"{n} {d}" for d, n in sorted(decisions.items()))
        tops = Counter()
        for ln in lines:
            state = parse_state(ln.get("edgescore"))[0]
            blocker = next((p.split("=", 1)[1].split("@")[0] for p in state.split(";") if p.startswith("model=")), None)
            reasons = parse_reasons(ln.get("edgescore_reasons")).get(blocker or "", [])
            if state.startswith("block") and reasons:
                tops[f"{blocker}: {reasons[0][0]} {reasons[0][1]:+.2f}"] += 1
        top = tops.most_common(1)[0][0] if tops else "-"
        print(f"   {c.name:38} {c.truth:7} {len(lines):>8}  {told:32} {top}")
    print()


def wait_for_window(since: float) -> None:
    """Until requests sent before `since` (time.monotonic()) have left the 10-second counts."""
    time.sleep(max(0.0, since + WINDOW_S - time.monotonic()))


def retrain(cli: Path, rnd: Round, work: Path) -> Path:
    """The round's feature log and labels → a bot model (XGBoost) → its artifact."""
    work.mkdir(parents=True, exist_ok=True)
    log, labels, buckets = work / "access.log", work / "labels.csv", work / "buckets.json"
    table, schema, model, artifact = work / "table.csv", work / "schema.json", work / "bot.json", work / "bot.esm"
    log.write_text("".join(json.dumps(ln) + "\n" for ln in rnd.lines))
    with open(labels, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["request_id", "is_bot"])
        w.writerows([ln["request_id"], int(client_of(ln).truth == "bot")] for ln in rnd.lines)
    example = json.loads((ROOT / "models" / "example" / "schema.json").read_text())
    buckets.write_text(json.dumps({"features": example["features"] + LOGGED_FEATURES}))
    steps = [
        [sys.executable, "-m", "models.feature_log", str(log), "--keep", "request_id", "--out", str(table),
         "--schema-out", str(schema), "--buckets-from", str(buckets)],
        [sys.executable, "-m", "models.train_from_log", "--table", str(table), "--schema", str(schema),
         "--labels", str(labels), "--label", "is_bot", "--holdout", "0", "--out", str(model),
         # A hundred rows, a client's eight among them: XGBoost's default hessian floor (1) would
         # keep such a leaf below the bot policy's 0.9.
         "--trees", "40", "--min-child-weight", "0.1"],
        [str(cli), "compile", str(model), "--schema", str(schema), "--name", "bot", "--version",
         time.strftime("log-%Y-%m-%dT%H%M%S", time.gmtime()), "-o", str(artifact)],
    ]
    for cmd in steps:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:3])} failed: {(p.stderr or p.stdout).strip()[-2000:]}")
        shown = cmd[2] if cmd[0] == sys.executable else f"edgescore {cmd[1]}"
        for line in (p.stdout or p.stderr).strip().splitlines()[-3:]:
            print(f"   {shown}: {line}")
    return artifact


def capture(cert: Path, key: Path) -> list:
    """Chromium's requests for a navigation, as the replay sends them: with what it asks for
    beside the page (the favicon), which it asks for on most navigations, not all; a few tries."""
    for _ in range(CAPTURE_TRIES - 1):
        captured = clients.chromium_requests(traffic.CHROME_UA, cert, key)
        if any(path != "{page}" for path, _ in captured):
            return captured
    return clients.chromium_requests(traffic.CHROME_UA, cert, key)


def tls_certificate() -> tuple[Path, Path]:
    return ROOT / render_envoy.TLS_CERT_REL, ROOT / render_envoy.TLS_KEY_REL
