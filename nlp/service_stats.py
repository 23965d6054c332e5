"""The service's counters: kept in each replica, summed over replicas on a read of /stats.

A request touches only its replica's in-process counters (a lock and a few additions). Each
replica sends its cumulative counts to one deployment-scoped Ray actor, the StatsBoard, at
most every `serving.stats_push_interval_s` and only when they changed; a read of /stats
sends the answering replica's counts first and then sums the board. So with one replica a
read after a response always includes it, and with several, the other replicas' counts are
at most one push interval old. A replica's counts stay on the board after it is gone
(counts are since the deploy); its gauges drop out once it stops reporting.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import ray

logger = logging.getLogger("ray.serve")

STATS_ACTOR_NAME = "stats_board"

# requests: POST /score requests the service received, whatever the outcome
# scored: answered 200; rejected: answered 4xx; failed: answered 5xx, of which
#   overloaded: 503s of admission (a full queue, or a text that waited past queue_timeout_s)
# blank: scored without the model (nothing left to score)
# model_texts: texts the model ran; long_texts: of those, texts scored on the long lane
# windows: model windows run; batches: short-lane model batches
# cache_hits: answered from the verdict cache; cache_coalesced: answered by the run of an
#   identical text already in flight; cache_misses: looked up, not found, so queued
STATS_KEYS = (
    "requests", "scored", "rejected", "failed", "overloaded", "blank", "model_texts",
    "long_texts", "windows", "batches", "cache_hits", "cache_coalesced", "cache_misses",
)
# Current values, summed over the replicas that reported recently.
GAUGE_KEYS = ("queued_texts", "cache_entries")
GAUGE_FRESH_S = 10.0


class ServiceStats:
    """One replica's counters; thread-safe (the HTTP loops and the model lanes update them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(STATS_KEYS, 0)
        self._gauges = dict.fromkeys(GAUGE_KEYS, 0)
        self.version = 0  # bumped on every change: the pusher sends only when it moved

    def add(self, **counts: int) -> None:
        with self._lock:
            for key, value in counts.items():
                self._counts[key] += value
            self.version += 1

    def set_gauge(self, key: str, value: int) -> None:
        with self._lock:
            self._gauges[key] = value
            self.version += 1

    def count_model_batch(self, prepared, long: bool) -> None:
        with_tokens = prepared.texts_with_tokens
        self.add(
            blank=prepared.n_texts - with_tokens,
            model_texts=with_tokens,
            long_texts=with_tokens if long else 0,
            windows=len(prepared.windows),
            batches=0 if long else 1,
        )

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {**self._counts, **self._gauges}


@ray.remote(num_cpus=0, max_concurrency=1)
class StatsBoard:
    """The latest cumulative snapshot of every replica that reported (deployment-scoped)."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[float, dict[str, int]]] = {}

    def report(self, replica: str, snapshot: dict[str, int]) -> None:
        self._latest[replica] = (time.monotonic(), snapshot)

    def total(self, replica: str | None = None, snapshot: dict[str, int] | None = None) -> dict[str, int]:
        if replica is not None and snapshot is not None:
            self.report(replica, snapshot)
        now = time.monotonic()
        total = dict.fromkeys(STATS_KEYS + GAUGE_KEYS, 0)
        for reported_at, counts in self._latest.values():
            for key in STATS_KEYS:
                total[key] += counts.get(key, 0)
            if now - reported_at < GAUGE_FRESH_S:
                for key in GAUGE_KEYS:
                    total[key] += counts.get(key, 0)
        total["replicas_reporting"] = sum(1 for at, _ in self._latest.values() if now - at < GAUGE_FRESH_S)
        return total


class StatsPusher:
    """Sends a replica's snapshot to the board when it changed, from a thread of its own."""

    def __init__(self, stats: ServiceStats, replica: str, resolve_board: Callable[[], Any], interval_s: float):
        self._stats, self._replica, self._resolve = stats, replica, resolve_board
        self._interval_s = interval_s
        self._board = resolve_board()
        self._sent_version = -1
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="stats-pusher", daemon=True).start()

    async def total(self) -> dict[str, int]:
        """The sum over replicas, this replica's counts included as of now."""
        try:
            return await self._board.total.remote(self._replica, self._stats.snapshot())
        except ray.exceptions.RayActorError:
            # Serve recreates a dead deployment actor, but a cached handle keeps pointing
            # at the dead one: resolve the name again and ask once more.
            self._board = self._resolve()
            return await self._board.total.remote(self._replica, self._stats.snapshot())

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            version = self._stats.version
            if version == self._sent_version:
                continue
            try:
                ray.get(self._board.report.remote(self._replica, self._stats.snapshot()), timeout=30)
                self._sent_version = version
            except ray.exceptions.RayActorError:
                try:
                    self._board = self._resolve()
                except ValueError:  # not recreated yet: next interval
                    pass
            except Exception:  # a slow board: try again next interval
                logger.warning("could not report this replica's counters", exc_info=True)
