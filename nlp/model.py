"""The text classifier: encoder (tokenizer + ONNX Runtime) and head. No Ray, no HTTP.

`TextClassifier.score_batch(texts)` scores a batch (the service uses `prepare` and
`score_prepared`, the same two steps, so that it can count and route before the model runs):
- blank texts (nothing the tokenizer keeps) are answered `ok` without running the model;
- every other text becomes one window, or several overlapping ones when it is longer than
  `window_tokens`; a text's result is that of its most abusive window;
- all windows of the batch are tokenised in one call and run in length buckets, each ONNX
  Runtime run padded only to its own longest window (never to a fixed 128 or 512), shortest
  first; a text's result is final as soon as the buckets holding its windows have run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from nlp.config import ConfigError, ModelConfig
from nlp.encoder import ModelLoadError, OnnxEncoder
from nlp.head import HeadFormatError, SoftmaxHead, softmax
from nlp.model_files import DEFAULT_ENCODER_NAME, ModelFileMismatch, ModelFileMissing, head_file, sha256_of

__all__ = ["ModelLoadError", "PreparedBatch", "Score", "TextClassifier"]


@dataclass(frozen=True)
class Score:
    score: float  # 1 - P(ok): the abuse probability
    label: str  # the most probable label
    labels: dict[str, float]  # every label's probability
    windows: int  # model windows the text took; 0 when answered without the model


@dataclass(frozen=True)
class PreparedBatch:
    n_texts: int
    windows: list[list[int]]
    owners: list[int]  # the text index of each window
    token_counts: list[int]  # content tokens of each whole text

    @property
    def texts_with_tokens(self) -> int:
        return len(set(self.owners))

    def without(self, dropped: set[int]) -> "PreparedBatch":
        """The batch less the texts at `dropped`, re-indexed in order."""
        new_index, kept = {}, 0
        for index in range(self.n_texts):
            if index not in dropped:
                new_index[index] = kept
                kept += 1
        pairs = [(w, new_index[o]) for w, o in zip(self.windows, self.owners) if o not in dropped]
        return PreparedBatch(
            n_texts=kept,
            windows=[w for w, _ in pairs],
            owners=[o for _, o in pairs],
            token_counts=[c for i, c in enumerate(self.token_counts) if i not in dropped],
        )


class TextClassifier:
    def __init__(self, config: ModelConfig | None = None) -> None:
        self.config = config = config or ModelConfig()
        try:
            self.encoder = OnnxEncoder(config)
            if config.kind == "encoder":
                self.head: SoftmaxHead | None = SoftmaxHead.load(head_file(config))
                self.labels = self.head.labels
                default_name = (
                    f"{DEFAULT_ENCODER_NAME}+chat-head" if not config.onnx_path else self.encoder.onnx_path.stem
                )
                default_version = self.head.digest[:12]
            else:
                self.head = None
                self.labels = config.labels or _labels_beside(self.encoder.onnx_path)
                default_name = self.encoder.onnx_path.stem
                default_version = sha256_of(self.encoder.onnx_path)[:12]
            if config.ok_label not in self.labels:
                raise ConfigError(
                    f"model.ok_label {config.ok_label!r} is not one of the labels {self.labels}"
                )
            self._ok_index = self.labels.index(config.ok_label)
            self.model_id = f"{config.name or default_name}@{config.version or default_version}"
            # One real run now: a head that does not fit the encoder, or an ONNX file that
            # loads but cannot run, fails here with its cause rather than on every request.
            self.score_batch(["model load check"])
        except (ConfigError, ModelLoadError, ModelFileMissing, ModelFileMismatch, HeadFormatError):
            raise
        except Exception as err:  # ORT, tokenizers and numpy raise their own types
            raise ModelLoadError(f"loading the NLP model failed: {err}") from err

    def score_batch(self, texts: Sequence[str]) -> list[Score]:
        """One Score per text, in order; a text's result does not depend on its batch."""
        return self.score_prepared(self.prepare(texts))

    def prepare(self, texts: Sequence[str]) -> "PreparedBatch":
        """Tokenise and window (cheap); the service counts and routes before the model runs."""
        tokenized = self.encoder.tokenize(texts)
        return PreparedBatch(
            n_texts=len(texts),
            windows=tokenized.windows,
            owners=tokenized.owners,
            token_counts=tokenized.token_counts,
        )

    def score_prepared(
        self, batch: "PreparedBatch", on_text: Callable[[int, Score], None] | None = None
    ) -> list[Score]:
        """One Score per text, in order; `on_text(index, score)` as soon as each is final.

        Blank texts are final at once; the others after the last length bucket holding one
        of their windows, so the short texts of a mixed batch are answered first.
        """
        results: list[Score | None] = [None] * batch.n_texts
        windows_left = [0] * batch.n_texts
        for owner in batch.owners:
            windows_left[owner] += 1
        for index in range(batch.n_texts):
            if windows_left[index] == 0:
                results[index] = self._blank_score()
                if on_text is not None:
                    on_text(index, results[index])
        if batch.windows:
            best: dict[int, tuple[float, np.ndarray]] = {}  # text -> (abuse, probabilities)
            window_counts = {index: n for index, n in enumerate(windows_left) if n}
            for run, outputs in self.encoder.run_groups(batch.windows):
                probabilities = self._head_probabilities(outputs)
                abuse = 1.0 - probabilities[:, self._ok_index]
                for row, window in enumerate(run):
                    owner = batch.owners[window]
                    if owner not in best or abuse[row] > best[owner][0]:
                        best[owner] = (float(abuse[row]), probabilities[row])
                    windows_left[owner] -= 1
                    if windows_left[owner] == 0:
                        results[owner] = self._score(*best[owner], window_counts[owner])
                        if on_text is not None:
                            on_text(owner, results[owner])
        return results  # type: ignore[return-value]  # every slot is filled above

    def _score(self, abuse: float, probabilities: np.ndarray, windows: int) -> Score:
        return Score(
            score=abuse,
            label=self.labels[int(np.argmax(probabilities))],
            labels={label: float(p) for label, p in zip(self.labels, probabilities)},
            windows=windows,
        )

    def _head_probabilities(self, outputs: np.ndarray) -> np.ndarray:
        if self.head is not None:
            if outputs.shape[1] != self.head.dim:
                raise ModelLoadError(
                    f"the head expects {self.head.dim}-dimensional embeddings, the encoder "
                    f"gives {outputs.shape[1]}: retrain it with python -m nlp.train_head"
                )
            return self.head.probabilities(outputs)
        if outputs.shape[1] != len(self.labels):
            raise ModelLoadError(f"{outputs.shape[1]} logits for {len(self.labels)} labels")
        return softmax(outputs)

    def _blank_score(self) -> Score:
        labels = {label: 0.0 for label in self.labels}
        labels[self.config.ok_label] = 1.0
        return Score(score=0.0, label=self.config.ok_label, labels=labels, windows=0)


def _labels_beside(onnx_path: Path) -> tuple[str, ...]:
    """Labels from a HuggingFace config.json (id2label) beside a classifier's ONNX file."""
    config_path = onnx_path.with_name("config.json")
    if not config_path.is_file():
        raise ConfigError(f"model.labels is not set and there is no config.json beside {onnx_path}")
    id2label = json.loads(config_path.read_text()).get("id2label") or {}
    try:
        return tuple(id2label[key] for key in sorted(id2label, key=int))
    except ValueError as err:
        raise ConfigError(f"{config_path}: id2label keys are not integers") from err

