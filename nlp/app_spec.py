"""Reading nlp/serve_config.yaml into what nlp.run needs to deploy it without the dashboard.

`serve deploy` needs a cluster with the dashboard; the local head runs without it, so
nlp.run builds the same application from the same file through `serve.run`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_CONFIG_PATH = Path(__file__).with_name("serve_config.yaml")


@dataclass
class AppSpec:
    name: str
    route_prefix: str
    args: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"  # where both doors listen
    port: int | None = None  # the service port clients call: the replicas' own listener
    serve_port: int = 8000  # Serve's HTTP proxy

    def with_serving(self, **overrides: Any) -> "AppSpec":
        """A copy with args.serving fields replaced (None values are ignored)."""
        spec = copy.deepcopy(self)
        serving = spec.args.setdefault("serving", {})
        serving.update({key: value for key, value in overrides.items() if value is not None})
        return spec

    def listening(self, host: str, port: int, serve_port: int) -> "AppSpec":
        """A copy whose replicas listen on host:port and Serve's proxy on host:serve_port."""
        spec = self.with_serving(ingress_host=host, ingress_port=port)
        spec.host, spec.port, spec.serve_port = host, port, serve_port
        return spec


def load_app_spec(path: str | Path = DEFAULT_CONFIG_PATH) -> AppSpec:
    document = yaml.safe_load(Path(path).read_text()) or {}
    applications = document.get("applications") or []
    if len(applications) != 1:
        raise ValueError(f"{path}: expected exactly one application, found {len(applications)}")
    application = applications[0]
    if application.get("import_path") != "nlp.app:build_app":
        raise ValueError(f"{path}: import_path must be nlp.app:build_app")
    if application.get("deployments"):
        raise ValueError(
            f"{path}: per-deployment overrides are for serve deploy; nlp.run takes the "
            "settings from args"
        )
    http = document.get("http_options") or {}
    args = application.get("args") or {}
    ingress_port = (args.get("serving") or {}).get("ingress_port")
    return AppSpec(
        name=application.get("name", "edgescore-nlp"),
        route_prefix=application.get("route_prefix", "/"),
        args=args,
        host=http.get("host", "127.0.0.1"),
        port=int(ingress_port) if ingress_port is not None else None,
        serve_port=int(http.get("port", 8000)),
    )
