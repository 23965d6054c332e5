"""Windows cover every token with the promised overlap; runs bound padding."""

from __future__ import annotations

import pytest

from nlp.windows import plan_runs, sentences, window_spans, windows_for


@pytest.mark.parametrize("body,overlap", [(126, 32), (10, 3), (5, 0), (2, 1)])
def test_spans_cover_every_token_with_overlap(body, overlap):
    for n in range(0, 400):
        spans = window_spans(n, body, overlap)
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(end - start <= body for start, end in spans)
        covered = set()
        for start, end in spans:
            covered.update(range(start, end))
        assert covered == set(range(n))
        for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
            assert s1 < s2 and e1 < e2
            assert e1 - s2 >= overlap  # consecutive windows share at least `overlap` tokens
        if n > body:
            assert all(end - start == body for start, end in spans)  # no short tail window


def test_short_text_is_one_window_with_special_tokens():
    assert windows_for([7, 8, 9], 128, 32, [101], [102]) == [[101, 7, 8, 9, 102]]


def test_long_text_windows_respect_the_window_size():
    ids = list(range(1000, 1300))
    windows = windows_for(ids, 16, 4, [101], [102])
    assert all(len(w) <= 16 and w[0] == 101 and w[-1] == 102 for w in windows)
    assert {t for w in windows for t in w[1:-1]} == set(ids)


def test_bad_window_settings_are_refused():
    with pytest.raises(ValueError):
        window_spans(10, 4, 4)


def test_runs_group_similar_lengths_and_bound_padding():
    lengths = [5, 6, 7, 120, 5, 8, 128, 6]
    runs = plan_runs(lengths, max_rows=64, max_padding_ratio=1.5)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    for run in runs:
        longest = max(lengths[i] for i in run)
        real = sum(lengths[i] for i in run)
        assert len(run) == 1 or len(run) * longest <= 1.5 * real
    assert len(runs) == 2  # the two long windows do not pad the six short ones


def test_runs_respect_max_rows():
    runs = plan_runs([10] * 100, max_rows=16, max_padding_ratio=1.5)
    assert [len(r) for r in runs] == [16] * 6 + [4]


def test_sentences():
    assert sentences("hi there") == ["hi there"]
    assert sentences("One. Two! Three?\nFour") == ["One.", "Two!", "Three?", "Four"]
    assert sentences("  \n ") == []
    assert sentences("v1.2 is out") == ["v1.2 is out"]
