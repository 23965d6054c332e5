"""The service's request counters: one Ray actor shared by every TextScorer replica.

A deployment-scoped actor (Serve creates it with the deployment, health-checks it and
deletes it with the deployment), so GET /stats is exact whichever replica answers it.
Replicas call it with a plain actor call (well under a millisecond), not a Serve handle,
and await each update before answering: a counter read after a response includes it.
"""

from __future__ import annotations

from collections import Counter

import ray

COUNTER_ACTOR_NAME = "request_counter"

# requests: POST /score requests the service received, whatever the outcome
# scored: answered 200; rejected: answered 4xx; failed: answered 5xx
# blank: scored without the model (nothing left to score); model_texts: texts that ran it
# long_texts: texts longer than one window (scored on the long lane)
# windows: model windows run; batches: batch-handler calls (one model call each)
STATS_KEYS = (
    "requests", "scored", "rejected", "failed", "blank", "model_texts", "long_texts",
    "windows", "batches",
)


@ray.remote(num_cpus=0, max_concurrency=1)
class RequestCounter:
    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()

    def add(self, counts: dict[str, int]) -> None:
        self._counts.update(counts)

    def snapshot(self) -> dict[str, int]:
        return {key: self._counts.get(key, 0) for key in STATS_KEYS}
