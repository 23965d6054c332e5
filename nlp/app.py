"""The Ray Serve application: `TextScorer`, the HTTP ingress that runs the model.

Deploy with `serve run nlp/serve_config.yaml`, `serve deploy` / KubeRay (same file), or
`python -m nlp.run start` (a local Ray head). `build_app(args)` is the import path the YAML
names; args are nlp.config.ServiceConfig's mapping.

Request flow inside a TextScorer replica:
- blank text: answered `ok` at once, the model is not called;
- text that fits one model window: `@serve.batch` collects concurrent requests, the batch
  handler calls the model directly (one ORT run per padding-bounded group, no extra hop);
- longer text: scored on a one-thread "long lane" next to the batch loop, so a 64 KiB post
  does not hold up the chat messages queued behind it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.serve import Application
from ray.serve.config import DeploymentActorConfig
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from nlp.config import ServiceConfig
from nlp.http_api import ApiError, parse_score_request, read_capped_body, score_body
from nlp.model import Score, TextClassifier
from nlp.model_files import HEAD_PATH, default_encoder_path, default_tokenizer_path, existing_file
from nlp.request_counter import COUNTER_ACTOR_NAME, RequestCounter

logger = logging.getLogger("ray.serve")

# Consecutive failed model runs after which the replica reports itself unhealthy, so Serve
# replaces the process instead of it failing every request.
FAILED_RUNS_BEFORE_UNHEALTHY = 3


@serve.deployment(name="TextScorer")
class TextScorer:
    def __init__(self, config: dict[str, Any]) -> None:
        # OMP/BLAS/tokenizer thread limits arrive as runtime_env env_vars (build_app), set
        # before this process imported numpy or onnxruntime.
        self.config = ServiceConfig.from_mapping(config)
        self.classifier = TextClassifier(self.config.model)
        self._counter = serve.get_deployment_actor(COUNTER_ACTOR_NAME)
        self._window_body = self.classifier.encoder.window_body_tokens
        self._long_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix="long-text")
        self._failed_runs = 0
        self._apply_batching(self.config.serving.max_batch_size, self.config.serving.batch_wait_timeout_s)
        logger.info("TextScorer ready: %s, pid %d", self.classifier.model_id, os.getpid())

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """user_config {"max_batch_size", "batch_wait_timeout_s"}: changed without restart."""
        self._apply_batching(
            int(user_config.get("max_batch_size", self.config.serving.max_batch_size)),
            float(user_config.get("batch_wait_timeout_s", self.config.serving.batch_wait_timeout_s)),
        )

    def _apply_batching(self, max_batch_size: int, batch_wait_timeout_s: float) -> None:
        max_ongoing = self.config.serving.effective_max_ongoing_requests
        if max_batch_size > max_ongoing:
            logger.warning(
                "max_batch_size %d > max_ongoing_requests %d: batches will never be full",
                max_batch_size, max_ongoing,
            )
        self._score_short.set_max_batch_size(max_batch_size)
        self._score_short.set_batch_wait_timeout_s(batch_wait_timeout_s)

    def check_health(self) -> None:
        if self._failed_runs >= FAILED_RUNS_BEFORE_UNHEALTHY:
            raise RuntimeError(f"{self._failed_runs} model runs in a row failed")

    async def __call__(self, request: Request) -> Response:
        path = _path_within_app(request)
        if path == "/score":
            if request.method != "POST":
                return _method_not_allowed("POST")
            return await self._score_request(request)
        if path == "/healthz":
            if request.method not in ("GET", "HEAD"):
                return _method_not_allowed("GET")
            return JSONResponse({"status": "ok", "model": self.classifier.model_id})
        if path == "/stats":
            if request.method not in ("GET", "HEAD"):
                return _method_not_allowed("GET")
            stats = await self._call_counter("snapshot")
            return JSONResponse({**stats, "model": self.classifier.model_id})
        return ApiError(404, "not_found", f"no route {path}; use POST /score").response()

    async def _score_request(self, request: Request) -> Response:
        try:
            body = await read_capped_body(
                request.headers.get("content-length"), request.stream(), self.config.serving.max_bytes
            )
            text = parse_score_request(body)
        except ApiError as err:
            await self._count({"requests": 1, "rejected": 1})
            return err.response()

        try:
            if not text.strip():
                await self._count({"requests": 1, "scored": 1, "blank": 1})
                score = self.classifier.score_batch([""])[0]  # no tokens: no model run
            elif self.classifier.encoder.token_count(text) > self._window_body:
                score = await self._score_long(text)
            else:
                score = await self._score_short(text)
        except Exception:
            logger.exception("scoring failed")
            await self._count({"requests": 1, "failed": 1})
            return ApiError(500, "model_failed", "the model failed on this request").response()
        return JSONResponse(score_body(score, self.classifier.model_id))

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)  # replaced from the config
    async def _score_short(self, texts: list[str]) -> list[Score]:
        batch = self.classifier.prepare(texts)
        # The counter update is submitted now, travels while the model runs, and is
        # awaited before answering, so /stats never lags a response.
        counting = self._count(_batch_counts(batch, long=False))
        try:
            results = self.classifier.score_prepared(batch)
            self._failed_runs = 0
        except Exception:
            self._failed_runs += 1
            raise
        finally:
            await counting
        return results

    async def _score_long(self, text: str) -> Score:
        batch = self.classifier.prepare([text])
        counting = self._count(_batch_counts(batch, long=True))
        try:
            loop = asyncio.get_running_loop()
            (score,) = await loop.run_in_executor(self._long_lane, self.classifier.score_prepared, batch)
            self._failed_runs = 0
        except Exception:
            self._failed_runs += 1
            raise
        finally:
            await counting
        return score

    def _count(self, counts: dict[str, int]):
        """Submit a counter update now; the returned coroutine waits for it to land."""
        return self._settle(self._counter.add.remote(counts), "add", counts)

    async def _call_counter(self, method: str, *args: Any) -> Any:
        return await self._settle(getattr(self._counter, method).remote(*args), method, *args)

    async def _settle(self, ref: ray.ObjectRef, method: str, *args: Any) -> Any:
        try:
            return await ref
        except ray.exceptions.RayActorError:
            # Serve recreates a dead deployment actor, but a cached handle keeps pointing
            # at the dead one: resolve the name again and resend (once).
            self._counter = serve.get_deployment_actor(COUNTER_ACTOR_NAME)
            return await getattr(self._counter, method).remote(*args)


def _batch_counts(batch, long: bool) -> dict[str, int]:
    with_tokens = batch.texts_with_tokens
    return {
        "requests": batch.n_texts,
        "scored": batch.n_texts,
        "blank": batch.n_texts - with_tokens,
        "model_texts": with_tokens,
        "long_texts": batch.n_texts if long else 0,
        "windows": len(batch.windows),
        "batches": 0 if long else 1,
    }


def _path_within_app(request: Request) -> str:
    path = request.url.path
    root = request.scope.get("root_path", "") or ""
    if root and path.startswith(root):
        path = path[len(root):]
    return "/" + path.strip("/")


def _method_not_allowed(allowed: str) -> Response:
    response = ApiError(405, "method_not_allowed", f"use {allowed}").response()
    response.headers["Allow"] = allowed
    return response


def build_app(args: dict[str, Any] | None = None) -> Application:
    """The Serve application for `args` ({"model": {...}, "serving": {...}})."""
    config = ServiceConfig.from_mapping(args)
    _check_model_files(config)
    serving = config.serving
    package_root = str(Path(__file__).resolve().parent.parent)
    env_vars = {
        # Ray sets OMP_NUM_THREADS from num_cpus; these make it explicit and cover BLAS.
        "OMP_NUM_THREADS": str(serving.omp_num_threads),
        "OPENBLAS_NUM_THREADS": str(serving.omp_num_threads),
        "MKL_NUM_THREADS": str(serving.omp_num_threads),
        "TOKENIZERS_PARALLELISM": "false",
        # Replicas import nlp from this checkout (or the image's copy under KubeRay).
        "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p),
    }
    return TextScorer.options(
        num_replicas=serving.num_replicas,
        max_ongoing_requests=serving.effective_max_ongoing_requests,
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
                name=COUNTER_ACTOR_NAME,
                actor_class=RequestCounter,
                actor_options={"num_cpus": 0, "runtime_env": {"env_vars": env_vars}},
            )
        ],
    ).bind(config.to_mapping())


def _check_model_files(config: ServiceConfig) -> None:
    """Fail the deploy here, once, with the missing file's name, before any replica starts."""
    model = config.model
    existing_file(model.onnx_path, "model.onnx_path") if model.onnx_path else default_encoder_path()
    existing_file(model.tokenizer_path, "model.tokenizer_path") if model.tokenizer_path else default_tokenizer_path()
    if model.kind == "encoder":
        existing_file(model.head_path or HEAD_PATH, "model.head_path")


