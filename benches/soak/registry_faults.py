"""The soak's registry faults: what a registry can show the fleet that the fleet must refuse
while the models it serves stay (docs/registry.md, "Replay and freeze").

- a bad model: signed, then its artifact corrupted in the store (`sha_mismatch`);
- a freeze: the server keeps showing one manifest while the team publishes on (whoever holds
  the server or the path to it); the manifest it shows expires during the freeze
  (`expired` on every poll), and the live manifest is accepted once the server thaws;
- an expired manifest: signed, but its `expires` has passed (a registry nobody renewed).

The frozen and the expired manifests are signed here (`harness.registry.signed_envelope`)
because their validities are shorter than `edgescore renew` signs (a minute at least): a
soak of 90 s must see its frozen manifest expire.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.envoyctl import Envoy
from harness.registry import DEMO_KEY, RegistryServer, manifest, publish, signed_envelope, utc
from harness.running import REGISTRY_STATS


def publish_bad(cli: Path, registry_dir: Path, good: Path) -> str:
    """Publishes `good` signed, then corrupts the served artifact: what a broken upload or a
    tampered store looks like to the poller (sha256 mismatch: refused)."""
    report = publish(cli, good, registry_dir)
    entry = max((m for m in manifest(registry_dir)["models"] if m["name"] == "bot"), key=lambda m: m["version"])
    target = registry_dir / entry["artifact"]
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    return f"{report.strip()} -> artifact corrupted after signing"


def resign(registry_dir: Path, published_at: float, expires: float) -> int:
    """Re-signs the registry's manifest with the next sequence and these two times (what
    `edgescore renew` does, at any validity); returns the new sequence."""
    payload = manifest(registry_dir)
    payload |= {"sequence": payload["sequence"] + 1, "published_at": utc(published_at), "expires": utc(expires)}
    # Not publish's lock file (manifest.json.tmp): a rename of our own, atomic like publish's.
    tmp = registry_dir / "manifest.json.soak"
    tmp.write_bytes(signed_envelope(payload, [DEMO_KEY]))
    os.replace(tmp, registry_dir / "manifest.json")
    return payload["sequence"]


def freeze(registry: RegistryServer, registry_dir: Path, frozen_dir: Path, valid_s: float) -> int:
    """Renews the live manifest valid for `valid_s` and makes `registry` show that copy from
    now on, whatever is published after; returns its sequence."""
    now = time.time()
    sequence = resign(registry_dir, now, now + valid_s)
    frozen_dir.mkdir(parents=True, exist_ok=True)
    (frozen_dir / "manifest.json").write_bytes((registry_dir / "manifest.json").read_bytes())
    if not (frozen_dir / "artifacts").exists():
        (frozen_dir / "artifacts").symlink_to(registry_dir / "artifacts", target_is_directory=True)
    registry.directory = frozen_dir
    return sequence


def thaw(registry: RegistryServer, registry_dir: Path) -> None:
    registry.directory = registry_dir


def publish_expired(registry_dir: Path) -> int:
    """A manifest signed two minutes ago that expired a minute ago; returns its sequence."""
    now = time.time()
    return resign(registry_dir, now - 120, now - 60)


def refused(envoy: Envoy, reason: str) -> int:
    """The poller's refusals for `reason` so far (they reach Envoy as they happen)."""
    return envoy.counter(f"{REGISTRY_STATS}refused.{reason}")


def accepted(envoy: Envoy) -> int:
    return envoy.counter(f"{REGISTRY_STATS}manifests_accepted")

