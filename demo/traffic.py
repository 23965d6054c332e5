"""Demo traffic: browser-like and bot-like HTTP/1.1 requests with exact header sets and order.

The header order matters (`header_order` is a model feature): they go out through
`harness.client.send`, exactly the headers listed, in order. Used by demo/run.py, the Envoy
tests (tests/test_envoy.py, tests/test_envoy_nlp.py, ...) and the load benches
(benches/envoy_load/run.py, benches/nlp_load/run.py).

As a command, it sends the demo's 15 requests through a running demo Envoy
(`python -m demo.run --serve-only`) and says how they were answered:

    python -m demo.traffic --send 127.0.0.1:10000 [--repeat N] [--labels-out labels.csv]
                           [--wait-for bot@2~shadow]

`--labels-out` writes `request_id,is_bot` for every request sent: the request id Envoy returned
in `x-request-id` (the one its access log records) and what the request imitates. It stands for
the outcomes a security team learns later about real traffic (docs/security-teams.md).
`--wait-for MODEL_ID` first waits until requests are answered by that registry model (`bot@3`,
or a shadow challenger, `bot@2~shadow`).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import ipaddress
import itertools
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from harness.client import ADDRESS, Request, Response, send

CHROME_UA = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
             "Chrome/131.0.0.0 Safari/537.36")
CHROME_MAC_UA = ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
                 "Chrome/130.0.0.0 Safari/537.36")
FIREFOX_UA = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
SAFARI_IOS_UA = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
                 "Version/17.6 Mobile/15E148 Safari/604.1")
HEADLESS_UA = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
               "HeadlessChrome/131.0.0.0 Safari/537.36")
SEC_CH_UA = '"Google Chrome";v="131", "Chromium";v="131", "Not_A Brand";v="24"'
COOKIE = "session=8f2c1d0e9a7b4c3d; _ga=GA1.1.1234567890.1731000000; theme=dark; consent=analytics%3Dyes"


def chrome_navigation(path: str, referer: str | None = None, cookie: bool = True) -> list:
    h = [("host", None), ("connection", "keep-alive"), ("sec-ch-ua", SEC_CH_UA), ("sec-ch-ua-mobile", "?0"),
         ("sec-ch-ua-platform", '"Windows"'), ("upgrade-insecure-requests", "1"), ("user-agent", CHROME_UA),
         ("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8,"
                    "application/signed-exchange;v=b3;q=0.7"),
         ("sec-fetch-site", "same-origin" if referer else "none"), ("sec-fetch-mode", "navigate"),
         ("sec-fetch-user", "?1"), ("sec-fetch-dest", "document")]
    if referer:
        h.append(("referer", referer))
    h += [("accept-encoding", "gzip, deflate, br, zstd"), ("accept-language", "en-US,en;q=0.9,de;q=0.8")]
    if cookie:
        h.append(("cookie", COOKIE))
    return h


def requests() -> list[Request]:
    """The demo mix: 6 browser-like requests, then 9 bot-like ones."""
    q = "&".join(f"p{i}={i * 7}" for i in range(40))
    return [
        Request("chrome home", "browser", "GET", "/", chrome_navigation("/", cookie=False)),
        Request("chrome product", "browser", "GET", "/products/shoes/running?color=blue&size=42",
                    chrome_navigation("/products", referer="https://shop.example.com/")),
        Request("chrome XHR", "browser", "GET", "/api/cart?id=42", [
            ("host", None), ("connection", "keep-alive"), ("sec-ch-ua-platform", '"macOS"'),
            ("user-agent", CHROME_MAC_UA), ("accept", "application/json, text/plain, */*"), ("sec-ch-ua", SEC_CH_UA),
            ("sec-ch-ua-mobile", "?0"), ("sec-fetch-site", "same-origin"), ("sec-fetch-mode", "cors"),
            ("sec-fetch-dest", "empty"), ("referer", "https://shop.example.com/products/shoes"),
            ("accept-encoding", "gzip, deflate, br, zstd"), ("accept-language", "en-GB,en;q=0.9"), ("cookie", COOKIE)]),
        Request("firefox article", "browser", "GET", "/blog/2026/11/edge-scoring", [
            ("host", None), ("user-agent", FIREFOX_UA),
            ("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
            ("accept-language", "de-DE,de;q=0.8,en-US;q=0.5,en;q=0.3"), ("accept-encoding", "gzip, deflate, br, zstd"),
            ("connection", "keep-alive"), ("referer", "https://www.google.com/"), ("cookie", COOKIE),
            ("upgrade-insecure-requests", "1"), ("sec-fetch-dest", "document"), ("sec-fetch-mode", "navigate"),
            ("sec-fetch-site", "cross-site"), ("sec-fetch-user", "?1"), ("priority", "u=0, i")]),
        Request("safari iphone", "browser", "GET", "/products/shoes", [
            ("host", None), ("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
            ("sec-fetch-site", "same-origin"), ("cookie", COOKIE), ("sec-fetch-dest", "document"),
            ("accept-language", "fr-FR,fr;q=0.9"), ("sec-fetch-mode", "navigate"), ("user-agent", SAFARI_IOS_UA),
            ("referer", "https://shop.example.com/"), ("accept-encoding", "gzip, deflate, br"),
            ("connection", "keep-alive")]),
        Request("chrome login form", "browser", "POST", "/login", [
            ("host", None), ("connection", "keep-alive"), ("content-length", None), ("cache-control", "max-age=0"),
            ("sec-ch-ua", SEC_CH_UA), ("sec-ch-ua-mobile", "?0"), ("sec-ch-ua-platform", '"Windows"'),
            ("origin", "https://shop.example.com"), ("content-type", "application/x-www-form-urlencoded"),
            ("upgrade-insecure-requests", "1"), ("user-agent", CHROME_UA),
            ("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"),
            ("sec-fetch-site", "same-origin"), ("sec-fetch-mode", "navigate"), ("sec-fetch-user", "?1"),
            ("sec-fetch-dest", "document"), ("referer", "https://shop.example.com/login"),
            ("accept-encoding", "gzip, deflate, br, zstd"), ("accept-language", "en-US,en;q=0.9"), ("cookie", COOKIE)],
            body=b"user=alice&password=correct-horse"),
        # bots
        Request("curl", "bot", "GET", "/api/products",
                    [("host", None), ("user-agent", "curl/8.5.0"), ("accept", "*/*")]),
        Request("python-requests", "bot", "GET", "/api/products?page=7", [
            ("host", None), ("user-agent", "python-requests/2.32.3"), ("accept-encoding", "gzip, deflate"),
            ("accept", "*/*"), ("connection", "keep-alive")]),
        Request("scanner wp-login", "bot", "GET", "/wp-login.php", [
            ("host", ADDRESS), ("user-agent", "Mozilla/5.0 zgrab/0.x"), ("accept", "*/*"),
            ("accept-encoding", "gzip")]),
        Request("scanner .env", "bot", "GET", "/.env",
                    [("host", ADDRESS), ("user-agent", "Go-http-client/1.1"), ("accept-encoding", "gzip")]),
        Request("scanner phpmyadmin", "bot", "GET", "/phpmyadmin/index.php?lang=en",
                    [("host", ADDRESS), ("user-agent", "Mozilla/5.0 (compatible; Nmap Scripting Engine)"),
                     ("connection", "close")]),
        Request("scraper 40 params", "bot", "GET", f"/search?{q}",
                    [("host", None), ("accept-encoding", "identity"), ("user-agent", "Python-urllib/3.11")]),
        Request("headless chrome", "bot", "GET", "/products/shoes", [
            ("host", None), ("connection", "keep-alive"), ("upgrade-insecure-requests", "1"),
            ("user-agent", HEADLESS_UA), ("accept", "text/html,application/xhtml+xml,*/*;q=0.8"),
            ("accept-encoding", "gzip, deflate, br")]),
        Request("chrome UA, odd order", "bot", "GET", "/products/shoes", [
            ("accept", "*/*"), ("user-agent", CHROME_UA), ("host", None), ("accept-language", "en"),
            ("connection", "keep-alive")]),
        Request("no user-agent", "bot", "GET", "/", [("host", None)]),
    ]


def chat(name: str, kind: str, body: bytes, content_type: str = "application/json",
         path: str = "/api/chat/messages") -> Request:
    """A chat message posted from Chrome (the headers of the login form above, so the tree
    models let it through and only the text decides)."""
    form = next(r for r in requests() if r.name == "chrome login form")
    headers = [(k, content_type if k == "content-type" else v) for k, v in form.headers]
    return Request(name, kind, "POST", path, headers, body=body)


def crawler_request(name: str, signature: dict[str, str]) -> Request:
    """A crawler's request, with the `signature-input` and `signature` headers given (none:
    unsigned; harness.web_bot_auth signs them): what demo/run.py's verified-bot step sends."""
    headers = [("host", None), ("user-agent", "ExampleBot/1.0 (+https://bot.example.com/)"), ("accept", "*/*"),
               *signature.items()]
    return Request(f"crawler {name}", "crawler", "GET", "/products/42", headers)


def chat_requests() -> list[Request]:
    """Chat-like POSTs for the text path (the NLP service): `kind` is what the text is."""
    def msg(text: str) -> bytes:
        return json.dumps({"channel": "general", "message": text}).encode()

    return [
        chat("benign json", "ok", msg("thanks for the help yesterday, see you at practice tomorrow!")),
        chat("benign form", "ok", b"message=good+game+everyone%2C+that+last+round+was+close&user=ana",
             "application/x-www-form-urlencoded", path="/comments"),
        chat("toxic json", "toxic", msg("you are a worthless idiot and everyone hates you")),
        chat("threat text/plain", "threat", b"I know where you live and I'm going to hurt you",
             "text/plain; charset=utf-8"),
        chat("spam json", "spam", msg("earn money fast, visit my site for free skins")),
        chat("image upload", "binary", b"\x89PNG\r\n\x1a\n" + bytes(range(256)), "image/png", path="/api/upload"),
    ]


# The path of the requests that check which models answer (demo/run.py leaves them out of its
# tables; they pass through the filter and its feature log like any other request).
PROBE_PATH = "/?edgescore-demo-probe"
# Consecutive probes, each on a fresh connection, that must name the awaited model: Envoy
# spreads new connections over its workers, and each worker swaps models on its own tick.
PROBES_IN_A_ROW = 5
# Each probe to a loopback listener comes from the next of these addresses: probes every 0.1 s
# from one address add up to a burst, which a model counting requests per client (`velocity`)
# blocks. A listener elsewhere is probed from the default address (a loopback source cannot reach it).
PROBE_SOURCES = tuple(f"127.0.5.{i}" for i in range(1, 255))
_probe_turn = itertools.count()


def model_ids(scores_header: str | None) -> list[str]:
    """The model ids of a score header, as they appear (`bot@3`, `bot@4~shadow`)."""
    return [part.split("=", 1)[0] for part in (scores_header or "").split(";") if "=" in part]


def probe_request() -> Request:
    """A browser-like request every demo model lets through: the backend's echo of it shows the
    score header, which names every model that scored it."""
    home = next(r for r in requests() if r.kind == "browser" and not r.body)
    return dataclasses.replace(home, path=PROBE_PATH)


def probe_source(host: str) -> str | None:
    """The address the next probe to `host` is sent from (None: the system's choice)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    loopback = address.version == 4 and address.is_loopback
    return PROBE_SOURCES[next(_probe_turn) % len(PROBE_SOURCES)] if loopback else None


def probe(host: str, port: int) -> tuple[int, list[str]]:
    """One probe, from `probe_source(host)`: its status and the model ids that scored it (none
    unless it was answered 200)."""
    resp = send(host, port, probe_request(), source=probe_source(host))
    if resp.status != 200:
        return resp.status, []
    return resp.status, model_ids(json.loads(resp.body).get("x-edgescore"))


def wait_for_model(host: str, port: int, model_id: str, timeout: float = 30.0) -> float:
    """Seconds until PROBES_IN_A_ROW probes in a row are scored by `model_id`; TimeoutError
    naming what answered instead."""
    t0 = time.monotonic()
    in_a_row = 0
    while in_a_row < PROBES_IN_A_ROW:
        status, last = probe(host, port)
        in_a_row = in_a_row + 1 if status == 200 and model_id in last else 0
        if in_a_row == 0:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"{model_id} does not answer after {timeout:.0f} s (the last probe: answered "
                                   f"{status}, scored by {', '.join(last) or 'no model'})")
            time.sleep(0.2)
    return time.monotonic() - t0


@dataclass
class Sent:
    request: Request
    response: Response

    @property
    def request_id(self) -> str | None:
        return dict(self.response.headers).get("x-request-id")

    @property
    def decision(self) -> str:
        """The filter's decision: the block reply's header, or what the backend received."""
        if self.response.status == 200:
            return json.loads(self.response.body).get("x-edgescore-decision") or "-"
        return dict(self.response.headers).get("x-edgescore-decision") or "-"


def send_demo_requests(host: str, port: int, repeat: int) -> list[Sent]:
    """The demo's requests (`requests()`), `repeat` times over, each on a fresh connection."""
    return [Sent(r, send(host, port, r)) for _ in range(repeat) for r in requests()]


def write_labels(sent: list[Sent], path: Path) -> None:
    """`request_id,is_bot`, one row per request, in the order sent."""
    missing = [s for s in sent if not s.request_id]
    if missing:
        raise RuntimeError(f"{len(missing)} responses carry no x-request-id (envoy.yaml sets "
                           f"always_set_request_id_in_response; is this the demo Envoy?)")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["request_id", "is_bot"])
        w.writerows([s.request_id, int(s.request.kind == "bot")] for s in sent)


def summary(sent: list[Sent]) -> list[str]:
    """Per kind of request, how many got which status and decision; and the models named in the
    score headers of the requests that passed."""
    lines = []
    for kind in ("browser", "bot"):
        of_kind = [s for s in sent if s.request.kind == kind]
        answers = Counter((s.response.status, s.decision) for s in of_kind)
        told = ", ".join(f"{n} x {status} {decision}" for (status, decision), n in sorted(answers.items()))
        lines.append(f"  {kind:8} {len(of_kind):4}: {told}")
    scored_by = sorted({m for s in sent if s.response.status == 200
                        for m in model_ids(json.loads(s.response.body).get("x-edgescore"))})
    lines.append(f"  scored by: {', '.join(scored_by) or '-'}")
    return lines


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="\n\n".join(__doc__.split("\n\n")[2:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--send", type=_address, required=True, metavar="HOST:PORT", help="the demo Envoy's listener")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help=f"send the demo's {len(requests())} requests N times (0: none; default 1)")
    ap.add_argument("--labels-out", type=Path, metavar="CSV",
                    help="write request_id,is_bot for every request sent")
    ap.add_argument("--wait-for", metavar="MODEL_ID",
                    help="first wait (30 s at most) until requests are scored by this model: bot@3, bot@2~shadow")
    args = ap.parse_args(argv)
    host, port = args.send
    try:
        if args.wait_for:
            waited = wait_for_model(host, port, args.wait_for)
            print(f"{args.wait_for} answers ({PROBES_IN_A_ROW} probes in a row, after {waited:.1f} s)")
        sent = send_demo_requests(host, port, args.repeat)
        if sent:
            print(f"sent {len(sent)} requests to {host}:{port} (the demo's {len(requests())}, {args.repeat} times)")
            print("\n".join(summary(sent)))
        if args.labels_out:
            write_labels(sent, args.labels_out)
            print(f"labels of {len(sent)} requests -> {args.labels_out} (request_id,is_bot)")
    except (OSError, RuntimeError, ValueError) as e:  # TimeoutError is an OSError; ValueError: not the demo backend's JSON
        print(f"demo.traffic: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
