"""docker-compose.yml (Envoy, the demo backend, the registry, the NLP service, Prometheus and
Grafana), checked without a Docker engine: it validates against the Compose Specification JSON
Schema (vendored in tests/schemas/, see its README), every host path it mounts exists after
`make build`, the Envoy configuration it mounts matches what harness/render_envoy.py renders and
points at the mounted .wasm, the `backend` service and the `nlp` service, the `nlp` service runs
nlp/serve_config.yaml on the Ray version requirements.in pins, Prometheus' configuration passes
`promtool check config` and scrapes Envoy's admin and the Ray head's metrics port, and Grafana's
provisioning names the data source every dashboard panel uses."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from harness import render_envoy
from harness.require import missing, require_build

ROOT = Path(__file__).resolve().parent.parent

SCHEMA = ROOT / "tests" / "schemas" / "compose_spec.json"
SCHEMA_SHA256 = "0dc04bd346dcfee1b1419628fff79937bbf076925f298f272a2b490e2b112bac"
COMPOSE = ROOT / "docker-compose.yml"
# The schema declares draft 2019-09 under a URI jsonschema does not recognise
# ("http://json-schema.org/draft/2019-09/schema#"), so name the draft explicitly.
VALIDATOR = jsonschema.Draft201909Validator


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
    assert set(svcs) == {"envoy", "backend", "nlp", "registry", "prometheus", "grafana"}
    assert svcs["envoy"]["image"].startswith("envoyproxy/envoy:v1.")
    # Published on the host's loopback only.
    for name, svc in svcs.items():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)
    assert "ports" not in svcs["backend"]
    assert "ports" not in svcs["nlp"], "the NLP service is reached through Envoy only"
    assert "ports" not in svcs["registry"], "the registry is for Envoy's poller only"
    assert all(src.startswith("./") for _, src, _ in _bind_mounts(compose)), "bind mounts must be relative to the repo"


# Directories the services mount, each with a file that says it is the right one.
MOUNTED_DIRS = {
    "./nlp": "app.py",
    "./target/registry": "manifest.json",  # `make build` publishes the example models there
    "./deploy/grafana/provisioning": "datasources/prometheus.yaml",
    "./deploy/grafana/dashboards": "edgescore.json",
}


def test_mounted_paths_exist_after_build(compose):
    require_build()
    for svc, src, dst in _bind_mounts(compose):
        if src in MOUNTED_DIRS:
            assert (ROOT / src / MOUNTED_DIRS[src]).is_file(), f"{svc}: {src} (mounted at {dst}) holds no {MOUNTED_DIRS[src]}"
            continue
        assert (ROOT / src).is_file(), f"{svc}: {src} (mounted at {dst}) does not exist"


def test_envoy_config_fits_the_containers(compose):
    require_build()
    mounts = {dst: src for _, src, dst in _bind_mounts(compose)}
    cfg_src = mounts["/etc/envoy/envoy.yaml"]
    text = (ROOT / cfg_src).read_text()
    assert text == render_envoy.render(compose=True), f"{cfg_src} is stale: run `make envoy-yaml`"
    cfg = render_envoy.load_config(text, registry=True)
    wasm = render_envoy.wasm_filter(cfg)
    # The registry poller runs the same .wasm and fetches from the `registry` service.
    poller = cfg["bootstrap_extensions"][0]["typed_config"]["config"]
    assert poller["vm_config"] == wasm["vm_config"] and poller["configuration"] == wasm["configuration"]
    reg = render_envoy.cluster(cfg, "registry")
    raddr = reg["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert (raddr["address"], reg["type"]) == ("registry", "STRICT_DNS")
    rcmd = compose["services"]["registry"]["command"]
    assert str(raddr["port_value"]) in rcmd and rcmd[rcmd.index("--directory") + 1] in mounts
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


def _pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==")
            out[name.split("[")[0].lower()] = version
    return out


def test_nlp_service_runs_the_serve_config_on_the_pinned_ray(compose):
    """The nlp service: the official Ray image of the Ray version requirements.in pins,
    installing the same model packages, running nlp/serve_config.yaml with the HTTP proxy
    opened to the compose network (the sed in its command really rewrites the host)."""
    nlp = compose["services"]["nlp"]
    pins = _pins(ROOT / "requirements.in")
    image, tag = nlp["image"].split(":")
    assert image == "rayproject/ray"
    assert tag.startswith(pins["ray"] + "-py") and tag.endswith("-cpu"), tag
    for name, version in _pins(ROOT / "nlp" / "requirements.txt").items():
        assert pins.get(name) == version, f"nlp/requirements.txt pins {name}=={version}, requirements.in {pins.get(name)}"
    mounts = {dst: src for svc, src, dst in _bind_mounts(compose) if svc == "nlp"}
    assert mounts["/app/nlp"] == "./nlp" and nlp["environment"]["PYTHONPATH"] == "/app"
    script = nlp["command"][-1]
    assert "-r /app/nlp/requirements.txt" in script
    assert "--no-deps -r /app/requirements-nodeps.txt" in script and mounts["/app/requirements-nodeps.txt"] == "./requirements-nodeps.txt"
    sed = re.search(r"(sed (?:-e '[^']+' )+)(\S+) > (\S+)", script)
    assert sed, script
    expressions, src, dst = sed.groups()
    assert src == "/app/nlp/serve_config.yaml" and script.rstrip().endswith(f"exec serve run --address auto {dst}")
    # On a Ray head started first, whose metrics agent exports on a fixed port (for Prometheus).
    assert re.search(r"ray start --head --metrics-export-port=\d+ ", script), script
    # The container's sed, run here on the same file (compose turns `$$` into `$`).
    rewritten = subprocess.run(["bash", "-c", expressions.replace("$$", "$") + shlex.quote(str(ROOT / "nlp" / "serve_config.yaml"))],
                               capture_output=True, text=True, check=True).stdout
    serve = yaml.safe_load(rewritten)
    assert serve["http_options"]["host"] == "0.0.0.0"
    assert str(serve["http_options"]["port"]) in nlp["expose"]
    serving = serve["applications"][0]["args"]["serving"]
    assert serving["ingress_host"] == "0.0.0.0" and str(serving["ingress_port"]) in nlp["expose"]
    app = serve["applications"][0]
    assert (ROOT / (app["import_path"].split(":")[0].replace(".", "/") + ".py")).is_file()
    assert "nlp" in compose["services"]["envoy"]["depends_on"]
    assert nlp["healthcheck"]["test"][-1].count("/healthz") == 1


def test_envoy_nlp_cluster_points_at_the_nlp_service(compose):
    require_build()
    cfg = render_envoy.load_config(render_envoy.render(compose=True), registry=True)
    nlp = render_envoy.cluster(cfg, "nlp")
    addr = nlp["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert (addr["address"], nlp["type"]) == ("nlp", "STRICT_DNS")
    serve = yaml.safe_load((ROOT / "nlp" / "serve_config.yaml").read_text())
    # The replicas' own listener (nlp/ingress.py), not Serve's proxy: no proxy hop.
    assert addr["port_value"] == serve["applications"][0]["args"]["serving"]["ingress_port"]
    assert str(addr["port_value"]) in compose["services"]["nlp"]["expose"]
    assert nlp["lb_policy"] == "LEAST_REQUEST"
    assert nlp["circuit_breakers"]["thresholds"] and nlp["outlier_detection"]
    text = json.loads(render_envoy.wasm_filter(cfg)["configuration"]["value"])["text"]
    assert text["cluster"] == "nlp" and text["path"] == "/score"
    assert render_envoy.wasm_filter(cfg)["allow_on_headers_stop_iteration"] is True


# ---------------------------------------------------------------------------------------------
# Prometheus and Grafana


def _mounts(compose: dict, service: str) -> dict[str, str]:
    return {dst: src for svc, src, dst in _bind_mounts(compose) if svc == service}


def _flag(command: list[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in command if a.startswith(f"--{name}="))


def test_prometheus_config_passes_promtool(compose, tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("no promtool (run `make system-tools`: Debian's prometheus package ships it)")
    prom = compose["services"]["prometheus"]
    config = _mounts(compose, "prometheus")[_flag(prom["command"], "config.file")]
    p = subprocess.run([promtool, "check", "config", str(ROOT / config)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    # promtool is live: a misspelt key fails it.
    bad = tmp_path / "prometheus.yml"
    bad.write_text((ROOT / config).read_text().replace("scrape_interval", "scrape_intervall", 1))
    assert subprocess.run([promtool, "check", "config", str(bad)], capture_output=True, timeout=60).returncode != 0


def test_prometheus_scrapes_envoy_admin_and_the_ray_head(compose):
    prom = compose["services"]["prometheus"]
    config = yaml.safe_load((ROOT / _mounts(compose, "prometheus")[_flag(prom["command"], "config.file")]).read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"envoy", "ray"}
    admin = render_envoy.load_config(render_envoy.render(compose=True), registry=True)["admin"]["address"]["socket_address"]
    assert jobs["envoy"]["metrics_path"] == "/stats/prometheus"
    assert jobs["envoy"]["static_configs"] == [{"targets": [f"envoy:{admin['port_value']}"]}]
    assert admin["address"] == "0.0.0.0", "Envoy's admin must take connections from the compose network"
    nlp = compose["services"]["nlp"]
    port = re.search(r"--metrics-export-port=(\d+)", nlp["command"][-1]).group(1)
    assert jobs["ray"]["static_configs"] == [{"targets": [f"nlp:{port}"]}] and port in nlp["expose"]
    assert jobs["ray"].get("metrics_path", "/metrics") == "/metrics"


def test_grafana_provisions_the_datasource_and_dashboard_it_uses(compose):
    grafana = compose["services"]["grafana"]
    mounts = _mounts(compose, "grafana")
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert len(sources) == 1 and sources[0]["type"] == "prometheus"
    uid = sources[0]["uid"]
    published = compose["services"]["prometheus"]["ports"][0].split(":")[-1]
    assert sources[0]["url"] == f"http://prometheus:{published}"
    providers = yaml.safe_load((provisioning / "dashboards" / "edgescore.yaml").read_text())["providers"]
    dashboards_dir = providers[0]["options"]["path"]
    assert dashboards_dir in mounts, f"the dashboard provider reads {dashboards_dir}, which is not mounted"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(dashboards_dir + "/") and (ROOT / mounts[dashboards_dir] / Path(home).name).is_file()
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    for path in (ROOT / mounts[dashboards_dir]).glob("*.json"):
        dash = json.loads(path.read_text())
        used = set()

        def walk(panels):
            for panel in panels:
                if panel.get("type") != "row":
                    used.add(panel["datasource"]["uid"])
                    used.update(t["datasource"]["uid"] for t in panel["targets"])
                    assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
                walk(panel.get("panels", []))
        walk(dash["panels"])
        used.update(v["datasource"]["uid"] for v in dash["templating"]["list"] if v["type"] == "query")
        assert used == {uid}, f"{path.name} uses data sources {used}, provisioning has {uid}"

