"""Shared fixtures for the NLP service tests: offline, one model (the repository root is on
pytest's path: pytest.ini)."""

from __future__ import annotations

import os

import pytest

# Nothing here may reach a model hub: the model files come from installed packages.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def classifier():
    from nlp.model import TextClassifier

    return TextClassifier()
