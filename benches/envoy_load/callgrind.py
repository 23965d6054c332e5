#!/usr/bin/env python3
"""Instructions per request in Envoy under callgrind: a deterministic view of what run.py times.

    .venv/bin/python -m benches.envoy_load.callgrind [--requests 1000] VARIANT [VARIANT ...]

VARIANT is `none`, `noop`, `edgescore`, `native` (the configurations of run.py), `noop:<plan>` (the no-op
filter making host calls, e.g. `noop:headers=1,properties=1`) or `wasm:<name>=<path>` (the
edgescore filter from another .wasm); `edgescore` and `wasm:` take outputs beyond the defaults
after `@`, e.g. `edgescore@decision+state` or `native@signals` (run.bench_plugin_config); `edgescore` and `native`
score other builds of the example models given as a directory after `~`, e.g.
`native~target/bench-drift/drift` (<dir>/<name>.esm for each example model). Each runs in its own Envoy (--concurrency 1) under
`valgrind --tool=callgrind`, with instrumentation off until 300 warm-up requests are done; then
`--requests` of the bench's requests (demo/traffic.py, 4 keep-alive connections, a new one after
each POST as Envoy closes it) are counted, over the TLS listener with `--tls`. Printed per request: user-space instructions by
where they ran — Envoy's own code, tcmalloc (Envoy's allocator, remapped out of the binary),
libc, JIT code (the Wasm module compiled by V8, plus V8's wrappers) and the native module
(libedgescore_native.so) — and the total's difference to the first variant.

Timing on this shared 2-core machine moves by ±5 µs between runs; instruction counts repeat to
within ~0.1 %, so they can tell apart changes of a few hundred instructions per request. They are
not time (cache misses, IPC), but the two agree on which host calls and which code cost most.
Envoy runs ~50x slower under callgrind; a variant takes ~15 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
from benches.envoy_load import run  # noqa: E402
from demo import traffic  # noqa: E402
from harness import client, envoyctl, render_envoy  # noqa: E402


def config(variant: str) -> dict:
    variant, _, models_dir = variant.partition("~")
    variant, _, opts = variant.partition("@")
    outputs = tuple(o for o in opts.split("+") if o)
    kind, _, arg = variant.partition(":")
    models = render_envoy.EXAMPLE_MODELS
    if models_dir:
        models = tuple(dataclasses.replace(m, path=Path(models_dir) / f"{m.name}.esm") for m in models)
        missing = [str(m.artifact) for m in models if not m.artifact.is_file()]
        if missing:
            raise SystemExit(f"missing {', '.join(missing)}")
    if kind == "noop":
        cfg = run.bench_config("noop", models)
        render_envoy.wasm_filter(cfg)["configuration"]["value"] = arg
        return cfg
    if kind == "wasm":
        return run.bench_config(variant, models, Path(arg.split("=", 1)[1]), outputs=outputs)
    return run.bench_config(kind, models, outputs=outputs)


def requests(port: int) -> list[bytes]:
    out = []
    for r in traffic.requests():
        lines = [f"{r.method} {r.path} HTTP/1.1"]
        for k, v in r.header_list(f"127.0.0.1:{port}"):
            if k == "connection":
                continue
            lines.append(f"{k}: {len(r.body) if k == 'content-length' else v}")
        if r.body and not any(k == "content-length" for k, _ in r.headers):
            lines.append(f"content-length: {len(r.body)}")
        out.append(("\r\n".join(lines) + "\r\n\r\n").encode() + r.body)
    return out


def connect(port: int, tls: bool) -> socket.socket:
    """A connection to the listener on `port`: over TLS (Python's stack, SNI shop.example.com,
    the self-signed certificate unchecked) with `tls`."""
    sock = socket.create_connection(("127.0.0.1", port))
    if not tls:
        return sock
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context.wrap_socket(sock, server_hostname=client.SITE)


def send(port: int, reqs: list[bytes], n: int, conns: int = 4, tls: bool = False) -> None:
    socks = [connect(port, tls) for _ in range(conns)]
    try:
        for i in range(n):
            c, req = i % conns, reqs[i % len(reqs)]
            socks[c].sendall(req)
            buf = b""
            while b"\r\n\r\nok\n" not in buf:
                data = socks[c].recv(65536)
                if not data:
                    raise RuntimeError("connection closed before the answer")
                buf += data
            if req.startswith(b"POST"):  # answered before its body was read: Envoy closes it
                socks[c].close()
                socks[c] = connect(port, tls)
    finally:
        for s in socks:
            s.close()


def split(out_file: Path) -> dict[str, int]:
    """Instructions by where they ran, from callgrind_annotate's per-function totals. The
    annotation names a function's object only on the line of its own source file; the lines of
    code inlined into it from other files (std's slices, another crate's module) carry the
    function's name without the object, and count where the function does."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", str(out_file)], capture_output=True, text=True,
                          check=True).stdout
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S+?):(\S+)(?: \[(.*)\])?$", line)
        if m and m.group(2) != "PROGRAM TOTALS":
            rows.append((int(m.group(1).replace(",", "")), m.group(3), m.group(4)))
    object_of = {fn: obj for _, fn, obj in rows if obj is not None}
    parts: dict[str, int] = {}
    for n, fn, obj in rows:
        key = where(fn, obj if obj is not None else object_of.get(fn, ""))
        parts[key] = parts.get(key, 0) + n
    return parts


def where(fn: str, obj: str) -> str:
    if obj == "???":
        addr = int(fn, 16) if fn.startswith("0x") else 0
        # Envoy's tcmalloc sits just past the binary's image; V8's code space is far above.
        return "JIT" if addr > 1 << 32 else "tcmalloc"
    if obj.endswith("/envoy"):
        return "envoy"
    if "libc.so" in obj:
        return "libc"
    if obj.endswith(f"lib{render_envoy.NATIVE_MODULE}.so"):
        return "module"
    return "other"


def measure(variant: str, n: int, work: Path, tls: bool = False) -> dict[str, float]:
    name = re.sub(r"[^\w.-]", "_", variant)[:60]
    out = work / f"{name}.callgrind"
    e = envoyctl.Envoy(config(variant), work / name, name="cg", concurrency=1, log_level="warning")
    e.args = ["valgrind", "--tool=callgrind", "--smc-check=all-non-file", "--instr-atstart=no",
              f"--callgrind-out-file={out}", *e.args]
    e.start(timeout=600)
    try:
        port = e.listener_port(render_envoy.TLS_LISTENER if tls else "edge")
        reqs = requests(port)
        send(port, reqs, 300, tls=tls)
        subprocess.run(["callgrind_control", "-i", "on", str(e.pid)], check=True, capture_output=True)
        send(port, reqs, n, tls=tls)
        subprocess.run(["callgrind_control", "-d", str(e.pid)], check=True, capture_output=True)
    finally:
        e.stop()
    parts = split(Path(f"{out}.1"))  # the dump we asked for; the file without suffix is shutdown
    return {k: v / n for k, v in parts.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--tls", action="store_true",
                    help="send over the TLS listener (the fingerprint headers written, the handshakes counted: "
                         "compare variants with each other, not with plain-HTTP runs)")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="keep the callgrind output files here (for callgrind_annotate or kcachegrind)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    envoyctl.exit_on_sigterm()
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if not shutil.which(tool):
            print(f"{tool} is not installed (`apt-get install -y valgrind`)", file=sys.stderr)
            return 2
    run.build_noop()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="edgescore-callgrind-"))
    first = None
    print(f"{'variant':40} {'instr/req':>10} {'vs first':>9}  {'envoy':>7} {'tcmalloc':>8} {'libc':>6} {'JIT':>7} {'module':>7}")
    try:
        # A variant under callgrind takes ~15 s: one step each, on stderr and on a terminal only
        # (disable=None), the table's rows printed above it.
        with tqdm(args.variants, desc="callgrind", unit="variant", disable=None, leave=False) as progress:
            for v in progress:
                progress.set_postfix_str(v[:40])
                p = measure(v, args.requests, work, args.tls)
                total = sum(p.values())
                first = total if first is None else first
                with tqdm.external_write_mode():
                    print(f"{v[:40]:40} {total:10,.0f} {total - first:+9,.0f}  {p.get('envoy', 0):7,.0f} "
                          f"{p.get('tcmalloc', 0):8,.0f} {p.get('libc', 0):6,.0f} {p.get('JIT', 0):7,.0f} "
                          f"{p.get('module', 0):7,.0f}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"callgrind: {len(args.variants)} variant{'s' if len(args.variants) != 1 else ''}, {args.requests:,} requests "
          f"each, in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
