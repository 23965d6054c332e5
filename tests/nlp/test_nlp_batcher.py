"""The batcher without Ray or HTTP: continuous batching, admission limits, shared runs, lanes."""

from __future__ import annotations

import threading
import time

import pytest

from nlp.batcher import Overloaded, QueueTimeout, TextBatcher
from nlp.service_stats import ServiceStats

BENIGN = (
    "We met at the library after school and worked through the chemistry worksheet. "
    "Then we walked to the bus stop and planned the weekend trip to the mountains. "
)


class GatedClassifier:
    """The real classifier, except that each model run waits until the test opens the gate."""

    def __init__(self, real) -> None:
        self.real, self.encoder, self.config = real, real.encoder, real.config
        self.gate, self.running = threading.Event(), threading.Event()
        self.batches: list[list[int]] = []  # token counts of each batch the model ran
        self.fail = False

    def prepare(self, texts):
        return self.real.prepare(texts)

    def score_prepared(self, prepared, on_text=None):
        self.batches.append(prepared.token_counts)
        self.running.set()
        assert self.gate.wait(30), "the test never opened the gate"
        if self.fail:
            raise RuntimeError("the model failed")
        return self.real.score_prepared(prepared, on_text)


def make_batcher(classifier, **limits) -> tuple[TextBatcher, ServiceStats]:
    stats = ServiceStats()
    settings = dict(max_batch_size=16, batch_wait_timeout_s=0.0, max_queued_texts=64,
                    max_queued_long_texts=4, queue_timeout_s=5.0)
    return TextBatcher(classifier, stats, **(settings | limits)), stats


@pytest.fixture
def gated(classifier):
    model = GatedClassifier(classifier)
    yield model
    model.gate.set()


def test_texts_queued_while_the_model_runs_form_the_next_batch(classifier, gated):
    batcher, stats = make_batcher(gated)
    first, _ = batcher.submit("the first message")
    assert gated.running.wait(10)
    texts = [f"message number {i} of the queue" for i in range(5)]
    futures = [batcher.submit(text)[0] for text in texts]
    gated.gate.set()
    first.result(10)
    scores = [future.result(10) for future in futures]
    assert len(gated.batches) == 2 and len(gated.batches[1]) == 5  # all five in one run
    for text, score in zip(texts, scores):
        (alone,) = classifier.score_batch([text])
        assert score.label == alone.label and abs(score.score - alone.score) <= 1e-5
    assert stats.snapshot()["batches"] == 2 and stats.snapshot()["model_texts"] == 6
    batcher.close()


def test_a_full_queue_refuses_at_once(gated):
    batcher, _ = make_batcher(gated, max_queued_texts=3)
    batcher.submit("running now")
    assert gated.running.wait(10)
    queued = [batcher.submit(f"queued {i}")[0] for i in range(3)]
    # Refused without waiting for room: the gate that frees it stays shut until after.
    with pytest.raises(Overloaded):
        batcher.submit("one too many")
    gated.gate.set()
    assert all(future.result(10).label for future in queued)
    batcher.submit("room again")[0].result(10)  # the queue drained: admitted
    batcher.close()


def test_admission_follows_the_rate_the_model_has_been_going(gated):
    """Past queue_timeout_s of queued work at the measured rate, refuse: on a slow machine the
    queue admits fewer texts than on a fast one, and none waits past the caller's patience."""
    batcher, _ = make_batcher(gated, queue_timeout_s=1.0)
    first, _ = batcher.submit("measured slowly")
    assert gated.running.wait(10)
    time.sleep(0.2)  # this batch runs at < 5 texts/s
    gated.gate.set()
    first.result(10)
    gated.gate.clear()
    gated.running.clear()
    batcher.submit("running now")
    assert gated.running.wait(10)
    admitted = []
    with pytest.raises(Overloaded, match="ms of work"):
        for i in range(64):
            admitted.append(batcher.submit(f"queued {i}")[0])
    assert 1 <= len(admitted) <= 5, len(admitted)  # ~1 s of work at < 5 texts/s
    gated.gate.set()
    assert all(future.result(10) for future in admitted)
    batcher.close()


def test_a_text_that_waited_past_the_queue_timeout_is_refused_not_run(gated):
    batcher, _ = make_batcher(gated, queue_timeout_s=0.2)
    running, _ = batcher.submit("running now")
    assert gated.running.wait(10)
    late, _ = batcher.submit("waits too long")
    time.sleep(0.3)
    gated.gate.set()
    running.result(10)
    with pytest.raises(QueueTimeout):
        late.result(10)
    assert len(gated.batches) == 1, "the late text must not reach the model"
    batcher.close()


def test_identical_texts_in_flight_share_one_run(gated):
    batcher, stats = make_batcher(gated)
    batcher.submit("running now")
    assert gated.running.wait(10)
    first, joined_first = batcher.submit("free robux here", key=b"k" * 16)
    second, joined_second = batcher.submit("FREE ROBUX here", key=b"k" * 16)
    assert (joined_first, joined_second) == (False, True) and second is first
    gated.gate.set()
    assert second.result(10).label == first.result(10).label
    assert stats.snapshot()["model_texts"] == 2  # "running now" and one of the two
    # Once answered, the key is free again: a new submit runs (a cache would answer first).
    again, joined = batcher.submit("free robux here", key=b"k" * 16)
    assert not joined and again.result(10).label
    batcher.close()


def test_failed_runs_fail_their_texts_and_are_counted(gated):
    batcher, _ = make_batcher(gated)
    gated.fail = True
    gated.gate.set()
    future, _ = batcher.submit("anything")
    with pytest.raises(RuntimeError, match="the model failed"):
        future.result(10)
    assert batcher.failed_runs == 1
    batcher.close()


def test_a_long_text_does_not_hold_up_short_ones(classifier):
    batcher, stats = make_batcher(classifier)
    long_future, _ = batcher.submit(BENIGN * 40)  # ~2,000 tokens: the long lane
    time.sleep(0.05)
    short = [batcher.submit(text)[0] for text in ("gg", "see you tomorrow", "nice one")]
    for future in short:
        future.result(30)
    assert not long_future.done(), "short texts waited for the long one"
    assert long_future.result(120).windows > 10
    # A text under the character bound but over one window moves lanes after tokenising.
    over_one_window = " ".join(["word"] * 200)
    assert batcher.submit(over_one_window)[0].result(60).windows >= 2
    counts = stats.snapshot()
    assert counts["long_texts"] == 2 and counts["model_texts"] == 5
    batcher.close()
