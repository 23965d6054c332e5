"""The Ray Serve application: `TextScorer`, a replica that runs the model and answers HTTP.

Deploy with `serve run nlp/serve_config.yaml`, `serve deploy` / KubeRay (same file), or
`python -m nlp.run start` (a local Ray head). `build_app(args)` is the import path the YAML
names; args are nlp.config.ServiceConfig's mapping.

A replica has two doors to the same ScoringService (nlp/scoring_service.py):
- its own listener on `serving.ingress_port` (nlp/ingress.py), the path Envoy calls;
- Serve's HTTP proxy (`__call__`), Serve's standard path, kept for Serve's tooling, for
  clusters where only the proxy is exposed, and as the bench's point of comparison.
Serve places the replicas (on every node of a cluster if asked), health-checks them and
replaces failed ones; requests never go through another Ray actor call.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.config import DeploymentActorConfig
from starlette.requests import Request
from starlette.responses import Response

from nlp.config import ServiceConfig
from nlp.model_files import encoder_file, head_file, tokenizer_file
from nlp.scoring_service import ScoringService
from nlp.service_stats import STATS_ACTOR_NAME, StatsBoard

logger = logging.getLogger("ray.serve")


@serve.deployment(name="TextScorer")
class TextScorer:
    def __init__(self, config: dict[str, Any]) -> None:
        # OMP/BLAS/tokenizer thread limits arrive as runtime_env env_vars (build_app), set
        # before this process imported numpy or onnxruntime.
        self.config = ServiceConfig.from_mapping(config)
        self.service = ScoringService(
            self.config,
            replica=serve.get_replica_context().replica_tag,
            resolve_stats_board=lambda: serve.get_deployment_actor(STATS_ACTOR_NAME),
        )
        self.ingress = None
        serving = self.config.serving
        if serving.ingress_port is not None:
            from nlp.ingress import IngressServer

            self.ingress = IngressServer(self.service, serving.ingress_host, serving.ingress_port)
        door = f", listening on {serving.ingress_host}:{serving.ingress_port}" if self.ingress else ""
        logger.info("TextScorer ready: %s, pid %d%s", self.service.model_id, os.getpid(), door)

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """user_config {"max_batch_size", "batch_wait_timeout_s"}: changed without restart."""
        serving = self.config.serving
        self.service.batcher.set_batching(
            int(user_config.get("max_batch_size", serving.max_batch_size)),
            float(user_config.get("batch_wait_timeout_s", serving.batch_wait_timeout_s)),
        )

    def check_health(self) -> None:
        self.service.check_health()
        if self.ingress is not None and not self.ingress.serving:
            raise RuntimeError("the ingress listener stopped")

    async def __call__(self, request: Request) -> Response:
        reply = await self.service.handle(
            request.method, _path_within_app(request), request.headers.get("content-length"), request.stream()
        )
        return Response(reply.body, status_code=reply.status, headers=dict(reply.headers), media_type=reply.content_type)

    def __del__(self) -> None:
        # Serve calls this when it stops the replica: stop taking connections first.
        if getattr(self, "ingress", None) is not None:
            self.ingress.stop()
        if getattr(self, "service", None) is not None:
            self.service.close()


def _path_within_app(request: Request) -> str:
    path = request.url.path
    root = request.scope.get("root_path", "") or ""
    if root and path.startswith(root):
        path = path[len(root):]
    return "/" + path.strip("/")


def replica_env(config: ServiceConfig) -> dict[str, str]:
    """The environment of a replica process (also the raw-model bench's, to match it)."""
    threads = str(config.serving.omp_num_threads)
    package_root = str(Path(__file__).resolve().parent.parent)
    return {
        # Ray sets OMP_NUM_THREADS from num_cpus; these make it explicit and cover BLAS.
        "OMP_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "TOKENIZERS_PARALLELISM": "false",
        # Replicas import nlp from this checkout (or the image's copy under KubeRay).
        "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p),
    }


def build_app(args: dict[str, Any] | None = None) -> Application:
    """The Serve application for `args` ({"model": {...}, "serving": {...}, "cache": {...}})."""
    config = ServiceConfig.from_mapping(args)
    _check_model_files(config)
    serving = config.serving
    env_vars = replica_env(config)
    return TextScorer.options(
        num_replicas=serving.num_replicas,
        max_ongoing_requests=serving.effective_max_ongoing_requests,
        # Serve's proxy path queues no more than the replica would accept: past that it
        # answers 503 at once, as the replica's own door does.
        max_queued_requests=serving.max_queued_texts,
        ray_actor_options={
            "num_cpus": serving.num_cpus_per_replica,
            "runtime_env": {"env_vars": env_vars},
        },
        max_constructor_retry_count=serving.max_constructor_retry_count,
        health_check_period_s=serving.health_check_period_s,
        health_check_timeout_s=serving.health_check_timeout_s,
        user_config={
            "max_batch_size": serving.max_batch_size,
            "batch_wait_timeout_s": serving.batch_wait_timeout_s,
        },
        deployment_actors=[
            DeploymentActorConfig(
                name=STATS_ACTOR_NAME,
                actor_class=StatsBoard,
                actor_options={
                    "num_cpus": 0,
                    # On the head, which a cluster cannot lose anyway. Elsewhere, losing its
                    # node made Serve recreate it on that node before Ray had declared the
                    # node dead; that failure used up max_constructor_retry_count, and Serve
                    # then started no replica of this deployment until it was deployed
                    # again (tests/nlp/test_nlp_cluster.py).
                    "resources": {"node:__internal_head__": 0.001},
                    "runtime_env": {"env_vars": env_vars},
                },
            )
        ],
    ).bind(config.to_mapping())


def _check_model_files(config: ServiceConfig) -> None:
    """Fail the deploy here, once, before any replica starts, naming a file that is missing or
    whose SHA-256 is not the recorded or configured one."""
    model = config.model
    encoder_file(model)
    tokenizer_file(model)
    if model.kind == "encoder":
        head_file(model)
