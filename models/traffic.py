"""Synthetic HTTP traffic for training the example models: browsers, automated clients,
vulnerability scanners and credential-stuffing (abuse) bots, as recorded requests in the
format `edgescore features` and the filter's tests read:

    {"headers": [[name, value], ...], "properties": {...}, "kind": "browser"}

Header sets and orders follow what real clients send (Chrome/Firefox/Safari send many headers
in a fixed, browser-specific order; libraries send few). It is a demonstration corpus: real
deployments train on their own feature logs (see models/feature_log.py).
"""

from __future__ import annotations

import random
import uuid

KINDS = ("browser", "bot", "scanner", "abuse")

CHROME = "Mozilla/5.0 ({os}) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{v}.0.0.0 Safari/537.36"
FIREFOX = "Mozilla/5.0 ({os}; rv:{v}.0) Gecko/20100101 Firefox/{v}.0"
SAFARI = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/{v}.1 Safari/605.1.15"
OSES = ["Windows NT 10.0; Win64; x64", "Macintosh; Intel Mac OS X 10_15_7", "X11; Linux x86_64"]
LANGS = ["en-US,en;q=0.9", "de-DE,de;q=0.9,en;q=0.8", "fr-FR,fr;q=0.9,en-US;q=0.8,en;q=0.7", "ja,en-US;q=0.9,en;q=0.8", "pt-BR,pt;q=0.9"]
PAGES = ["/", "/products", "/products/{n}", "/cart", "/search?q={w}", "/blog/{w}-{n}", "/static/app.{n}.js",
         "/api/cart/items", "/api/products/{n}/reviews?page={p}", "/account", "/images/{n}.webp"]
WORDS = ["shoes", "lamp", "coffee", "river", "garden", "phone", "jacket", "desk"]
LIB_UAS = ["curl/8.5.0", "python-requests/2.32.3", "Go-http-client/1.1", "okhttp/4.12.0", "Scrapy/2.11.0 (+https://scrapy.org)",
           "Java/17.0.2", "axios/1.7.2", "Wget/1.21.4", "python-urllib3/2.2.1"]
SCAN_PATHS = ["/wp-login.php", "/.env", "/.git/config", "/phpmyadmin/index.php", "/admin/config.php", "/cgi-bin/test.cgi",
              "/vendor/phpunit/phpunit/src/Util/PHP/eval-stdin.php", "/../../etc/passwd", "/actuator/env", "/server-status",
              "/wp-content/plugins/{w}/readme.txt", "/backup.sql", "/config.json", "/.aws/credentials"]


def _fill(t: str, r: random.Random) -> str:
    return t.format(n=r.randint(1, 99999), w=r.choice(WORDS), p=r.randint(1, 40))


def _source(r: random.Random, pool: int) -> str:
    return f"{r.choice([23, 51, 78, 91, 176, 203])}.{r.randint(0, pool)}.{r.randint(0, 255)}.{r.randint(1, 254)}:{r.randint(1024, 65535)}"


def browser(r: random.Random) -> dict:
    family = r.choice(["chrome", "chrome", "chrome", "firefox", "safari", "edge"])
    v = r.randint(118, 132)
    method = "POST" if r.random() < 0.08 else "GET"
    path = _fill(r.choice(PAGES), r)
    h = [[":method", method], [":authority", "shop.example.com"], [":scheme", "https"], [":path", path]]
    if family in ("chrome", "edge"):
        ua = CHROME.format(os=r.choice(OSES), v=v) + (f" Edg/{v}.0.0.0" if family == "edge" else "")
        h += [["sec-ch-ua", f'"Chromium";v="{v}", "Not_A Brand";v="24"'], ["sec-ch-ua-mobile", "?0"],
              ["sec-ch-ua-platform", '"Windows"'], ["upgrade-insecure-requests", "1"], ["user-agent", ua],
              ["accept", "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"],
              ["sec-fetch-site", r.choice(["none", "same-origin"])], ["sec-fetch-mode", "navigate"], ["sec-fetch-user", "?1"],
              ["sec-fetch-dest", "document"], ["accept-encoding", "gzip, deflate, br, zstd"], ["accept-language", r.choice(LANGS)]]
    elif family == "firefox":
        h += [["user-agent", FIREFOX.format(os=r.choice(OSES), v=v)],
              ["accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"], ["accept-language", r.choice(LANGS)],
              ["accept-encoding", "gzip, deflate, br, zstd"], ["upgrade-insecure-requests", "1"], ["sec-fetch-dest", "document"],
              ["sec-fetch-mode", "navigate"], ["sec-fetch-site", "none"], ["sec-fetch-user", "?1"], ["priority", "u=0, i"]]
    else:
        h += [["accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"], ["sec-fetch-site", "none"],
              ["accept-encoding", "gzip, deflate, br"], ["sec-fetch-mode", "navigate"], ["user-agent", SAFARI.format(v=r.randint(16, 18))],
              ["accept-language", r.choice(LANGS)], ["sec-fetch-dest", "document"]]
    if r.random() < 0.7:
        h.insert(-1, ["referer", "https://shop.example.com/" + r.choice(["", "products", "cart"])])
    if r.random() < 0.85:
        h.append(["cookie", "; ".join(f"c{i}={r.getrandbits(48):x}" for i in range(r.randint(1, 9)))])
    if method == "POST":
        h += [["content-type", "application/x-www-form-urlencoded"], ["content-length", str(r.randint(20, 900))]]
    proto = r.choice(["HTTP/2", "HTTP/2", "HTTP/3", "HTTP/1.1", "HTTP/1.1"])
    props = {"request.protocol": proto, "source.address": _source(r, 255)}
    if proto == "HTTP/1.1":
        h.insert(4, ["connection", "keep-alive"])
    # Sites reached over plain HTTP (or with TLS ended before Envoy) see browsers without TLS too.
    if proto != "HTTP/1.1" or r.random() < 0.5:
        props["connection.tls_version"] = "TLSv1.3"
        props["connection.requested_server_name"] = "shop.example.com"
    return {"headers": h, "properties": props, "kind": "browser"}


def bot(r: random.Random) -> dict:
    headless = r.random() < 0.25
    ua = CHROME.format(os="X11; Linux x86_64", v=r.randint(118, 132)).replace("Chrome/", "HeadlessChrome/") if headless else r.choice(LIB_UAS)
    if r.random() < 0.15:  # spoofed browser UA on a library's header set
        ua = CHROME.format(os=r.choice(OSES), v=r.randint(100, 132))
    path = _fill(r.choice(["/products/{n}", "/api/products/{n}/reviews?page={p}", "/search?q={w}&page={p}&sort=price&limit=100",
                           "/products?page={p}", "/sitemap.xml", "/api/prices?id={n}&currency=USD&fields=all"]), r)
    authority = r.choice(["shop.example.com", "shop.example.com", "203.0.113.10", "203.0.113.10:443"])
    h = [[":method", "GET"], [":authority", authority], [":scheme", "https"], [":path", path], ["user-agent", ua]]
    if r.random() < 0.7:
        h.append(["accept", r.choice(["*/*", "application/json", "text/html"])])
    if r.random() < 0.5:
        h.append(["accept-encoding", r.choice(["gzip, deflate", "gzip", "identity"])])
    if headless:
        h += [["accept-language", "en-US"], ["sec-fetch-site", "none"]]
    if r.random() < 0.2:
        h.append(["cookie", f"session={r.getrandbits(64):x}"])
    if r.random() < 0.3:
        h.append(["connection", "keep-alive"])
    r.shuffle(h[4:]) if r.random() < 0.3 else None
    tls = r.random() < 0.8
    props = {"request.protocol": r.choice(["HTTP/1.1", "HTTP/1.1", "HTTP/2"]), "source.address": _source(r, 8)}
    if tls:
        props["connection.tls_version"] = r.choice(["TLSv1.2", "TLSv1.3"])
        if r.random() < 0.7:
            props["connection.requested_server_name"] = "shop.example.com"
    return {"headers": h, "properties": props, "kind": "bot"}


def scanner(r: random.Random) -> dict:
    req = bot(r) if r.random() < 0.6 else browser(r)
    path = _fill(r.choice(SCAN_PATHS), r)
    if r.random() < 0.3:
        path += "?" + "&".join(f"{k}=%27%20OR%201=1--" for k in r.sample(["id", "q", "user", "file", "cmd", "page"], r.randint(1, 4)))
    req["headers"] = [[k, path if k == ":path" else v] for k, v in req["headers"]]
    req["headers"] = [hv for hv in req["headers"] if hv[0] not in ("cookie", "referer")]
    req["kind"] = "scanner"
    return req


def abuse(r: random.Random) -> dict:
    req = browser(r) if r.random() < 0.5 else bot(r)
    h = [hv for hv in req["headers"] if hv[0] not in (":method", ":path", "content-type", "content-length", "cookie")]
    body = r.randint(30, 120)
    h[:0] = [[":method", "POST"], [":path", r.choice(["/login", "/account/login", "/api/session", "/api/password-reset"])]]
    h += [["content-type", r.choice(["application/x-www-form-urlencoded", "application/json"])], ["content-length", str(body)]]
    if r.random() < 0.3:
        h.append(["cookie", f"csrftoken={r.getrandbits(64):x}"])
    req["headers"] = h
    req["properties"]["source.address"] = _source(r, 3)
    req["kind"] = "abuse"
    return req


GENERATORS = {"browser": browser, "bot": bot, "scanner": scanner, "abuse": abuse}
MIX = {"browser": 0.55, "bot": 0.25, "scanner": 0.1, "abuse": 0.1}


# Hop-by-hop headers: Envoy's HTTP connection manager removes them before any filter runs.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}


def behind_envoy(req: dict, r: random.Random) -> dict:
    """The request as the filter sees it inside Envoy (what its feature log records): hop-by-hop
    headers removed, then `x-forwarded-proto` and `x-request-id` appended by the connection
    manager (its defaults). Training on the client's view instead would skew header_count,
    header_bytes and header_order between training and serving."""
    tls = "connection.tls_version" in req["properties"]
    h = [hv for hv in req["headers"] if hv[0] not in HOP_BY_HOP]
    h += [["x-forwarded-proto", "https" if tls else "http"], ["x-request-id", str(uuid.UUID(int=r.getrandbits(128), version=4))]]
    return {**req, "headers": h}


def requests(n: int, seed: int) -> list[dict]:
    r = random.Random(seed)
    kinds = r.choices(list(MIX), weights=list(MIX.values()), k=n)
    return [behind_envoy(GENERATORS[k](r), r) for k in kinds]
