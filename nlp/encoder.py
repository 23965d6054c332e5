"""Tokenizer + ONNX Runtime session: texts in, one output row per model window out.

For an encoder model a row is the window's sentence embedding (token embeddings mean-pooled
over the attention mask, then L2-normalised, as sentence-transformers does); for a
sequence-classification model it is the window's logits.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from nlp.config import ConfigError, ModelConfig
from nlp.model_files import encoder_file, tokenizer_file
from nlp.windows import plan_runs, sentences, windows_for

_TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class ModelLoadError(RuntimeError):
    """The model, tokenizer or head could not be loaded or do not fit together."""


class TokenizedTexts(NamedTuple):
    windows: list[list[int]]
    owners: list[int]  # the text index of each window
    token_counts: list[int]  # content tokens of each whole text (no special tokens)


class OnnxEncoder:
    def __init__(self, config: ModelConfig) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.config = config
        # Both checked against their SHA-256 before they are read (nlp/model_files.py).
        self.onnx_path: Path = encoder_file(config)
        self.tokenizer_path: Path = tokenizer_file(config)

        self._tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
        # tokenizer.json files often carry fixed padding/truncation (128 for MiniLM's);
        # windows and per-run padding are decided here instead.
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self._prefix, self._suffix = _special_tokens_around(self._tokenizer)
        body = config.window_tokens - len(self._prefix) - len(self._suffix)
        if not 0 <= config.window_overlap < body:
            raise ConfigError(
                f"model.window_overlap ({config.window_overlap}) must be below the "
                f"{body} content tokens of a {config.window_tokens}-token window"
            )
        self._pad_id = self._tokenizer.token_to_id("[PAD]") or 0
        # Added tokens ([CLS], [MASK], ...) are matched in the raw text before the normaliser
        # runs, so two texts that normalise alike can still tokenise apart if one spells one.
        self._added_token_texts = tuple(
            token.content.lower() for token in self._tokenizer.get_added_tokens_decoder().values()
        )

        options = ort.SessionOptions()
        options.intra_op_num_threads = config.intra_op_threads
        options.inter_op_num_threads = config.inter_op_threads
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle pool threads must not spin on cores that other replicas (or builds) use.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            str(self.onnx_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name: i for i in self._session.get_inputs()}
        unknown = set(self._inputs) - set(_TOKEN_INPUTS)
        if "input_ids" not in self._inputs or unknown:
            raise ModelLoadError(
                f"{self.onnx_path}: inputs {sorted(self._inputs)}; supported are "
                f"{_TOKEN_INPUTS} with input_ids required"
            )
        self._output = _pick_output(self._session, config.kind)

    def windows(self, texts: Sequence[str]) -> tuple[list[list[int]], list[int]]:
        """Every text's model windows, and for each window the index of its text."""
        tokenized = self.tokenize(texts)
        return tokenized.windows, tokenized.owners

    def tokenize(self, texts: Sequence[str]) -> TokenizedTexts:
        """Windows of every text, from one batch call of the tokenizer.

        A text gets overlapping windows over its whole token sequence (one window when it
        fits) and, when it has more than one sentence, windows over each sentence on its
        own. A text with no tokens gets none.
        """
        pieces: list[str] = []
        piece_owner: list[int] = []
        whole_text_piece: list[int] = []
        for text_index, text in enumerate(texts):
            whole_text_piece.append(len(pieces))
            pieces.append(text)
            piece_owner.append(text_index)
            text_sentences = sentences(text)
            if len(text_sentences) > 1:
                pieces.extend(text_sentences)
                piece_owner.extend([text_index] * len(text_sentences))

        windows: list[list[int]] = []
        owners: list[int] = []
        encodings = self._tokenizer.encode_batch(pieces, add_special_tokens=False)
        for text_index, encoding in zip(piece_owner, encodings):
            if not encoding.ids:
                continue
            for window in windows_for(
                encoding.ids,
                self.config.window_tokens,
                self.config.window_overlap,
                self._prefix,
                self._suffix,
            ):
                windows.append(window)
                owners.append(text_index)
        token_counts = [len(encodings[piece].ids) for piece in whole_text_piece]
        return TokenizedTexts(windows, owners, token_counts)

    def cache_key(self, text: str) -> bytes:
        """A digest that two texts share only if the model sees the same windows for both.

        Windows are a function of each piece's pre-tokens (the whole text and, when it has
        several, each sentence: sentences are split on the raw text), and those are what
        the tokenizer's own normaliser and pre-tokenizer make of the piece. So the key hashes
        those: for the default uncased tokenizer, case, accents and runs of spaces do not
        make a new key; a line break, which starts a new sentence, does.
        """
        pieces = [text]
        text_sentences = sentences(text)
        if len(text_sentences) > 1:
            pieces.extend(text_sentences)
        lowered = text.lower()
        if not any(token in lowered for token in self._added_token_texts):
            pieces = [self._pre_tokens(piece) for piece in pieces]
        joined = "\x1e".join(pieces).encode("utf-8", "surrogatepass")
        return hashlib.blake2b(joined, digest_size=16).digest()

    def _pre_tokens(self, piece: str) -> str:
        normalizer, pre_tokenizer = self._tokenizer.normalizer, self._tokenizer.pre_tokenizer
        if normalizer is not None:
            piece = normalizer.normalize_str(piece)
        if pre_tokenizer is not None:
            piece = "\x1f".join(token for token, _ in pre_tokenizer.pre_tokenize_str(piece))
        return piece

    @property
    def window_body_tokens(self) -> int:
        return self.config.window_tokens - len(self._prefix) - len(self._suffix)

    def run(self, windows: list[list[int]]) -> np.ndarray:
        """One output row per window, computed in padding-bounded groups."""
        out: np.ndarray | None = None
        for run, values in self.run_groups(windows):
            if out is None:
                out = np.empty((len(windows), values.shape[1]), dtype=np.float32)
            out[run] = values
        if out is None:
            raise ValueError("run() needs at least one window")
        return out

    def run_groups(self, windows: list[list[int]]) -> Iterator[tuple[list[int], np.ndarray]]:
        """(window indices, their output rows) per ONNX Runtime run, shortest windows first.

        Runs are length buckets: each is padded only to its own longest window, and a
        caller can answer the texts of a short bucket before the long ones have run.
        """
        runs = plan_runs(
            [len(w) for w in windows], self.config.max_rows_per_run, self.config.max_padding_ratio
        )
        for run in runs:
            yield run, self._run_once([windows[i] for i in run])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text: its first whole-text window (training the head on messages)."""
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        windows = []
        for text, encoding in zip(texts, encodings):
            if not encoding.ids:
                raise ValueError(f"embed() got a text without tokens: {text!r}")
            windows.append(
                windows_for(
                    encoding.ids,
                    self.config.window_tokens,
                    self.config.window_overlap,
                    self._prefix,
                    self._suffix,
                )[0]
            )
        return self.run(windows)

    def _run_once(self, windows: list[list[int]]) -> np.ndarray:
        longest = max(len(w) for w in windows)
        ids = np.full((len(windows), longest), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(windows), longest), dtype=np.int64)
        for row, window in enumerate(windows):
            ids[row, : len(window)] = window
            mask[row, : len(window)] = 1
        columns = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        feed = {
            name: columns[name].astype(np.int32) if spec.type == "tensor(int32)" else columns[name]
            for name, spec in self._inputs.items()
        }
        (values,) = self._session.run([self._output], feed)
        if self.config.kind == "classifier":
            if values.ndim != 2:
                raise ModelLoadError(f"{self.onnx_path}: logits of shape {values.shape}")
            return values.astype(np.float32)
        if values.ndim == 3:
            weights = mask[:, :, None].astype(np.float32)
            values = (values * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(values, axis=1, keepdims=True)
        return (values / np.clip(norms, 1e-12, None)).astype(np.float32)


def _special_tokens_around(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer's post-processor puts before and after a single text."""
    probe = "window probe"
    content = tokenizer.encode(probe, add_special_tokens=False).ids
    full = tokenizer.encode(probe, add_special_tokens=True).ids
    for start in range(len(full) - len(content) + 1):
        if full[start : start + len(content)] == content:
            return full[:start], full[start + len(content) :]
    raise ModelLoadError("cannot tell the tokenizer's special tokens apart from the text")


def _pick_output(session, kind: str) -> str:
    outputs = {o.name: o for o in session.get_outputs()}
    preferred = (
        ("last_hidden_state", "token_embeddings", "sentence_embedding")
        if kind == "encoder"
        else ("logits",)
    )
    for name in preferred:
        if name in outputs:
            return name
    first = session.get_outputs()[0]
    expected_ranks = (2, 3) if kind == "encoder" else (2,)
    if len(first.shape) not in expected_ranks:
        raise ModelLoadError(
            f"no output named {preferred} and output {first.name!r} has rank {len(first.shape)}"
        )
    return first.name
