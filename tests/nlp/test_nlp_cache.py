"""The verdict cache, alone and in front of the model (ScoringService without Ray)."""

from __future__ import annotations

import asyncio
import json

import pytest

from nlp.config import ServiceConfig
from nlp.scoring_service import ScoringService
from nlp.verdict_cache import VerdictCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_least_recently_used_entries_go_first():
    cache = VerdictCache(max_entries=2, ttl_s=60)
    cache.put(b"a", b"1")
    cache.put(b"b", b"2")
    assert cache.get(b"a") == b"1"  # a is now the most recent
    cache.put(b"c", b"3")
    assert cache.get(b"b") is None and cache.get(b"a") == b"1" and cache.get(b"c") == b"3"
    assert len(cache) == 2


def test_entries_expire_after_the_ttl():
    clock = Clock()
    cache = VerdictCache(max_entries=10, ttl_s=5, clock=clock)
    cache.put(b"a", b"1")
    clock.now = 5.0
    assert cache.get(b"a") == b"1"
    clock.now = 5.1
    assert cache.get(b"a") is None and len(cache) == 0


def test_a_cache_of_size_zero_keeps_nothing():
    cache = VerdictCache(max_entries=0, ttl_s=5)
    cache.put(b"a", b"1")
    assert not cache.enabled and cache.get(b"a") is None


async def _chunks(body: bytes):
    yield body


def post(service: ScoringService, text: str) -> tuple[int, dict]:
    body = json.dumps({"text": text}).encode()
    reply = asyncio.run(service.handle("POST", "/score", str(len(body)), _chunks(body)))
    return reply.status, json.loads(reply.body)


@pytest.fixture(scope="module")
def service():
    svc = ScoringService(ServiceConfig.from_mapping({"cache": {"max_entries": 100, "ttl_s": 60}}))
    yield svc
    svc.close()


def test_a_repeat_is_answered_from_the_cache(service):
    before = service.stats.snapshot()
    status, first = post(service, "FREE ROBUX go to robux-gift dot xyz")
    assert status == 200
    for repeat in ("FREE ROBUX go to robux-gift dot xyz", "free robux   go to ROBUX-gift dot xyz"):
        assert post(service, repeat) == (200, first)
    after = service.stats.snapshot()
    assert after["cache_misses"] - before["cache_misses"] == 1
    assert after["cache_hits"] - before["cache_hits"] == 2
    assert after["model_texts"] - before["model_texts"] == 1
    assert after["requests"] - before["requests"] == 3 and after["scored"] - before["scored"] == 3


def test_a_different_text_is_scored(service):
    before = service.stats.snapshot()
    post(service, "see you at practice tomorrow")
    post(service, "see you at practice on friday")
    after = service.stats.snapshot()
    assert after["cache_misses"] - before["cache_misses"] == 2
    assert after["model_texts"] - before["model_texts"] == 2


def test_without_the_cache_every_repeat_runs_the_model():
    svc = ScoringService(ServiceConfig.from_mapping({"cache": {"max_entries": 0}}))
    try:
        for _ in range(3):
            assert post(svc, "same text again")[0] == 200
        counts = svc.stats.snapshot()
        assert counts["model_texts"] == 3 and counts["cache_hits"] == counts["cache_misses"] == 0
    finally:
        svc.close()


def test_a_caller_that_goes_away_does_not_cancel_the_run_it_shares(service):
    """Two requests for one text share one run; cancelling the first (a client that hung up,
    Serve cancelling its request) leaves the second its answer, and the lane keeps running."""
    from tests.nlp.test_nlp_batcher import GatedClassifier, make_batcher

    gated = GatedClassifier(service.classifier)
    own_batcher = service.batcher
    service.batcher, _ = make_batcher(gated)
    body = json.dumps({"text": "a message both callers send"}).encode()

    async def scenario():
        first = asyncio.create_task(service.handle("POST", "/score", str(len(body)), _chunks(body)))
        second = asyncio.create_task(service.handle("POST", "/score", str(len(body)), _chunks(body)))
        while not gated.running.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the second has joined the first's run
        first.cancel()
        gated.gate.set()
        return await second, first

    try:
        reply, first = asyncio.run(scenario())
        assert first.cancelled() and reply.status == 200
        assert post(service, "the lane still runs")[0] == 200
    finally:
        gated.gate.set()
        service.batcher.close()
        service.batcher = own_batcher
