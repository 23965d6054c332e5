"""What the Python tests that run the filter share: the build check and a recording upstream.

Every server here binds 127.0.0.1; tests stop what they start.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "demo"))
import backend as demo_backend  # noqa: E402
import render_envoy  # noqa: E402


def require_build() -> None:
    """Skip when `make build` has not run; under `make test` (EDGESCORE_REQUIRE_BUILD=1),
    which builds first, a missing artifact fails instead."""
    missing = render_envoy.missing_artifacts()
    if missing:
        msg = "not built (run `make build`): " + ", ".join(str(p.relative_to(ROOT)) for p in missing)
        if os.environ.get("EDGESCORE_REQUIRE_BUILD"):
            pytest.fail(msg)
        pytest.skip(msg)


class Upstream:
    """A recording HTTP server on 127.0.0.1 (the demo backend's handler)."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.lock = threading.Lock()
        self.server = demo_backend.make_server("127.0.0.1", 0, on_request=self._record)
        self.port = self.server.server_port
        self.thread = demo_backend.serve_in_thread(self.server)

    def _record(self, rec: dict) -> None:
        with self.lock:
            self.records.append(rec)

    def take(self) -> list[dict]:
        with self.lock:
            out, self.records = self.records, []
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
