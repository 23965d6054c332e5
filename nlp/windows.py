"""Cutting token sequences into model windows, and grouping windows into ONNX Runtime runs.

Pure functions over token ids, so the covering and padding rules are tested without a model.
"""

from __future__ import annotations

import re
from typing import Sequence

# A sentence ends at ., ! or ? (or an ellipsis) followed by whitespace, or at a line break.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?\u2026])\s+|\s*\n\s*")


def sentences(text: str) -> list[str]:
    """The text's non-blank sentences; a text without sentence breaks is one sentence.

    The head is trained on chat messages, which are a sentence or two. Mean pooling over
    a long window averages one abusive sentence away among benign ones, so multi-sentence
    texts are also scored sentence by sentence (see OnnxEncoder.windows).
    """
    return [part for part in _SENTENCE_BREAK.split(text) if part.strip()]


def window_spans(n_tokens: int, body_tokens: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) spans of at most `body_tokens` that cover `range(n_tokens)`.

    Consecutive spans share at least `overlap` tokens, so a phrase shorter than the overlap
    is always whole in some window. The last span ends at `n_tokens` and is full length, so
    no window is a short tail the model sees out of context.
    """
    if body_tokens < 1 or not 0 <= overlap < body_tokens:
        raise ValueError("need body_tokens >= 1 and 0 <= overlap < body_tokens")
    if n_tokens <= body_tokens:
        return [(0, n_tokens)]
    stride = body_tokens - overlap
    spans = []
    start = 0
    while start + body_tokens < n_tokens:
        spans.append((start, start + body_tokens))
        start += stride
    spans.append((n_tokens - body_tokens, n_tokens))
    return spans


def windows_for(
    content_ids: Sequence[int],
    window_tokens: int,
    overlap: int,
    prefix: Sequence[int],
    suffix: Sequence[int],
) -> list[list[int]]:
    """Model inputs for one text: `prefix body suffix` per span, at most window_tokens each.

    prefix/suffix are the tokenizer's special tokens ([CLS] and [SEP] for BERT), added to
    every window as the tokenizer would add them to a whole text.
    """
    body = window_tokens - len(prefix) - len(suffix)
    return [
        [*prefix, *content_ids[start:end], *suffix]
        for start, end in window_spans(len(content_ids), body, overlap)
    ]


def plan_runs(lengths: Sequence[int], max_rows: int, max_padding_ratio: float) -> list[list[int]]:
    """Group window indices into runs, each padded to its own longest window.

    Windows are taken shortest first; a run closes when it has `max_rows` rows or when
    adding the next (longest so far) window would make the padded size exceed
    `max_padding_ratio` times the real tokens. A batch of short chat messages is one run;
    a 128-token window does not make fifteen 10-token messages pay for 128 tokens each.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    runs: list[list[int]] = []
    run: list[int] = []
    real_tokens = 0
    for i in order:
        length = lengths[i]
        padded_if_added = (len(run) + 1) * length
        if run and (
            len(run) >= max_rows or padded_if_added > max_padding_ratio * (real_tokens + length)
        ):
            runs.append(run)
            run, real_tokens = [], 0
        run.append(i)
        real_tokens += length
    if run:
        runs.append(run)
    return runs
