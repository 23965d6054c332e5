#!/usr/bin/env python3
"""The demo's model registry (docs/registry.md): `target/registry`, written by the real
`edgescore publish` with the demo key (demo/keys/), served on loopback by Python's http.server.

    python3 -m harness.registry --cli target/release/edgescore   # publish what changed

`publish_examples` publishes each example model (target/models/<name>.esm) whose bytes differ
from the version the manifest serves, so running it twice publishes nothing the second time,
then renews the manifest (`edgescore renew`) when it expires within `RENEW_WITHIN_S` or has no
expiry: Envoy refuses an expired manifest, and a demo registry built weeks ago must still serve.
`make build` runs it (docker compose mounts the directory); the demo runs it and serves the
directory with `RegistryServer`. Standard library only: it runs before the venv exists.

The demo key is committed so that the root envoy.yaml can name its public half: it signs demo
models and nothing else. Generate your own with `edgescore keygen` for anything real.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.server
import json
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from harness.render_envoy import DEMO_PUB, EXAMPLE_MODELS, HASH_KEY_FILE, ROOT

REGISTRY_DIR = ROOT / "target" / "registry"
PAYLOAD_TYPE = "application/vnd.edgescore.manifest.v1+json"
SIGNING_CONTEXT = b"edgescore-manifest-v1\0"
DEMO_KEY = DEMO_PUB.with_suffix(".key")
# A manifest expiring sooner than this is renewed (publish and renew sign 7 days by default).
RENEW_WITHIN_S = 2 * 86_400


def manifest(directory: Path = REGISTRY_DIR) -> dict | None:
    """The manifest payload (unverified: for display and for deciding what to publish)."""
    try:
        envelope = json.loads((directory / "manifest.json").read_text())
        return json.loads(base64.b64decode(envelope["payload"]))
    except (OSError, ValueError, KeyError):
        return None


def active_versions(directory: Path = REGISTRY_DIR) -> dict[str, int]:
    m = manifest(directory) or {"models": []}
    return {e["name"]: e["version"] for e in m["models"] if e["mode"] == "active"}


def publish(cli: Path, artifact: Path, directory: Path = REGISTRY_DIR, *, shadow: bool = False) -> str:
    """`edgescore publish`; its one-line report."""
    args = [str(cli), "publish", str(artifact), "--registry", str(directory), "--key", str(DEMO_KEY),
            "--hash-key-file", str(HASH_KEY_FILE)] + (["--shadow"] if shadow else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"edgescore publish {artifact.name} failed: {p.stderr.strip()}")
    return p.stdout.strip()


def utc(t: float) -> str:
    """`t` (seconds since the epoch) as a manifest time, `YYYY-MM-DDTHH:MM:SSZ`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def signed_envelope(payload: dict, keys: list[Path]) -> bytes:
    """The manifest `payload` in an envelope signed by each secret key file of `keys`, in order
    (docs/registry.md): for tests that sign what `publish` would not. Needs `cryptography`."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    raw = json.dumps(payload).encode()
    signatures = []
    for key in keys:
        secret = json.loads(key.read_text())
        sk = Ed25519PrivateKey.from_private_bytes(base64.b64decode(secret["secret"]))
        signatures.append({"key_id": secret["key_id"], "sig": base64.b64encode(sk.sign(SIGNING_CONTEXT + raw)).decode()})
    return json.dumps({"payload_type": PAYLOAD_TYPE, "payload": base64.b64encode(raw).decode(), "signatures": signatures}).encode()


def seconds_left(directory: Path = REGISTRY_DIR) -> float | None:
    """Seconds until the manifest expires (negative once it has); None without a manifest or
    an `expires`."""
    expires = (manifest(directory) or {}).get("expires")
    if not expires:
        return None
    return datetime.strptime(expires, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp() - time.time()


def renew(cli: Path, directory: Path = REGISTRY_DIR) -> str:
    """`edgescore renew` with the demo key; its one-line report."""
    args = [str(cli), "renew", str(directory), "--key", str(DEMO_KEY)]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"edgescore renew {directory} failed: {p.stderr.strip()}")
    return p.stdout.strip()


def publish_examples(cli: Path, directory: Path = REGISTRY_DIR) -> list[str]:
    """Publishes every example model whose artifact is not the one the manifest serves, then
    renews a manifest that has no expiry or expires within RENEW_WITHIN_S."""
    served = {e["name"]: e["sha256"] for e in (manifest(directory) or {"models": []})["models"] if e["mode"] == "active"}
    reports = []
    for m in EXAMPLE_MODELS:
        artifact = m.artifact
        if served.get(m.name) != hashlib.sha256(artifact.read_bytes()).hexdigest():
            reports.append(publish(cli, artifact, directory))
    left = seconds_left(directory)
    if manifest(directory) is not None and (left is None or left < RENEW_WITHIN_S):
        reports.append(renew(cli, directory))
    return reports


class RegistryServer:
    """A directory over HTTP on 127.0.0.1 (http.server in a thread of this process); `down()`
    closes the socket, `up()` serves again on the same port. Setting `directory` takes effect
    from the next request (the soak's frozen copy)."""

    def __init__(self, directory: Path = REGISTRY_DIR, port: int = 0):
        self.directory = directory
        self.port = port
        self.server: http.server.ThreadingHTTPServer | None = None
        self.up()

    def up(self) -> None:
        def handler(*args, **kwargs):
            return _QuietHandler(*args, directory=str(self.directory), **kwargs)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    # Headers and body in two writes: without this the body waits out the peer's delayed ACK
    # (harness/backend.py).
    disable_nagle_algorithm = True

    def log_message(self, *args) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=str(ROOT / "target" / "release" / "edgescore"))
    args = ap.parse_args(argv)
    try:
        reports = publish_examples(Path(args.cli))
    except (OSError, RuntimeError) as e:
        print(f"registry: {e}", file=sys.stderr)
        return 1
    for r in reports:
        print(r)
    versions = ", ".join(f"{n}@{v}" for n, v in sorted(active_versions().items()))
    print(f"registry {REGISTRY_DIR.relative_to(ROOT)}: {versions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
