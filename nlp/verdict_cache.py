"""A bounded, expiring map from a text's key to its answer: repeats cost no inference.

Chat spam repeats itself; a flood of one message should cost one model run. Keys come from
OnnxEncoder.cache_key (a digest of what the model would see), values are the finished
response bodies, so a hit costs a lookup and no JSON encoding. Least recently used entries
go first when full; an entry older than ttl_s is a miss (and is dropped). Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable


class VerdictCache:
    def __init__(self, max_entries: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries, self.ttl_s = max_entries, ttl_s
        self._clock = clock
        self._entries: OrderedDict[bytes, tuple[float, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def get(self, key: bytes) -> bytes | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            stored_at, value = entry
            if self._clock() - stored_at > self.ttl_s:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return value

    def put(self, key: bytes, value: bytes) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._entries[key] = (self._clock(), value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
