#!/usr/bin/env python3
"""Render the Envoy configurations.

    python -m harness.render_envoy            # writes envoy.yaml and demo/envoy.compose.yaml
    python -m harness.render_envoy --check    # exit 1 if either file is stale

`envoy.yaml` (repository root) names the example models and their policies; the models
themselves come from the signed model registry (docs/registry.md) the demo serves on
127.0.0.1:8082 (`target/registry`, harness/registry.py), so a model update never changes it. It is
rendered from TEMPLATE (with its compose variant) and only changes when the template, the
policies or the demo key change; `tests/test_envoy.py::test_envoy_yaml_is_current` checks it.

This module is also the one place that knows the example models and their policies
(`EXAMPLE_MODELS`): the demo driver, the Envoy tests and the load bench import it. Tests and
benches that do not exercise the registry load the same configuration with the models inline
as bootstrap artifacts instead (`load_config()`), which needs no registry server.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "target" / "models"
# Relative to the repository root: Envoy is started from there (`make demo`, the tests).
WASM_REL = "target/wasm32-wasip1/wasm/edgescore_filter.wasm"
WASM = ROOT / WASM_REL
ENVOY_YAML = ROOT / "envoy.yaml"
COMPOSE_ENVOY_YAML = ROOT / "demo" / "envoy.compose.yaml"
# The key the example models were trained with (categorical features are hashed with it).
HASH_KEY_FILE = ROOT / "models" / "example" / "hash_key.txt"
# The TLS listener (the same filters as `edge`, behind TLS, for the TLS fingerprint features)
# and its self-signed certificate, which `make build` makes (never committed).
TLS_LISTENER = "edge_tls"
TLS_PORT = 10443
TLS_CERT_REL, TLS_KEY_REL = "target/tls/edge.crt", "target/tls/edge.key"
# Where the request headers Envoy writes the connection's fingerprints into are defined: the
# core's constants, read from there so that the filter and the configurations share one list.
FINGERPRINT_SOURCE = ROOT / "core" / "src" / "features" / "ja4.rs"


def fingerprint_headers() -> list[tuple[str, str]]:
    """`(header, Envoy formatter)` for each fingerprint the filter reads, JA4 first."""
    found = re.findall(r'^pub const (JA[34])_HEADER: &str = "([a-z0-9-]+)";$', FINGERPRINT_SOURCE.read_text(), re.M)
    if len(found) != 2:
        raise RuntimeError(f"{FINGERPRINT_SOURCE}: expected JA4_HEADER and JA3_HEADER, found {found}")
    return [(header, f"%TLS_{name}_FINGERPRINT%") for name, header in found]


def _fingerprint_mutations(indent: int) -> str:
    """The early header mutation's writes: each fingerprint header set from Envoy's formatter,
    over a client's copy (on plain HTTP the formatter is empty and sets nothing)."""
    pad = " " * indent
    lines = []
    for header, formatter in fingerprint_headers():
        lines += [f"{pad}- append:", f'{pad}    header: {{key: {header}, value: "{formatter}"}}',
                  f"{pad}    append_action: OVERWRITE_IF_EXISTS_OR_ADD"]
    return "\n".join(lines)


@dataclass(frozen=True)
class ModelPolicy:
    """One model of the configuration: its artifact under target/models and what its score
    triggers."""

    name: str
    threshold: float
    action: str  # allow | tag | block
    status: int | None = None
    body: str | None = None
    # Another artifact than target/models/<name>.esm (benches scoring other builds of a model).
    path: Path | None = None

    @property
    def artifact(self) -> Path:
        return self.path or MODELS_DIR / f"{self.name}.esm"


@dataclass(frozen=True)
class ExampleModel:
    """A line of models/example/models.txt: an example model, where it was trained and its policy."""

    policy: ModelPolicy
    source: Path  # the trained model, in its library's format
    library: str  # xgboost | lightgbm | catboost


# THE list of example models (the Makefile compiles the same file's lines).
EXAMPLE_LIST = ROOT / "models" / "example" / "models.txt"
BLOCK_BODY = "blocked by edgescore\n"


def read_example_list(path: Path = EXAMPLE_LIST) -> tuple[ExampleModel, ...]:
    out = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, source, library, threshold, action, status = line.split()
        policy = ModelPolicy(name, float(threshold), action, None if status == "-" else int(status),
                             BLOCK_BODY if action == "block" else None)
        out.append(ExampleModel(policy, path.parent / source, library))
    return tuple(out)


EXAMPLES: tuple[ExampleModel, ...] = read_example_list()
# Their policies, in configuration order (= order in the score header).
EXAMPLE_MODELS: tuple[ModelPolicy, ...] = tuple(e.policy for e in EXAMPLES)


# The text path (docs/configuration.md, `text`): qualifying request bodies go to the NLP
# service (nlp/, Ray Serve) behind the Envoy cluster `nlp`; these label thresholds and actions
# are for its demonstration model (nlp/README.md), whose probabilities are clear-cut.
TEXT_LABELS: dict[str, tuple[float, str]] = {
    "toxic": (0.8, "block"),
    "threat": (0.8, "block"),
    "sexual": (0.8, "block"),
    "spam": (0.8, "tag"),
}
# Where envoy.yaml expects the NLP service (`make nlp-up`; the demo starts it there too).
NLP_PORT = 8000
# In compose, Ray Serve runs nlp/serve_config.yaml as it is: its replicas listen on ingress_port.
COMPOSE_NLP_PORT = 8010


def text_config(**overrides: Any) -> dict[str, Any]:
    """The filter's `text` section as envoy.yaml ships it (every field spelt out)."""
    cfg: dict[str, Any] = {
        "cluster": "nlp",
        "path": "/score",
        "authority": "nlp",
        "timeout_ms": 500,
        "fail_open": True,
        "methods": ["POST", "PUT", "PATCH"],
        "plain_text": True,
        "json_fields": ["message", "text", "comment"],
        "form_fields": ["message", "text", "comment"],
        "max_body_bytes": 16384,
        "labels": {label: {"threshold": t, "action": a} for label, (t, a) in TEXT_LABELS.items()},
        "combine": "strongest",
        "header": "x-edgescore-text",
        "status": 403,
        "body": "blocked by edgescore\n",
    }
    cfg.update(overrides)
    return cfg


def hash_key() -> str:
    return HASH_KEY_FILE.read_text().strip()


def missing_artifacts(models: tuple[ModelPolicy, ...] = EXAMPLE_MODELS) -> list[Path]:
    """What `make build` writes that an Envoy of envoy.yaml needs, when absent: the .wasm, the
    models' artifacts and the TLS listener's certificate."""
    return [p for p in [WASM, *(m.artifact for m in models), ROOT / TLS_CERT_REL] if not p.is_file()]


def plugin_config(
    mode: str = "enforce",
    models: tuple[ModelPolicy, ...] = EXAMPLE_MODELS,
    sample_rate: float = 0.0,
    on_error: str = "allow",
    text: dict[str, Any] | bool = True,
    registry: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The filter's JSON configuration (a dict). Without `registry`, the artifacts are inlined
    (base64 bootstrap models); with it (a `registry_section`), models are named only and come
    from the registry. `text`: True for `text_config()`, False for no text path, or the section."""
    entries = []
    for m in models:
        e: dict[str, Any] = {"name": m.name} if registry else {
            "artifact": base64.b64encode(m.artifact.read_bytes()).decode("ascii")}
        e.update(threshold=m.threshold, action=m.action)
        if m.status is not None:
            e["status"] = m.status
        if m.body is not None:
            e["body"] = m.body
        entries.append(e)
    cfg = {
        "mode": mode,
        "hash_key": hash_key(),
        "on_error": on_error,
        # The demo shows both headers and logs the decision (the access log reads filter state);
        # the defaults are one header and no filter state (docs/configuration.md, their cost).
        "headers": {"scores": "x-edgescore", "decision": "x-edgescore-decision"},
        "filter_state": True,
        "feature_log": {"sample_rate": sample_rate},
        "models": entries,
    }
    if text:
        cfg["text"] = text_config() if text is True else text
    if registry:
        cfg["registry"] = registry
    return cfg


def _plugin_json_block(cfg: dict[str, Any], indent: int) -> str:
    """The plugin JSON as a YAML literal block: one key or model field per line, so a diff of
    envoy.yaml shows which model changed; a base64 artifact is one (long) line."""
    text = json.dumps(cfg, indent=2, ensure_ascii=True)
    pad = " " * indent
    return "\n".join(pad + line for line in text.splitlines())


# The root envoy.yaml. Everything that is not the plugin JSON is written here by hand so that
# the comments survive; tests and benches load the result and adjust addresses (load_config).
TEMPLATE = """\
# edgescore demo Envoy configuration: a listener on 127.0.0.1:10000 (and the same behind TLS on
# 127.0.0.1:10443) with the edgescore Wasm filter in front of the demo backend, and the registry
# poller that brings it its models.
#
#   make build && make demo         # or: .venv/bin/envoy -c envoy.yaml (from the repo root)
#
# The models are not in this file: the filter names them and sets what each score triggers,
# and a singleton service VM (bootstrap_extensions, below) fetches the signed models from the
# registry (docs/registry.md; the demo serves target/registry on 127.0.0.1:8082). Publishing a
# model never touches this file. Rendered by harness/render_envoy.py (`make envoy-yaml`) with its
# docker compose variant, demo/envoy.compose.yaml.

static_resources:
  listeners:
  - name: edge
    address:
      socket_address: {address: __LISTEN_ADDRESS__, port_value: 10000}
    filter_chains:
    - filters: &edge_filters
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          # Every response carries the request's x-request-id (generated by Envoy unless the
          # request brought one), and the access log records it: the key a team joins its own
          # labels on when it trains on the feature log (docs/security-teams.md).
          always_set_request_id_in_response: true
          # The connection's TLS fingerprints (tls_inspector, on edge_tls below) in the request
          # headers edgescore's tls_ja4* and tls_ja3 features read (core/src/features/ja4.rs),
          # over any copy a client sent. On plain HTTP the formatter is empty and writes nothing:
          # edgescore reads the headers on TLS connections only, so a client's copy there is
          # ignored (removing it would cost every request a header-map scan per name).
          early_header_mutation_extensions:
          - name: envoy.http.early_header_mutation.header_mutation
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation
              mutations:
__FINGERPRINT_MUTATIONS__
          # One JSON line per request on stdout, with what edgescore decided (filter state set by
          # the Wasm filter; proxy-wasm properties get Envoy's `wasm.` prefix). `features` is the
          # sampled feature-log line (a JSON object as a string) when feature_log.sample_rate > 0.
          access_log:
          - name: envoy.access_loggers.stdout
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
              log_format:
                json_format:
                  time: "%START_TIME%"
                  request_id: "%REQ(X-REQUEST-ID)%"
                  client: "%DOWNSTREAM_REMOTE_ADDRESS%"
                  method: "%REQ(:METHOD)%"
                  path: "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"
                  protocol: "%PROTOCOL%"
                  status: "%RESPONSE_CODE%"
                  details: "%RESPONSE_CODE_DETAILS%"
                  flags: "%RESPONSE_FLAGS%"
                  duration_ms: "%DURATION%"
                  user_agent: "%REQ(USER-AGENT)%"
                  upstream: "%UPSTREAM_HOST%"
                  edgescore: "%FILTER_STATE(wasm.edgescore:PLAIN)%"
                  edgescore_features: "%FILTER_STATE(wasm.edgescore.features:PLAIN)%"
                  edgescore_text: "%FILTER_STATE(wasm.edgescore.text:PLAIN)%"
                  edgescore_reasons: "%FILTER_STATE(wasm.edgescore.reasons:PLAIN)%"
                  ja4: "%TLS_JA4_FINGERPRINT%"
                  ja3: "%TLS_JA3_FINGERPRINT%"
          http_filters:
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: edgescore
                root_id: edgescore
                # FAIL_RELOAD: if the guest traps (a panic, an out-of-bounds access), Envoy
                # recreates the VM for the next request. With the default (FAIL_CLOSED) a trapped
                # VM stays dead and that worker answers every later request with 503 until Envoy
                # restarts. The request that hit the trap itself still fails.
                failure_policy: FAIL_RELOAD
                # Envoy >= 1.35. The text path holds a request's headers (Pause) while it reads
                # the body and waits for the NLP verdict, so that it can still add
                # x-edgescore-text (or block) before the upstream sees anything. Without this,
                # Envoy turns that Pause into StopAllIteration: the body never reaches the
                # filter and the request hangs until the route timeout.
                allow_on_headers_stop_iteration: true
                vm_config: &vm
                  vm_id: edgescore
                  runtime: envoy.wasm.runtime.v8
                  code:
                    local:
                      filename: __WASM__
                # The plugin configuration (docs/configuration.md, docs/registry.md). A
                # configuration the filter refuses (an unknown field, a bad key) fails
                # on_configure, and Envoy refuses the listener. The registry poller below reads
                # the same JSON (&plugin).
                # DEMO KEYS, do not copy them: registry.public_keys trusts demo/keys/demo.pub,
                # whose secret half (demo/keys/demo.key) is committed, so anyone can sign models
                # this Envoy serves; hash_key is the demo's, public too. Trust your own team's
                # NAME.pub (edgescore keygen) and read your own hash key from the environment
                # (docs/operators.md, sections 2 and 4).
                configuration: &plugin
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: |
__PLUGIN_JSON__
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
          route_config:
            name: edge
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: backend, timeout: 5s}
__TLS_LISTENER__
  clusters:
  # The demo backend (harness/backend.py): echoes what it received, edgescore headers included.
  - name: backend
    type: __BACKEND_TYPE__
    connect_timeout: 1s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {address: __BACKEND_ADDRESS__, port_value: 8081}
  # The NLP service (nlp/, `make nlp-up`: its Ray Serve replicas' own listeners, each node's
  # on one port), which the filter calls with dispatch_http_call for qualifying bodies (plugin `text` section: cluster, path,
  # timeout_ms). The filter's timeout bounds each call; a failure or timeout fails open.
  - name: nlp
    type: __NLP_TYPE__
    connect_timeout: 0.25s
    # Envoy's power-of-two-choices: of two random proxies, the one with fewer active requests.
    lb_policy: LEAST_REQUEST
    least_request_lb_config: {choice_count: 2}
    # Past these, Envoy answers the filter's call with a 503 at once (counted, fail-open)
    # instead of queueing work a transformer cannot catch up with.
    circuit_breakers:
      thresholds:
      - priority: DEFAULT
        max_connections: 64
        max_pending_requests: 64
        max_requests: 128
        max_retries: 0
    # A proxy that fails (5xx, resets, refused connections) is taken out for a while; with
    # every proxy out, Envoy's panic mode spreads the calls over all of them again.
    outlier_detection:
      consecutive_5xx: 5
      consecutive_gateway_failure: 3
      interval: 5s
      base_ejection_time: 15s
      max_ejection_percent: 50
    load_assignment:
      cluster_name: nlp
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {address: __NLP_ADDRESS__, port_value: __NLP_PORT__}

  # The model registry: any static HTTP server (nginx, a bucket); the demo's is harness/registry.py.
  - name: registry
    type: __REGISTRY_TYPE__
    connect_timeout: 1s
    load_assignment:
      cluster_name: registry
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {address: __REGISTRY_ADDRESS__, port_value: __REGISTRY_PORT__}

# The registry poller: one VM of the same .wasm on Envoy's main thread (singleton), never on a
# worker. It polls the manifest, verifies signatures and artifacts, and hands accepted models
# to the workers through shared data, which Envoy scopes by vm_id: so the vm_config is the
# filter's (*vm). root_id edgescore_registry gives the VM its role.
bootstrap_extensions:
- name: envoy.bootstrap.wasm
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.wasm.v3.WasmService
    singleton: true
    config:
      name: edgescore_registry
      root_id: edgescore_registry
      vm_config: *vm
      configuration: *plugin

admin:
  address:
    socket_address: {address: __ADMIN_ADDRESS__, port_value: 9901}

# Prometheus labels for the filter's metrics (docs/metrics.md). The filter puts the variable
# parts of a metric's name in dot-separated segments of their own, as in /stats'
#   wasmcustom.edgescore.model.bot.requests.block
# and each tag below lifts one segment out of the name into a label of /stats/prometheus: the
# regex runs on the full /stats name, its first group is cut from the name and its second is
# the label's value. That counter becomes edgescore_model_requests{model="bot",action="block"};
# /stats keeps the full names. Envoy takes one regex per tag name, hence the alternations.
# Score distributions are counters the filter keeps as the series of a Prometheus histogram
# (exact, and no host call per request): edgescore.model.<name>.score_permille_bucket.<le>
# (upper bounds in per mille, cumulative), ..._count and ..._sum; with `model` and `le` they
# become edgescore_model_score_permille_bucket{model="bot",le="950"}, which histogram_quantile
# reads. The drift watch's counters and reference gauges, edgescore.drift.bin.<model>.<feature>.<bin>
# and edgescore.drift.score_bin.<model>.<bin> (and reference_ppm, score_reference_ppm), become
# edgescore_drift_bin{model="bot",feature="path_length",bin="3"} and
# edgescore_drift_score_bin{model="bot",bin="3"}.
stats_config:
  stats_tags:
  - tag_name: model
    regex: '^wasmcustom\\.edgescore\\.(?:model|shadow|registry\\.version|registry\\.shadow_version|drift\\.(?:bin|reference_ppm|score_bin|score_reference_ppm))(\\.([^.]+))(?:\\.requests\\.[^.]+|\\.score_permille_(?:bucket\\.[^.]+|count|sum)|(?:\\.[^.]+)?\\.(?:\\d+|missing))?$'
  - tag_name: action
    regex: '^wasmcustom\\.edgescore\\.(?:(?:model|shadow)\\.[^.]+\\.requests|decision|text\\.decision)(\\.(allow|tag|block|shadow_block))$'
  - tag_name: le
    regex: '^wasmcustom\\.edgescore\\.(?:model|shadow)\\.[^.]+\\.score_permille_bucket(\\.(\\d+|\\+Inf))$'
  - tag_name: label
    regex: '^wasmcustom\\.edgescore\\.text\\.(?:label|verdict)(\\.([^.]+))$'
  - tag_name: reason
    regex: '^wasmcustom\\.edgescore\\.(?:registry\\.refused|verified_bots\\.(?:refused|directory_refused))(\\.([^.]+))$'
  - tag_name: feature
    regex: '^wasmcustom\\.edgescore\\.drift\\.(?:bin|reference_ppm)\\.[^.]+(\\.([^.]+))\\.(?:\\d+|missing)$'
  - tag_name: bin
    regex: '^wasmcustom\\.edgescore\\.drift\\.(?:bin|reference_ppm|score_bin|score_reference_ppm)\\.[^.]+(?:\\.[^.]+)?(\\.(\\d+|missing))$'
  histogram_bucket_settings:
  # The NLP call's latency (edgescore_text_latency_ms), resolved around the 500 ms timeout.
  - match:
      safe_regex: {regex: '^wasmcustom\\.edgescore\\.text\\.latency_ms$'}
    buckets: [1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000, 5000]
"""

TLS_LISTENER_TEMPLATE = """\
  # The same filters (*edge_filters) behind TLS, for the TLS fingerprint features
  # (docs/security-teams.md): tls_inspector computes the JA3 and JA4 of each client hello, which
  # the early header mutation above writes into the request. The certificate is the
  # self-signed one `make build` makes (target/tls/): use your own.
  - name: __TLS_LISTENER_NAME__
    address:
      socket_address: {address: __LISTEN_ADDRESS__, port_value: __TLS_PORT__}
    listener_filters:
    - name: envoy.filters.listener.tls_inspector
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector
        enable_ja3_fingerprinting: true
        enable_ja4_fingerprinting: true
    filter_chains:
    - filters: *edge_filters
      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
          common_tls_context:
            alpn_protocols: [h2, http/1.1]
            tls_certificates:
            - certificate_chain: {filename: __TLS_CERT__}
              private_key: {filename: __TLS_KEY__}
"""

COMPOSE_HEADER = """\
# The same configuration for docker-compose.yml (GENERATED with envoy.yaml by
# harness/render_envoy.py; do not edit). Differences from envoy.yaml, all because Envoy runs in its
# own container there:
# - the listener and admin bind 0.0.0.0 inside the container; compose publishes them on the
#   host's 127.0.0.1 only;
# - the backend is the compose service `backend` (STRICT_DNS on the compose network) instead of
#   127.0.0.1, and the NLP cluster is the compose service `nlp` on port 8010 (the replicas'
#   own listener, nlp/serve_config.yaml's ingress_port: no Serve proxy hop);
# - the registry is the compose service `registry` serving ./target/registry;
# - the .wasm is mounted at /etc/envoy/edgescore_filter.wasm;
# - there is no TLS listener (envoy.yaml's edge_tls, whose certificate `make build` makes on the
#   host), so the TLS features are missing.
"""


def demo_plugin_config() -> dict[str, Any]:
    """The plugin JSON envoy.yaml ships: the example policies, models from the demo registry."""
    public = json.loads(DEMO_PUB.read_text())
    return plugin_config(registry=registry_section([public], poll_seconds=REGISTRY_POLL_SECONDS))


def render(compose: bool = False) -> str:
    """The text of envoy.yaml (or of its docker-compose variant)."""
    text = TEMPLATE.replace("__TLS_LISTENER__\n", "" if compose else TLS_LISTENER_TEMPLATE)
    subs = {
        "__TLS_LISTENER_NAME__": TLS_LISTENER,
        "__TLS_PORT__": str(TLS_PORT),
        "__TLS_CERT__": TLS_CERT_REL,
        "__TLS_KEY__": TLS_KEY_REL,
        "__FINGERPRINT_MUTATIONS__": _fingerprint_mutations(14),
        "__LISTEN_ADDRESS__": "0.0.0.0" if compose else "127.0.0.1",
        "__ADMIN_ADDRESS__": "0.0.0.0" if compose else "127.0.0.1",
        "__BACKEND_TYPE__": "STRICT_DNS" if compose else "STATIC",
        "__BACKEND_ADDRESS__": "backend" if compose else "127.0.0.1",
        "__NLP_TYPE__": "STRICT_DNS" if compose else "STATIC",
        "__NLP_ADDRESS__": "nlp" if compose else "127.0.0.1",
        "__NLP_PORT__": str(COMPOSE_NLP_PORT if compose else NLP_PORT),
        "__REGISTRY_TYPE__": "STRICT_DNS" if compose else "STATIC",
        "__REGISTRY_ADDRESS__": "registry" if compose else "127.0.0.1",
        "__REGISTRY_PORT__": str(REGISTRY_PORT),
        "__WASM__": "/etc/envoy/edgescore_filter.wasm" if compose else WASM_REL,
        "__PLUGIN_JSON__": _plugin_json_block(demo_plugin_config(), 20),
    }
    for k, v in subs.items():
        text = text.replace(k, v)
    if compose:
        text = COMPOSE_HEADER + "\n" + text.split("\n\n", 1)[1]
    return text


NATIVE_ENVOY_YAML = ROOT / "envoy.native.yaml"

NATIVE_HEADER = """\
# edgescore demo Envoy configuration with the native module (native/, libedgescore_native.so)
# in place of the Wasm filter: envoy.yaml's listener, plugin JSON, registry cluster, access log
# and stats tags (docs/operators.md, "Wasm or native"). Rendered from envoy.yaml by
# harness/render_envoy.py (`make envoy-yaml`); edit that, not this.
#
#   make build && ENVOY_DYNAMIC_MODULES_SEARCH_PATH=target/native .venv/bin/envoy -c envoy.native.yaml
#
# The module polls the registry itself (on Envoy's main thread, with Envoy's HTTP callouts), so
# there is no service VM; its filter state keys have no `wasm.` prefix. Its metrics_namespace is
# the Wasm filter's (`wasmcustom`), and layered_runtime's flag has Envoy leave it out of
# /stats/prometheus names: the metrics, stats tags and dashboards are the Wasm filter's.
# The module is built for Envoy 1.40 (dynamic-modules ABI v0.2.0): rebuild it for another minor.
# The registry trusts the demo key, whose secret half is committed (demo/keys/): trust your own.

"""


def render_native() -> str:
    """envoy.native.yaml's text."""
    import yaml

    cfg = to_native(load_config(registry=True))
    return NATIVE_HEADER + yaml.safe_dump(cfg, sort_keys=False, width=100, allow_unicode=False)


def load_config(text: str | None = None, *, registry: bool = False, tls: bool = False) -> dict[str, Any]:
    """envoy.yaml as a dict (rendered unless `text` is given). With `registry`, as it ships;
    without, the models are inline bootstrap artifacts (target/models) and there is no poller
    nor registry cluster: what tests and benches that do not exercise the registry start, and
    without `tls` nor the TLS listener (its fixed port and the certificate `make build` makes)."""
    import yaml

    # A JSON round trip unshares the configuration the &plugin alias makes one object.
    cfg = json.loads(json.dumps(yaml.safe_load(text if text is not None else render())))
    listeners = cfg["static_resources"]["listeners"]
    if not registry:
        cfg.pop("bootstrap_extensions", None)
        cfg["static_resources"]["clusters"] = [c for c in cfg["static_resources"]["clusters"] if c["name"] != "registry"]
        if not tls:
            listeners[:] = [lst for lst in listeners if lst["name"] != TLS_LISTENER]
    # The TLS listener serves the edge listener's filters (the template's *edge_filters): one
    # object again, so that what a test or bench changes in hcm(cfg) holds for both.
    for lst in listeners[1:]:
        lst["filter_chains"][0]["filters"] = listeners[0]["filter_chains"][0]["filters"]
    if not registry:
        set_plugin_config(cfg, plugin_config())
    return cfg


# Helpers to derive test/bench variants from the loaded dict.


def hcm(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


def tls_listener(cfg: dict[str, Any]) -> dict[str, Any]:
    """The TLS listener (`load_config(tls=True)`, or as it ships)."""
    return next(lst for lst in cfg["static_resources"]["listeners"] if lst["name"] == TLS_LISTENER)


def hcms(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Every listener's HTTP connection manager (the edge listener's and the TLS listener's)."""
    return [chain["filters"][0]["typed_config"] for lst in cfg["static_resources"]["listeners"] for chain in lst["filter_chains"]]


# The edgescore filter's name in an HTTP filter chain: the Wasm filter's, or the native module's.
EDGESCORE_FILTER_NAMES = ("envoy.filters.http.wasm", "edgescore")


def edgescore_filter(manager: dict[str, Any]) -> dict[str, Any]:
    """The edgescore filter (Wasm or native) of an HTTP connection manager."""
    return next(f for f in manager["http_filters"] if f["name"] in EDGESCORE_FILTER_NAMES)


def wasm_filter(cfg: dict[str, Any]) -> dict[str, Any]:
    return edgescore_filter(hcm(cfg))["typed_config"]["config"]


# The native module's `metrics_namespace`: the Wasm filter's, so that /stats, /stats/prometheus
# (edgescore_decision{action="block"}), the stats tags and the dashboards are the same for both.
# Envoy 1.40 leaves a module's namespace out of /stats/prometheus names only with the runtime flag
# below (otherwise they read envoy_wasmcustom_edgescore_decision).
NATIVE_STATS_PREFIX = "wasmcustom"
NATIVE_RUNTIME = {"envoy.reloadable_features.dynamic_modules_strip_custom_stat_prefix": True}


def cluster(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in cfg["static_resources"]["clusters"] if c["name"] == name)


def set_cluster_address(cfg: dict[str, Any], name: str, address: str, port: int) -> None:
    """Points the (single-endpoint) cluster `name` at address:port."""
    ep = cluster(cfg, name)["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
    ep["endpoint"]["address"]["socket_address"].update(address=address, port_value=port)


def plugin_value(cfg: dict[str, Any], manager: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `{"@type": StringValue, "value": JSON}` that holds the plugin configuration, in the
    Wasm filter or the native module (of `manager`, or the edge listener's)."""
    typed = edgescore_filter(manager or hcm(cfg))["typed_config"]
    return typed["filter_config"] if "filter_config" in typed else typed["config"]["configuration"]


def set_plugin_config(cfg: dict[str, Any], plugin: dict[str, Any] | str) -> None:
    value = plugin if isinstance(plugin, str) else json.dumps(plugin)
    for manager in hcms(cfg):
        plugin_value(cfg, manager)["value"] = value
    for ext in cfg.get("bootstrap_extensions", []):
        if ext["typed_config"].get("config", {}).get("root_id") == REGISTRY_ROOT_ID:
            ext["typed_config"]["config"]["configuration"]["value"] = value


# The native module (native/, `make build`): libedgescore_native.so, which Envoy finds under
# ENVOY_DYNAMIC_MODULES_SEARCH_PATH (harness/envoyctl.py sets it to NATIVE_DIR for the Envoys it
# starts).
NATIVE_MODULE = "edgescore_native"
NATIVE_DIR = ROOT / "target" / "native"
NATIVE = NATIVE_DIR / f"lib{NATIVE_MODULE}.so"
DYNAMIC_MODULE_FILTER = "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter"


def to_native(cfg: dict[str, Any]) -> dict[str, Any]:
    """`cfg` (a Wasm configuration from load_config) with the native module in the Wasm filter's
    place: the same plugin JSON, registry cluster, access log and stats tags. The module polls
    the registry itself, so the Wasm service VM goes; its filter state keys have no `wasm.`
    prefix (that is the Wasm host's). Its metrics go in NATIVE_STATS_PREFIX, the Wasm filter's
    namespace, so /stats, /stats/prometheus and the stats tags are the same for both."""
    cfg = json.loads(json.dumps(cfg))
    for manager in hcms(cfg):
        f = edgescore_filter(manager)
        plugin = f["typed_config"]["config"]["configuration"]
        f["name"] = "edgescore"
        f["typed_config"] = {
            "@type": DYNAMIC_MODULE_FILTER,
            "dynamic_module_config": {"name": NATIVE_MODULE, "do_not_close": True, "metrics_namespace": NATIVE_STATS_PREFIX},
            "filter_name": "edgescore",
            "filter_config": plugin,
        }
    exts = [e for e in cfg.get("bootstrap_extensions", []) if e["typed_config"].get("config", {}).get("root_id") != REGISTRY_ROOT_ID]
    if exts:
        cfg["bootstrap_extensions"] = exts
    else:
        cfg.pop("bootstrap_extensions", None)
    layers = cfg.setdefault("layered_runtime", {}).setdefault("layers", [])
    if not layers:  # a layered_runtime of one's own replaces Envoy's default admin layer
        layers.append({"name": "admin", "admin_layer": {}})
    layers.insert(0, {"name": "edgescore_native", "static_layer": dict(NATIVE_RUNTIME)})
    for log in (log for manager in hcms(cfg) for log in manager.get("access_log", [])):
        fmt = log["typed_config"].get("log_format", {}).get("json_format", {})
        for k, v in fmt.items():
            if isinstance(v, str):
                fmt[k] = v.replace("%FILTER_STATE(wasm.", "%FILTER_STATE(")
    return cfg


# The `root_id` that makes a VM of the .wasm the registry poller (filter/src/root.rs).
REGISTRY_ROOT_ID = "edgescore_registry"
# Where envoy.yaml expects the registry (harness/registry.py serves target/registry there).
REGISTRY_PORT = 8082
# The demo polls often so that a live update shows within seconds; 10-60 s suits production.
REGISTRY_POLL_SECONDS = 2
DEMO_PUB = ROOT / "demo" / "keys" / "demo.pub"


def registry_section(public_keys: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    """The plugin configuration's `registry` section (docs/registry.md) for the cluster
    `registry`; `public_keys` are the parsed `NAME.pub` files."""
    section: dict[str, Any] = {"cluster": "registry", "path": "/manifest.json", "public_keys": public_keys}
    section.update(overrides)
    return section


def add_registry(cfg: dict[str, Any], plugin: dict[str, Any], address: str, port: int) -> None:
    """Adds the cluster `registry` (a static HTTP server at address:port) and the singleton
    service VM that polls it (`add_service_vm`)."""
    add_static_cluster(cfg, "registry", address, port)
    add_service_vm(cfg, plugin)


def add_static_cluster(cfg: dict[str, Any], name: str, address: str, port: int) -> None:
    """Adds the cluster `name`: one HTTP server at address:port."""
    cfg["static_resources"]["clusters"].append({
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": address, "port_value": port}}}}]}]},
    })


def add_service_vm(cfg: dict[str, Any], plugin: dict[str, Any]) -> None:
    """Adds the singleton service VM that polls the registry and fetches the verified bots' key
    directories: `envoy.bootstrap.wasm` with the filter's own vm_id and .wasm (so both see the
    same shared data), `root_id` REGISTRY_ROOT_ID and the same plugin JSON."""
    vm = json.loads(json.dumps(wasm_filter(cfg)["vm_config"]))
    cfg.setdefault("bootstrap_extensions", []).append({
        "name": "envoy.bootstrap.wasm",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.wasm.v3.WasmService",
            "singleton": True,
            "config": {
                "name": "edgescore_registry",
                "root_id": REGISTRY_ROOT_ID,
                "vm_config": vm,
                "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue", "value": json.dumps(plugin)},
            },
        },
    })


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if envoy.yaml or its compose variant is stale")
    args = ap.parse_args(argv)
    stale = []
    for path, text in ((ENVOY_YAML, render(False)), (COMPOSE_ENVOY_YAML, render(True)), (NATIVE_ENVOY_YAML, render_native())):
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)} ({len(text)} bytes)")
    if stale:
        print("stale (run `make envoy-yaml`): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
