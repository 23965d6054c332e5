"""docker-compose.yml, checked without a Docker engine: it validates against the Compose
Specification JSON Schema (vendored in tests/schemas/, see its README), every host path it
mounts exists after `make build`, and the Envoy configuration it mounts matches what
demo/render_envoy.py renders and points at the mounted .wasm and the `backend` service."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "demo"))
import render_envoy  # noqa: E402

SCHEMA = ROOT / "tests" / "schemas" / "compose_spec.json"
SCHEMA_SHA256 = "0dc04bd346dcfee1b1419628fff79937bbf076925f298f272a2b490e2b112bac"
COMPOSE = ROOT / "docker-compose.yml"
# The schema declares draft 2019-09 under a URI jsonschema does not recognise
# ("http://json-schema.org/draft/2019-09/schema#"), so name the draft explicitly.
VALIDATOR = jsonschema.Draft201909Validator


def require_build() -> None:
    missing = render_envoy.missing_artifacts()
    if missing:
        msg = "not built (run `make build`): " + ", ".join(str(p.relative_to(ROOT)) for p in missing)
        if os.environ.get("EDGESCORE_REQUIRE_BUILD"):
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_vendored_schema_is_the_recorded_one():
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256


def test_compose_file_matches_the_compose_spec(compose):
    schema = json.loads(SCHEMA.read_text())
    cls = VALIDATOR
    cls.check_schema(schema)
    errors = sorted(cls(schema).iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_schema_catches_mistakes(compose):
    """The validator is live: a misspelt key and a wrong type are refused."""
    schema = json.loads(SCHEMA.read_text())
    v = VALIDATOR(schema)
    bad = json.loads(json.dumps(compose))
    bad["services"]["envoy"]["volume"] = bad["services"]["envoy"].pop("volumes")
    assert not v.is_valid(bad)
    bad = json.loads(json.dumps(compose))
    bad["services"]["backend"]["ports"] = "8081"
    assert not v.is_valid(bad)


def _bind_mounts(compose: dict):
    for name, svc in compose["services"].items():
        for vol in svc.get("volumes", []):
            src, dst = vol.split(":")[:2]
            yield name, src, dst


def test_services_and_ports(compose):
    svcs = compose["services"]
    assert set(svcs) == {"envoy", "backend"}
    assert svcs["envoy"]["image"].startswith("envoyproxy/envoy:v1.")
    # Published on the host's loopback only.
    for port in svcs["envoy"]["ports"]:
        assert port.startswith("127.0.0.1:"), port
    assert "ports" not in svcs["backend"]
    assert all(src.startswith("./") for _, src, _ in _bind_mounts(compose)), "bind mounts must be relative to the repo"


def test_mounted_paths_exist_after_build(compose):
    require_build()
    for svc, src, dst in _bind_mounts(compose):
        assert (ROOT / src).is_file(), f"{svc}: {src} (mounted at {dst}) does not exist"


def test_envoy_config_fits_the_containers(compose):
    require_build()
    mounts = {dst: src for _, src, dst in _bind_mounts(compose)}
    cfg_src = mounts["/etc/envoy/envoy.yaml"]
    text = (ROOT / cfg_src).read_text()
    assert text == render_envoy.render(compose=True), f"{cfg_src} is stale: run `make envoy-yaml`"
    cfg = render_envoy.load_config(text)
    wasm = render_envoy.wasm_filter(cfg)
    assert wasm["vm_config"]["code"]["local"]["filename"] in mounts
    assert mounts[wasm["vm_config"]["code"]["local"]["filename"]] == "./" + render_envoy.WASM_REL
    backend = cfg["static_resources"]["clusters"][0]
    addr = backend["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert (backend["name"], addr["address"], backend["type"]) == ("backend", "backend", "STRICT_DNS")
    cmd = compose["services"]["backend"]["command"]
    assert str(addr["port_value"]) == cmd[cmd.index("--port") + 1]
    listen = cfg["static_resources"]["listeners"][0]["address"]["socket_address"]
    admin = cfg["admin"]["address"]["socket_address"]
    published = {p.split(":")[2] for p in compose["services"]["envoy"]["ports"]}
    assert {str(listen["port_value"]), str(admin["port_value"])} == published
