"""The classification head: a softmax (multinomial logistic) layer over sentence embeddings.

Stored as plain arrays in an .npz and loaded with allow_pickle=False, so a head file can
never run code. Arrays: `weights` (labels x dim, float32), `bias` (labels, float32),
`labels` (unicode strings), and `encoder` / `trained_on` (unicode scalars, provenance).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class HeadFormatError(ValueError):
    """The head file is not a head this code wrote."""


@dataclass(frozen=True)
class SoftmaxHead:
    weights: np.ndarray  # (n_labels, dim)
    bias: np.ndarray  # (n_labels,)
    labels: tuple[str, ...]
    encoder: str = ""
    trained_on: str = ""
    digest: str = ""  # sha256 of the file it was loaded from; names the model version

    @property
    def dim(self) -> int:
        return int(self.weights.shape[1])

    def probabilities(self, embeddings: np.ndarray) -> np.ndarray:
        """Row-wise softmax of `embeddings @ weights.T + bias`; embeddings is (n, dim)."""
        logits = embeddings.astype(np.float32) @ self.weights.T + self.bias
        return softmax(logits)

    def save(self, path: str | Path) -> None:
        with open(path, "wb") as out:
            np.savez(
                out,
                weights=self.weights.astype(np.float32),
                bias=self.bias.astype(np.float32),
                labels=np.array(self.labels, dtype=np.str_),
                encoder=np.array(self.encoder, dtype=np.str_),
                trained_on=np.array(self.trained_on, dtype=np.str_),
            )

    @classmethod
    def load(cls, path: str | Path) -> "SoftmaxHead":
        raw = Path(path).read_bytes()
        try:
            with np.load(path, allow_pickle=False) as arrays:
                weights = arrays["weights"].astype(np.float32)
                bias = arrays["bias"].astype(np.float32)
                labels = tuple(str(label) for label in arrays["labels"])
                encoder = str(arrays["encoder"]) if "encoder" in arrays else ""
                trained_on = str(arrays["trained_on"]) if "trained_on" in arrays else ""
        except (KeyError, ValueError, OSError) as err:
            raise HeadFormatError(f"{path}: not a softmax head file ({err})") from err
        if weights.ndim != 2 or bias.shape != (weights.shape[0],) or len(labels) != len(bias):
            raise HeadFormatError(
                f"{path}: inconsistent shapes weights{weights.shape} bias{bias.shape} "
                f"labels({len(labels)})"
            )
        if len(set(labels)) != len(labels):
            raise HeadFormatError(f"{path}: duplicate labels {labels}")
        return cls(
            weights=weights,
            bias=bias,
            labels=labels,
            encoder=encoder,
            trained_on=trained_on,
            digest=hashlib.sha256(raw).hexdigest(),
        )


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)
