"""What a test needs that a checkout may lack, and the seed of a randomised test.

Outside `make test` a missing build artifact, binary or tool skips the test that needs it;
under `make test` (EDGESCORE_REQUIRE_BUILD=1), which builds and installs all of them first,
it fails the test instead, so nothing is skipped there without a failure saying why.
"""

from __future__ import annotations

import importlib
import os
import random
import sys
from pathlib import Path

import pytest

from harness import render_envoy

ROOT = Path(__file__).resolve().parent.parent


def required() -> bool:
    """True under `make test`: everything a test needs must be there."""
    return bool(os.environ.get("EDGESCORE_REQUIRE_BUILD"))


def missing(msg: str, *, module: bool = False) -> None:
    """Something the test needs is not there: a failure under `make test`, else a skip
    (`module=True` at a module's top level, to skip the whole module)."""
    if required():
        pytest.fail(f"{msg} (make test installs it)", pytrace=False)
    pytest.skip(msg, allow_module_level=module)


def module(name: str):
    """`import name`, or `missing` when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{name} is not installed ({e})")


def require_build() -> None:
    """The .wasm and the example models `make build` writes."""
    absent = render_envoy.missing_artifacts()
    if absent:
        missing("not built (run `make build`): " + ", ".join(str(p.relative_to(ROOT)) for p in absent))


def require_native() -> None:
    """What require_build checks, and the native module `make build` writes."""
    require_build()
    if not render_envoy.NATIVE.is_file():
        missing(f"not built (run `make build`): {render_envoy.NATIVE.relative_to(ROOT)}")


def test_seed(name: str = "EDGESCORE_TEST_SEED") -> int:
    """The seed of a randomised test: `$EDGESCORE_TEST_SEED` when set, else a fresh random one;
    printed (and put in the failure messages by the caller) so a failure can be replayed."""
    text = os.environ.get(name, "").strip()
    seed = int(text, 0) if text else random.SystemRandom().randrange(1, 2**31)
    print(f"{name}={seed}", file=sys.stderr)
    return seed


# pytest would collect a module-level `test_*` function imported into a test module.
test_seed.__test__ = False  # type: ignore[attr-defined]
