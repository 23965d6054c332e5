"""What one replica does with a request, whichever door it came in by. No web framework.

`ScoringService.handle(method, path, content_length, body_chunks)` answers every route of
the API (nlp/http_api.py) with a Reply. A POST /score goes: body (capped) -> text -> blank?
answered at once -> the verdict cache -> the batcher (nlp/batcher.py), whose lanes run the
model on their own threads while the caller's event loop awaits the result.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Callable

from nlp.batcher import FAILED_RUNS_BEFORE_UNHEALTHY, Overloaded, QueueTimeout, TextBatcher
from nlp.config import ServiceConfig
from nlp.http_api import (
    ApiError,
    Reply,
    json_reply,
    method_not_allowed,
    overloaded,
    parse_score_request,
    read_capped_body,
    score_body,
)
from nlp.model import Score, TextClassifier
from nlp.service_stats import GAUGE_KEYS, STATS_KEYS, ServiceStats, StatsPusher
from nlp.verdict_cache import VerdictCache

logger = logging.getLogger("ray.serve")


class ScoringService:
    def __init__(
        self,
        config: ServiceConfig,
        replica: str = "local",
        resolve_stats_board: Callable[[], Any] | None = None,
    ) -> None:
        self.config = config
        serving = config.serving
        self.classifier = TextClassifier(config.model)
        self.model_id = self.classifier.model_id
        self.stats = ServiceStats()
        self.cache = VerdictCache(config.cache.max_entries, config.cache.ttl_s)
        self._blank_body = score_body(self.classifier.score_batch([""])[0], self.model_id)
        self._health_body = json_reply({"status": "ok", "model": self.model_id}).body
        self.batcher = TextBatcher(
            self.classifier,
            self.stats,
            max_batch_size=serving.max_batch_size,
            batch_wait_timeout_s=serving.batch_wait_timeout_s,
            max_queued_texts=serving.max_queued_texts,
            max_queued_long_texts=serving.max_queued_long_texts,
            queue_timeout_s=serving.queue_timeout_s,
            on_scored=self._remember if self.cache.enabled else None,
        )
        # Without a board (tests, a single process) /stats is this replica's own counts.
        self._pusher = (
            StatsPusher(self.stats, replica, resolve_stats_board, serving.stats_push_interval_s)
            if resolve_stats_board is not None
            else None
        )

    async def handle(
        self, method: str, path: str, content_length: str | None, body: AsyncIterator[bytes]
    ) -> Reply:
        try:
            if path == "/score":
                if method != "POST":
                    raise method_not_allowed("POST")
                return await self._score(content_length, body)
            if path in ("/healthz", "/stats", "/metrics"):
                if method not in ("GET", "HEAD"):
                    raise method_not_allowed("GET")
                if path == "/healthz":
                    return Reply(200, self._health_body)
                totals = await self.totals()
                if path == "/stats":
                    return json_reply({**totals, "model": self.model_id})
                return Reply(200, prometheus_text(totals, self.model_id).encode(), "text/plain; version=0.0.4")
            raise ApiError(404, "not_found", f"no route {path}; use POST /score")
        except ApiError as err:
            return err.reply()

    async def totals(self) -> dict[str, int]:
        self.stats.set_gauge("cache_entries", len(self.cache))
        if self._pusher is None:
            return self.stats.snapshot()
        return await self._pusher.total()

    def check_health(self) -> None:
        if self.batcher.failed_runs >= FAILED_RUNS_BEFORE_UNHEALTHY:
            raise RuntimeError(f"{self.batcher.failed_runs} model runs in a row failed")

    def close(self) -> None:
        self.batcher.close()
        if self._pusher is not None:
            self._pusher.stop()

    async def _score(self, content_length: str | None, chunks: AsyncIterator[bytes]) -> Reply:
        try:
            text = parse_score_request(
                await read_capped_body(content_length, chunks, self.config.serving.max_bytes)
            )
        except ApiError as err:
            self.stats.add(requests=1, rejected=1)
            return err.reply()
        if not text.strip():
            self.stats.add(requests=1, scored=1, blank=1)
            return Reply(200, self._blank_body)

        key = None
        if self.cache.enabled:
            key = self.classifier.encoder.cache_key(text)
            if (cached := self.cache.get(key)) is not None:
                self.stats.add(requests=1, scored=1, cache_hits=1)
                return Reply(200, cached)
        try:
            future, joined = self.batcher.submit(text, key)
        except Overloaded as err:
            self.stats.add(requests=1, failed=1, overloaded=1)
            return overloaded("overloaded", f"the service is at capacity ({err}); try again").reply()
        lookup = {} if key is None else ({"cache_coalesced": 1} if joined else {"cache_misses": 1})
        try:
            # Shielded: the future may be shared by identical texts in flight, and a caller
            # that goes away (Serve cancels the request) must not cancel it for the others.
            score: Score = await asyncio.shield(asyncio.wrap_future(future))
        except asyncio.CancelledError:
            self.stats.add(requests=1, **lookup)
            raise
        except QueueTimeout as err:
            self.stats.add(requests=1, failed=1, overloaded=1, **lookup)
            return overloaded("queue_timeout", f"not scored: {err}").reply()
        except Exception:
            logger.exception("scoring failed")
            self.stats.add(requests=1, failed=1, **lookup)
            return ApiError(500, "model_failed", "the model failed on this request").reply()
        self.stats.add(requests=1, scored=1, **lookup)
        return Reply(200, score_body(score, self.model_id))

    def _remember(self, key: bytes, score: Score) -> None:
        self.cache.put(key, score_body(score, self.model_id))


def prometheus_text(totals: dict[str, int], model_id: str) -> str:
    """The counters of /stats as Prometheus metrics (edgescore_nlp_*)."""
    label = model_id.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    lines = ["# TYPE edgescore_nlp_info gauge", f'edgescore_nlp_info{{model="{label}"}} 1']
    for key in STATS_KEYS:
        lines += [f"# TYPE edgescore_nlp_{key}_total counter", f"edgescore_nlp_{key}_total {totals.get(key, 0)}"]
    for key in (*GAUGE_KEYS, "replicas_reporting"):
        if key in totals:
            lines += [f"# TYPE edgescore_nlp_{key} gauge", f"edgescore_nlp_{key} {totals[key]}"]
    return "\n".join(lines) + "\n"
