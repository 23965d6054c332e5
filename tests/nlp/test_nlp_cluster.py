"""The NLP service on a two-node Ray cluster on this machine: nlp/serve_cluster.yaml deployed with
`serve deploy`, its two replicas on two nodes, each node serving, and the worker node lost under
load without a request going unanswered.

What runs, all on this machine:
- a head (`ray start --head`) and a worker (`ray start --address`), each with 2 CPUs for Ray, a
  temp dir of its own and a Unix session of its own (`ray start` forks the node's processes and
  exits; GCS, raylet, agents and every worker it forks stay in that session). So the worker can
  be killed whole, like a machine that dies, and teardown finds everything by session. Nothing
  here runs `ray stop`: it would stop every Ray on the machine, other tests' included.
- `serve deploy` of nlp/serve_cluster.yaml through the head's dashboard (what KubeRay does with
  serveConfigV2), with only its listening addresses moved to loopback ports;
- for the node loss, an Envoy with the filter whose `nlp` cluster lists both nodes' proxies and
  the replicas' own listener.

The cluster itself (nodes in sessions of their own, the dashboard, the Ray quirks met on the
way) is harness/ray_cluster.py.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from demo import traffic
from harness import client, render_envoy
from harness.loopback import free_port
from harness.require import require_build
from nlp.config import ServiceConfig
from harness.ray_cluster import (APP, BIN, Cluster, Dashboard, RayNode, app_summary, get_json, keep_logs, running_replicas, score,
                         wait_for)

REPO = Path(__file__).resolve().parents[2]
CLUSTER_CONFIG = REPO / "nlp" / "serve_cluster.yaml"
SINGLE_NODE_CONFIG = REPO / "nlp" / "serve_config.yaml"
RAYSERVICE = REPO / "deploy" / "kuberay" / "rayservice.yaml"
CPUS_PER_NODE = 2

TEXTS = [
    "thanks for the help yesterday, see you at practice tomorrow!",
    "good game everyone, that last round was close",
    "can someone help me with the quest in the swamp level",
    "you are a worthless idiot and everyone hates you",
    "earn money fast, visit my site for free skins",
]


# ---------------------------------------------------------------------------------------------
# the configuration files (no cluster needed)


def test_cluster_config_is_the_single_node_one_spread_out():
    """serve_cluster.yaml is a valid Serve config whose service settings are serve_config.yaml's
    but for the replica count and the listening address: batching, admission and the model have
    one source of truth."""
    from ray.serve.schema import ServeDeploySchema

    cluster = yaml.safe_load(CLUSTER_CONFIG.read_text())
    single = yaml.safe_load(SINGLE_NODE_CONFIG.read_text())
    schema = ServeDeploySchema.model_validate(cluster)
    assert schema.proxy_location.value == "EveryNode"
    (app,) = cluster["applications"]
    assert app["import_path"] == "nlp.app:build_app" and app["name"] == APP
    assert not app.get("deployments"), "deployment options come from args (see the file's comment)"
    spread = ServiceConfig.from_mapping(app["args"]).to_mapping()
    alone = ServiceConfig.from_mapping(single["applications"][0]["args"]).to_mapping()
    assert spread["serving"]["num_replicas"] >= 2
    differ = {key for key in spread["serving"] if spread["serving"][key] != alone["serving"][key]}
    assert differ <= {"num_replicas", "ingress_host"}, {k: (alone["serving"][k], spread["serving"][k]) for k in differ}
    assert {k: v for k, v in spread.items() if k != "serving"} == {k: v for k, v in alone.items() if k != "serving"}


def test_rayservice_carries_the_cluster_config():
    """deploy/kuberay/rayservice.yaml deploys exactly nlp/serve_cluster.yaml."""
    documents = [d for d in yaml.safe_load_all(RAYSERVICE.read_text()) if d]
    (service,) = [d for d in documents if d.get("kind") == "RayService"]
    assert service["apiVersion"] == "ray.io/v1"
    spec = service["spec"]
    assert yaml.safe_load(spec["serveConfigV2"]) == yaml.safe_load(CLUSTER_CONFIG.read_text())
    cluster = spec["rayClusterConfig"]
    import ray

    assert cluster["rayVersion"] == ray.__version__
    images = {c["image"] for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
              for c in group["template"]["spec"]["containers"]}
    assert len(images) == 1, f"head and workers must run one image: {images}"
    # No replica on the head (num-cpus 0), and with any one worker pod lost, CPUs enough on the
    # others for every replica: the lost one's replacement has somewhere to go.
    assert str(cluster["headGroupSpec"]["rayStartParams"].get("num-cpus")) == "0"
    serving = ServiceConfig.from_mapping(yaml.safe_load(spec["serveConfigV2"])["applications"][0]["args"]).serving
    pods = [_cpu_limit(group["template"]["spec"]["containers"][0])
            for group in cluster["workerGroupSpecs"] for _ in range(group["minReplicas"])]
    assert sum(pods) - max(pods) >= serving.num_replicas * serving.num_cpus_per_replica, pods


def _cpu_limit(container: dict) -> float:
    value = str(container["resources"]["limits"]["cpu"])
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)



@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    # Ray's socket paths must stay under 107 bytes: pytest's tmp_path is too deep for them.
    root = Path(tempfile.mkdtemp(prefix="esc-", dir="/tmp"))
    token = secrets.token_hex(32)
    head_port, worker_port, ingress_port = free_port(), free_port(), free_port()
    gcs_port, dashboard_port = free_port(), free_port()
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=token,
        # Ray lowers worker priority (niceness 15) by default: replicas must not lose the CPU
        # to whatever else runs on the machine.
        RAY_worker_niceness="0",
        RAY_USAGE_STATS_ENABLED="0",
        # One line per request in the replica logs as it happens (the default; pinned because
        # the test reads them, and RAY_SERVE_THROUGHPUT_OPTIMIZED would buffer 1000).
        RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE="1",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", str(CPUS_PER_NODE),
              "--object-store-memory", str(128 * 1024 * 1024), "--min-worker-port", "0", "--max-worker-port", "0",
              "--disable-usage-stats"]
    head = RayNode("head", root / "head", env)
    worker = RayNode("worker", root / "worker", dict(env, RAY_SERVE_WORKER_PROXY_HTTP_PORT=str(worker_port)))
    failed_before = request.session.testsfailed
    setup_failed = True
    timings: dict[str, float] = {}
    try:
        started = time.monotonic()
        head.start(["--head", "--port", str(gcs_port), "--ray-client-server-port", str(free_port()),
                    "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
                    "--dashboard-port", str(dashboard_port), "--dashboard-agent-listen-port", str(free_port()),
                    *common])
        timings["head_start_s"] = time.monotonic() - started
        mark = time.monotonic()
        worker.start(["--address", f"127.0.0.1:{gcs_port}", "--dashboard-agent-listen-port", str(free_port()), *common])
        timings["worker_start_s"] = time.monotonic() - mark
        dashboard = Dashboard(dashboard_port, token)
        nodes = wait_for("two live nodes", lambda: (n := [x for x in dashboard.nodes() if x["state"] == "ALIVE"])
                      and len(n) == 2 and n, 60)
        head_id = next(n["node_id"] for n in nodes if n["is_head_node"])
        worker_id = next(n["node_id"] for n in nodes if not n["is_head_node"])

        # The shipped file, its doors moved to loopback ports of this test. Both nodes'
        # replicas bind the one ingress port (SO_REUSEPORT): on one machine, the stand-in for
        # <node>:port on every node.
        config = yaml.safe_load(CLUSTER_CONFIG.read_text())
        config["http_options"].update(host="127.0.0.1", port=head_port)
        config["applications"][0]["args"]["serving"].update(ingress_host="127.0.0.1", ingress_port=ingress_port)
        config_path = root / "serve_cluster.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        mark = time.monotonic()
        deployed = subprocess.run(
            [str(BIN / "serve"), "deploy", "--address", dashboard.base, str(config_path)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
        )
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        wait_for("the app RUNNING with 2 replicas", lambda: running_replicas(dashboard, 2), 300)
        for door, port in (("head proxy", head_port), ("worker proxy", worker_port), ("ingress", ingress_port)):
            wait_for(f"/healthz through the {door} (:{port})",
                  lambda port=port: get_json(port, "/healthz").get("status") == "ok", 60)
        timings["deploy_s"] = time.monotonic() - mark
        setup_failed = False
        yield Cluster(head, worker, dashboard, head_id, worker_id, head_port, worker_port, ingress_port, timings)
    finally:
        try:
            if setup_failed or request.session.testsfailed > failed_before:
                keep_logs(tmp_path_factory.mktemp("ray-cluster-logs"), head, worker)
        finally:
            try:
                worker.stop()
                head.stop()
            finally:
                shutil.rmtree(root, ignore_errors=True)




# ---------------------------------------------------------------------------------------------
# one replica per node, each serving


def test_replicas_on_two_nodes_each_serving(cluster: Cluster):
    replicas = running_replicas(cluster.dashboard, 2)
    assert replicas is not None
    by_node = {r["node_id"]: r for r in replicas}
    assert set(by_node) == {cluster.head_node_id, cluster.worker_node_id}, "both replicas on one node"
    # The state API agrees, actor by actor.
    actors = {a["name"]: a for a in cluster.dashboard.actors() if a["state"] == "ALIVE"}
    for replica in replicas:
        assert actors[replica["actor_name"]]["node_id"] == replica["node_id"]
    # The deployment's own actors (the /stats board) live on the head: losing another node must
    # not take them along (nlp/app.py says what happened when it did).
    deployment_actors = [a for name, a in actors.items() if name.startswith(f"SERVE_DEPLOYMENT_ACTOR::{APP}::")]
    assert deployment_actors and all(a["node_id"] == cluster.head_node_id for a in deployment_actors), deployment_actors
    # Each node has its proxy.
    proxies = cluster.dashboard.serve_details()["proxies"]
    assert {p["node_id"] for p in proxies.values() if p["status"] == "HEALTHY"} == set(by_node)
    # The worker node's replica is a process of the worker's session: killing that session below
    # kills the node Ray knows as the worker.
    assert by_node[cluster.worker_node_id]["pid"] in {p.pid for p in cluster.worker.processes()}

    sent = {}
    for port, name in ((cluster.head_port, "head"), (cluster.worker_port, "worker")):
        for i in range(10):
            request_id = f"spread-{name}-{i}-{secrets.token_hex(4)}"
            status, error = score(port, request_id, f"{TEXTS[i % len(TEXTS)]} ({i})")
            assert status == 200, (port, error)
            sent[request_id] = name
    served = wait_for("the access log lines", lambda: (s := cluster.served()) and set(sent) <= set(s) and s, 15)
    node_name = {cluster.head_node_id: "head", cluster.worker_node_id: "worker"}
    # Every request was served once, by the replica on the node whose proxy took it (Serve's
    # locality routing: that replica had room), so both nodes served.
    assert {rid: node_name[served[rid][1]] for rid in sent} == sent
    assert {served[rid][2] for rid in sent} == {200}
    assert {served[rid][0] for rid in sent} == {r["replica_id"] for r in replicas}
    print(f"\ncluster up: head {cluster.timings['head_start_s']:.1f} s, worker "
          f"{cluster.timings['worker_start_s']:.1f} s, deploy to 2 RUNNING replicas "
          f"{cluster.timings['deploy_s']:.1f} s; 10 requests per proxy, each served on its node")


# ---------------------------------------------------------------------------------------------
# the worker node lost under load


@dataclass
class Attempt:
    port: int
    status: int | None
    error: str
    sent_at: float  # time.monotonic()
    took_s: float


@dataclass
class Sent:
    request_id: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].status == 200


class DirectStream(threading.Thread):
    """Requests one after another to Serve's proxies. With several ports it takes them in turn
    and, on a failure, sends the request to the next one (the retry a load balancer in front of
    the proxies makes); with one port and retry off, a failure is final."""

    def __init__(self, name: str, ports: list[int], retry: bool, stop: threading.Event, deadline_s: float = 60.0):
        super().__init__(name=f"stream-{name}", daemon=True)
        self.label, self.ports, self.retry, self.stop, self.deadline_s = name, ports, retry, stop, deadline_s
        self.sent: list[Sent] = []

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            request = Sent(f"{self.label}-{i}-{secrets.token_hex(4)}")
            self.sent.append(request)
            first = time.monotonic()
            for n in range(10_000):
                port = self.ports[(i + n) % len(self.ports)]
                t0 = time.monotonic()
                # Each attempt its own id: the access logs then say which attempt was served.
                status, error = score(port, f"{request.request_id}.{n}", f"{TEXTS[i % len(TEXTS)]} #{i}")
                request.attempts.append(Attempt(port, status, error, t0, time.monotonic() - t0))
                if status == 200 or not self.retry or time.monotonic() - first > self.deadline_s:
                    break
                time.sleep(0.05)
            i += 1
            time.sleep(0.05)


class EnvoyStream(threading.Thread):
    """Chat messages through Envoy and the filter, one after another; the message carries its
    index so that the upstream's record of it can be found."""

    def __init__(self, port: int, stop: threading.Event):
        super().__init__(name="stream-envoy", daemon=True)
        self.port, self.stop = port, stop
        self.sent: list[tuple[int, int | None, float, float]] = []  # (index, status, sent_at, took_s)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            body = json.dumps({"message": f"{TEXTS[i % 3]} #{i}", "channel": "general"}).encode()
            t0 = time.monotonic()
            try:
                status: int | None = client.send("127.0.0.1", self.port, traffic.chat("cluster", "ok", body)).status
            except OSError:
                status = None
            self.sent.append((i, status, t0, time.monotonic() - t0))
            i += 1
            time.sleep(0.05)


def envoy_config(upstream_port: int, nlp_ports: list[int]) -> dict:
    """envoy.yaml as shipped, on loopback ports, its `nlp` cluster listing every node's proxy."""
    cfg = render_envoy.load_config()
    cfg["admin"]["address"]["socket_address"]["port_value"] = 0
    cfg["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] = 0
    render_envoy.wasm_filter(cfg)["vm_config"]["code"]["local"]["filename"] = str(render_envoy.WASM)
    render_envoy.set_cluster_address(cfg, "backend", "127.0.0.1", upstream_port)
    render_envoy.cluster(cfg, "nlp")["load_assignment"]["endpoints"][0]["lb_endpoints"] = [
        {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}
        for port in nlp_ports
    ]
    return cfg


def envoy_calls(edge, port: int) -> int:
    """Calls Envoy sent to the `nlp` endpoint on `port` (admin /clusters)."""
    status, text = edge.envoy.get("/clusters")
    assert status == 200
    m = re.search(rf"^nlp::127\.0\.0\.1:{port}::rq_total::(\d+)$", text, re.M)
    return int(m.group(1)) if m else 0


# The filter's timeout on the NLP call, and what a fail-open request may take beyond it on a
# 2-core machine that is also starting a replica.
TEXT_TIMEOUT_S = render_envoy.text_config()["timeout_ms"] / 1000
ENVOY_MARGIN_S = 1.5


def test_losing_the_worker_node_loses_no_request(cluster: Cluster, upstream, start_envoy):
    """Last: kills the worker node."""
    require_build()
    # Envoy calls every door: both proxies and the replicas' listener.
    edge = start_envoy(envoy_config(upstream.port, [cluster.head_port, cluster.worker_port, cluster.ingress_port]),
                       "cluster-edge")
    upstream.take()
    before = {r["replica_id"]: r for r in running_replicas(cluster.dashboard, 2)}
    worker_replica = next(r for r in before.values() if r["node_id"] == cluster.worker_node_id)

    stop = threading.Event()
    head_only = DirectStream("head", [cluster.head_port], retry=False, stop=stop)
    both = DirectStream("both", [cluster.head_port, cluster.worker_port], retry=True, stop=stop)
    through_envoy = EnvoyStream(edge.port, stop)
    streams = (head_only, both, through_envoy)
    for stream in streams:
        stream.start()
    try:
        # Load on both nodes first: the worker's proxy has answered, and Envoy has called it.
        wait_for("answers through both proxies and Envoy",
              lambda: len(head_only.sent) > 10 and len(through_envoy.sent) > 10
              and sum(1 for s in both.sent if s.answered and s.attempts[-1].port == cluster.worker_port) >= 5
              and envoy_calls(edge, cluster.worker_port) >= 3, 60, 0.2)
        kill_started = time.monotonic()
        killed = cluster.worker.kill()
        killed_at, killed_wall = time.monotonic(), time.time()
        assert worker_replica["pid"] in {p.pid for p in killed}

        # Ray notices (the GCS's health checks of the raylet); Serve replaces the replica.
        node_dead_s = replaced_s = None
        after: list[dict] = []
        deadline = killed_at + 180
        while node_dead_s is None or replaced_s is None:
            assert time.monotonic() < deadline, (f"node dead after {node_dead_s} s, replicas back after {replaced_s} s; "
                                                 f"{app_summary(cluster.dashboard)}")
            since = time.monotonic() - killed_at
            try:
                if node_dead_s is None and any(n["node_id"] == cluster.worker_node_id and n["state"] == "DEAD"
                                               for n in cluster.dashboard.nodes()):
                    node_dead_s = since
                running = running_replicas(cluster.dashboard, 2)
                if replaced_s is None and running and all(r["node_id"] == cluster.head_node_id for r in running):
                    replaced_s, after = since, running
            except OSError:  # the dashboard busy with the dead node: ask again
                pass
            time.sleep(0.25)
        time.sleep(3)  # the load goes on with the replacement in place
    finally:
        stop.set()
        for stream in streams:
            stream.join(timeout=60)
    assert not any(stream.is_alive() for stream in streams)

    # 1. Through the head's proxy, where the head's replica serves: not one failure, no retry.
    failures = [s for s in head_only.sent if not s.answered]
    assert not failures, [(s.request_id, s.attempts) for s in failures]
    assert sum(1 for s in head_only.sent if s.attempts[0].sent_at > killed_at) > 10

    # 2. Through both proxies with a retry on the other: every request answered. What failed was
    # sent to the worker's proxy: the request in flight while the node died, then connections
    # refused (nothing sent: safe to retry anywhere).
    unanswered = [s for s in both.sent if not s.answered]
    assert not unanswered, [(s.request_id, s.attempts) for s in unanswered]
    failed = [a for s in both.sent for a in s.attempts if a.status != 200]
    assert all(a.port == cluster.worker_port for a in failed), failed
    in_flight = [a for a in failed if a.error != "refused"]
    assert all(a.sent_at < killed_at and a.sent_at + a.took_s >= kill_started for a in in_flight), in_flight
    assert all(a.sent_at >= kill_started for a in failed if a.error == "refused")
    retried = [s for s in both.sent if len(s.attempts) > 1]

    # 3. Through Envoy: every request reached the upstream, with a verdict or failed open
    # (x-edgescore-text: error=...), within the filter's timeout.
    records = {}
    for record in upstream.take():
        index = int(json.loads(record["body"])["message"].rsplit("#", 1)[1])
        assert index not in records, f"message {index} reached the upstream twice"
        records[index] = dict(record["headers"]).get("x-edgescore-text")
    assert [status for _, status, _, _ in through_envoy.sent] == [200] * len(through_envoy.sent)
    assert sorted(records) == [i for i, _, _, _ in through_envoy.sent]
    assert all(records.values()), "a request reached the upstream without the text header"
    slowest = max(took for _, _, _, took in through_envoy.sent)
    assert slowest <= TEXT_TIMEOUT_S + ENVOY_MARGIN_S, slowest
    failed_open = [i for i, value in records.items() if value.startswith("error=")]
    verdicts_after = [i for i, _, sent_at, _ in through_envoy.sent
                      if sent_at > killed_at and "label=" in records[i]]
    assert verdicts_after, "no verdict through Envoy after the node loss"

    # 4. Which node served what: before the kill both nodes served the load; after it, the head.
    # (Attempts that straddle the kill are left out: the worker may have answered them.)
    served = cluster.served()
    node_name = {cluster.head_node_id: "head", cluster.worker_node_id: "worker"}
    by_phase: dict[str, set[str]] = {"before": set(), "after": set()}
    for s in both.sent + head_only.sent:
        for n, attempt in enumerate(s.attempts):
            if attempt.status != 200:
                continue
            ended = attempt.sent_at + attempt.took_s
            entry = served.get(f"{s.request_id}.{n}")
            # A replica writes its access line as it answers: one answered just before the
            # kill may have died with its line unwritten.
            assert entry or kill_started - 1.0 < ended < killed_at, f"{s.request_id}.{n} not in any replica log"
            if entry and ended < kill_started:
                by_phase["before"].add(node_name[entry[1]])
            elif entry and attempt.sent_at > killed_at:
                by_phase["after"].add(node_name[entry[1]])
    assert by_phase == {"before": {"head", "worker"}, "after": {"head"}}, by_phase

    # 5. Ray brought the replica count back: the worker's replica is gone, a new one runs on the
    # head (the only node left, with a free CPU) and takes requests.
    assert worker_replica["replica_id"] not in {r["replica_id"] for r in after}
    replacement = [r for r in after if r["replica_id"] not in before]
    assert len(replacement) == 1 and replacement[0]["node_id"] == cluster.head_node_id
    replacement_started_s = replacement[0]["start_time_s"] - killed_wall
    actors = {a["name"]: a for a in cluster.dashboard.actors()}
    assert actors[worker_replica["actor_name"]]["state"] == "DEAD"
    ids = [f"after-{i}-{secrets.token_hex(4)}" for i in range(24)]
    with ThreadPoolExecutor(4) as pool:  # concurrent: the router's two choices see queues
        results = list(pool.map(lambda rid: score(cluster.head_port, rid, TEXTS[0]), ids))
    assert [status for status, _ in results] == [200] * len(ids), results
    served = wait_for("the access log lines", lambda: (s := cluster.served()) and set(ids) <= set(s) and s, 15)
    assert {served[rid][0] for rid in ids} == {r["replica_id"] for r in after}

    print(f"\nworker node killed ({len(killed)} processes) under load: GCS declared it dead after "
          f"{node_dead_s:.1f} s; Serve started the replacement on the head {replacement_started_s:.1f} s "
          f"after the kill and had 2 RUNNING replicas again after {replaced_s:.1f} s\n"
          f"  head proxy only:  {len(head_only.sent)} requests, all answered on the first attempt\n"
          f"  both proxies:     {len(both.sent)} requests, all answered; {len(retried)} needed a retry "
          f"({len(in_flight)} lost in flight at the kill, {len(failed) - len(in_flight)} connections refused)\n"
          f"  through Envoy:    {len(through_envoy.sent)} requests, all 200 at the upstream; "
          f"{len(failed_open)} failed open, slowest {1000 * slowest:.0f} ms")
