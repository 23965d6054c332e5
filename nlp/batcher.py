"""Continuous batching of texts onto the model, with bounded queues. No Ray, no HTTP.

Two lanes, each a thread of its own (ONNX Runtime and the tokenizer release the GIL, so the
event loops that parse HTTP keep running while the model does):

- the short lane takes every queued text the moment the model is free (up to
  max_batch_size): at low load a text runs at once, under load the queue fills while the
  previous batch runs. One tokenizer call per batch; ONNX Runtime runs in length buckets,
  shortest first, and each text is answered as soon as its bucket has run. A text that turns
  out longer than one window moves to the long lane;
- the long lane scores texts longer than one window (or, unread, longer than
  `8 x window` characters), one at a time, so a 64 KiB post never holds up chat messages.

Admission: a lane refuses at once (Overloaded, a 503) when it is full, and the short lane
also when the texts already queued would take longer than queue_timeout_s at the rate the
model has been going (so under overload the caller, the filter with its 500 ms timeout, gets
its answer or its refusal in time, on a fast or a slow machine alike); a short text that
still waited longer than that is refused when its turn comes instead of run (QueueTimeout).
Identical texts in flight share one run: `submit` with a key already queued or running
returns the same future.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Callable

from nlp.model import Score, TextClassifier
from nlp.service_stats import ServiceStats


class Overloaded(Exception):
    """The lane's queue is full: answer 503 now rather than queue what cannot be served."""


class QueueTimeout(Exception):
    """The text waited in the queue longer than queue_timeout_s; it was not run."""


# Consecutive failed model runs after which the batcher reports itself unhealthy, so Serve
# replaces the replica instead of it failing every request.
FAILED_RUNS_BEFORE_UNHEALTHY = 3
# Weight of the latest batch in the short lane's texts/s estimate: a few batches follow a
# change of machine load, one odd batch does not swing admission.
RATE_SMOOTHING = 0.2


@dataclass
class _Queued:
    text: str
    key: bytes | None
    enqueued: float
    future: Future = field(default_factory=Future)


class _Lane:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: deque[_Queued] = deque()


class TextBatcher:
    def __init__(
        self,
        classifier: TextClassifier,
        stats: ServiceStats,
        *,
        max_batch_size: int,
        batch_wait_timeout_s: float,
        max_queued_texts: int,
        max_queued_long_texts: int,
        queue_timeout_s: float,
        on_scored: Callable[[bytes, Score], None] | None = None,
    ) -> None:
        self._classifier = classifier
        self._stats = stats
        self.max_batch_size = max_batch_size
        self.batch_wait_timeout_s = batch_wait_timeout_s
        self._queue_timeout_s = queue_timeout_s
        self._on_scored = on_scored  # (key, score) of every text the model ran, e.g. a cache
        self._window_body = classifier.encoder.window_body_tokens
        self._long_chars = 8 * classifier.config.window_tokens
        self._lock = threading.Condition()
        self._short = _Lane(max_queued_texts)
        self._long = _Lane(max_queued_long_texts)
        self._in_flight: dict[bytes, Future] = {}
        self._texts_per_s = 0.0  # the short lane's recent rate; 0 until its first batch
        self._closed = False
        self.failed_runs = 0
        self._threads = [
            threading.Thread(target=self._short_lane, name="short-lane", daemon=True),
            threading.Thread(target=self._long_lane, name="long-lane", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, text: str, key: bytes | None = None) -> tuple[Future, bool]:
        """(future of the text's Score, whether it joined an identical text in flight).

        Raises Overloaded when the lane is full, or when the short lane already holds more
        than queue_timeout_s of work at its recent rate.
        """
        lane = self._long if len(text) > self._long_chars else self._short
        with self._lock:
            if key is not None and (running := self._in_flight.get(key)) is not None:
                return running, True
            if len(lane.items) >= lane.limit:
                raise Overloaded(f"{len(lane.items)} texts queued")
            if lane is self._short and self._texts_per_s:
                wait_s = (len(lane.items) + 1) / self._texts_per_s
                if wait_s > self._queue_timeout_s:
                    raise Overloaded(f"{len(lane.items)} texts queued, ~{1000 * wait_s:.0f} ms of work")
            queued = _Queued(text, key, time.monotonic())
            lane.items.append(queued)
            if key is not None:
                self._in_flight[key] = queued.future
            self._stats.set_gauge("queued_texts", len(self._short.items) + len(self._long.items))
            self._lock.notify_all()
        return queued.future, False

    def set_batching(self, max_batch_size: int, batch_wait_timeout_s: float) -> None:
        with self._lock:
            self.max_batch_size, self.batch_wait_timeout_s = max_batch_size, batch_wait_timeout_s

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    # -- the lanes (their own threads) ---------------------------------------------------

    def _short_lane(self) -> None:
        while (batch := self._take_short()) is not None:
            live = self._drop_expired(batch)
            if live:
                self._run_short(live)

    def _take_short(self) -> list[_Queued] | None:
        with self._lock:
            while not self._short.items and not self._closed:
                self._lock.wait()
            if self._closed:
                return None
            if self.batch_wait_timeout_s and len(self._short.items) < self.max_batch_size:
                deadline = self._short.items[0].enqueued + self.batch_wait_timeout_s
                while len(self._short.items) < self.max_batch_size and (left := deadline - time.monotonic()) > 0:
                    self._lock.wait(left)
            take = min(self.max_batch_size, len(self._short.items))
            batch = [self._short.items.popleft() for _ in range(take)]
            self._stats.set_gauge("queued_texts", len(self._short.items) + len(self._long.items))
            return batch

    def _drop_expired(self, batch: list[_Queued]) -> list[_Queued]:
        now = time.monotonic()
        live = []
        for queued in batch:
            waited = now - queued.enqueued
            if waited > self._queue_timeout_s:
                self._finish(queued, error=QueueTimeout(f"waited {1000 * waited:.0f} ms in the queue"))
            else:
                live.append(queued)
        return live

    def _run_short(self, batch: list[_Queued]) -> None:
        try:
            prepared = self._classifier.prepare([queued.text for queued in batch])
            too_long = {i for i, count in enumerate(prepared.token_counts) if count > self._window_body}
            for i in too_long:
                self._move_to_long_lane(batch[i])
            if too_long:
                batch = [queued for i, queued in enumerate(batch) if i not in too_long]
                prepared = prepared.without(too_long)
            if not batch:
                return
            self._stats.count_model_batch(prepared, long=False)
            started = time.monotonic()
            self._classifier.score_prepared(prepared, on_text=lambda i, score: self._finish(batch[i], score))
            self._note_rate(len(batch), time.monotonic() - started)
            self.failed_runs = 0
        except Exception as err:
            self.failed_runs += 1
            for queued in batch:
                self._finish(queued, error=err)

    def _note_rate(self, texts: int, seconds: float) -> None:
        rate = texts / max(seconds, 1e-6)
        with self._lock:
            previous = self._texts_per_s
            self._texts_per_s = rate if not previous else previous + RATE_SMOOTHING * (rate - previous)

    def _move_to_long_lane(self, queued: _Queued) -> None:
        with self._lock:
            self._long.items.append(queued)  # already admitted: the long lane's bound is not applied
            self._lock.notify_all()

    def _long_lane(self) -> None:
        while True:
            with self._lock:
                while not self._long.items and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                queued = self._long.items.popleft()
                self._stats.set_gauge("queued_texts", len(self._short.items) + len(self._long.items))
            try:
                prepared = self._classifier.prepare([queued.text])
                self._stats.count_model_batch(prepared, long=True)
                (score,) = self._classifier.score_prepared(prepared)
                self.failed_runs = 0
                self._finish(queued, score)
            except Exception as err:
                self.failed_runs += 1
                self._finish(queued, error=err)

    def _finish(self, queued: _Queued, score: Score | None = None, error: Exception | None = None) -> None:
        if queued.key is not None:
            # Into the cache before leaving the in-flight map: a repeat arriving in between
            # finds one or the other, never neither.
            if score is not None and self._on_scored is not None:
                self._on_scored(queued.key, score)
            with self._lock:
                self._in_flight.pop(queued.key, None)
        try:
            if error is not None:
                queued.future.set_exception(error)
            else:
                queued.future.set_result(score)
        except InvalidStateError:  # cancelled by its caller: nobody waits for it
            pass
