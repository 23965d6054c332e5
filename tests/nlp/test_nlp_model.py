"""The classifier without Ray: default model offline, batching invariance, chunking, heads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nlp.config import ConfigError, ModelConfig, ServiceConfig
from nlp.head import HeadFormatError, SoftmaxHead
from nlp.model import TextClassifier
from nlp import model_files
from nlp.model_files import (
    DEFAULT_ENCODER,
    DEFAULT_HEAD,
    DEFAULT_TOKENIZER,
    HEAD_PATH,
    ModelFileMismatch,
    default_tokenizer_path,
    package_file,
    recorded_digests,
    record_digest,
    sha256_of,
)

REPO = Path(__file__).resolve().parents[2]
BENIGN_PARAGRAPH = (
    "We met at the library after school and worked through the chemistry worksheet together. "
    "Then we walked to the bus stop, talked about the weekend trip to the mountains, and "
    "planned what snacks to bring. "
)
MIXED_TEXTS = [
    "hey whats up",
    "you're such a worthless idiot",
    "i know where you live and im coming for you",
    "FREE ROBUX!!! go to robux-gift.xyz and enter your password",
    "send nudes",
    "",
    "   \n\t ",
    "can u help me w my math hw its due tmrw",
    BENIGN_PARAGRAPH * 5 + "I will find you and hurt you.",
    "ok",
    "The meeting notes are in the shared folder. See you all on Monday!",
]


def test_default_model_loads_offline_without_network():
    """In a fresh process with the hub env vars set and every non-loopback connect refused."""
    probe = (
        "import socket\n"
        "real_connect = socket.socket.connect\n"
        "def refuse(self, address):\n"
        "    raise OSError(f'network access attempted: {address}')\n"
        "socket.socket.connect = refuse\n"
        "socket.create_connection = lambda *a, **k: refuse(None, a)\n"
        "from nlp.model import TextClassifier\n"
        "c = TextClassifier()\n"
        "print(c.model_id, c.score_batch(['hello there'])[0].label)\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO),
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    model_id, label = done.stdout.split()
    assert model_id.startswith("all-MiniLM-L6-v2-int8+chat-head@")
    assert label == "ok"


def test_batched_scores_equal_unbatched(classifier):
    batched = classifier.score_batch(MIXED_TEXTS)
    for text, together in zip(MIXED_TEXTS, batched):
        (alone,) = classifier.score_batch([text])
        assert together.label == alone.label
        assert abs(together.score - alone.score) <= 1e-5
        for label in classifier.labels:
            assert abs(together.labels[label] - alone.labels[label]) <= 1e-5


def test_scores_are_probabilities(classifier):
    for score in classifier.score_batch(MIXED_TEXTS):
        assert set(score.labels) == {"toxic", "threat", "sexual", "spam", "ok"}
        assert abs(sum(score.labels.values()) - 1.0) < 1e-4
        assert abs(score.score - (1.0 - score.labels["ok"])) < 1e-6
        assert score.label == max(score.labels, key=score.labels.get)


def test_obvious_messages_get_their_labels(classifier):
    results = classifier.score_batch(MIXED_TEXTS[:5])
    assert [r.label for r in results] == ["ok", "toxic", "threat", "spam", "sexual"]
    assert results[0].score < 0.5 and all(r.score > 0.5 for r in results[1:])


def test_blank_text_is_ok_without_the_model(classifier):
    for text in ["", "   ", "\n\t", "\u200b"]:
        (score,) = classifier.score_batch([text])
        assert score.label == "ok" and score.score == 0.0 and score.windows == 0


def test_long_text_with_a_threat_at_the_end_is_flagged(classifier):
    benign = BENIGN_PARAGRAPH * 40  # ~1,700 tokens: many windows
    (clean,) = classifier.score_batch([benign])
    assert clean.label == "ok" and clean.score < 0.5
    assert clean.windows > 10
    for ending, label in [
        ("i know where you live and im going to hurt you", "threat"),
        ("you're such a worthless idiot.", "toxic"),
        ("FREE ROBUX click here robux-gift.xyz", "spam"),
    ]:
        (flagged,) = classifier.score_batch([benign + ending])
        assert flagged.score > 0.5 and flagged.label == label, (ending, flagged)
        # Sentence scoring needs a sentence break; a clause run into a long benign sentence
        # without one is diluted (nlp/README.md, limitations).
        (at_start,) = classifier.score_batch([ending.rstrip(".") + ". " + benign])
        assert at_start.score > 0.5 and at_start.label == label, (ending, at_start)


def test_short_texts_of_a_mixed_batch_are_answered_before_the_long_one(classifier):
    texts = ["hey whats up", BENIGN_PARAGRAPH * 8, "see you tomorrow", "ok"]
    order = []
    results = classifier.score_prepared(classifier.prepare(texts), on_text=lambda i, score: order.append(i))
    assert sorted(order) == [0, 1, 2, 3] and order[-1] == 1
    assert [r.label for r in results] == [r.label for r in classifier.score_batch(texts)]


def _variants(text: str) -> list[str]:
    return [text.upper(), text.title(), "  " + text.replace(" ", "   ") + " ", text.replace("e", "é")]


def test_texts_sharing_a_cache_key_get_the_same_windows(classifier):
    """The verdict cache may answer a text with another's verdict only if the model would see
    exactly the same windows: checked on every message and spelling variants of it."""
    encoder = classifier.encoder
    messages = [json.loads(line)["text"] for line in (REPO / "nlp" / "data" / "messages.jsonl").read_text().splitlines()]
    shared = 0
    for text in messages + MIXED_TEXTS:
        windows = encoder.windows([text])[0]
        for variant in _variants(text):
            if encoder.cache_key(variant) == encoder.cache_key(text):
                shared += 1
                assert encoder.windows([variant])[0] == windows, (text, variant)
    assert shared > len(messages), "case and spacing variants should share the key"


def test_cache_keys_keep_apart_what_the_model_tells_apart(classifier):
    key = classifier.encoder.cache_key
    assert key("you are great") != key("you are grate")
    # A line break starts a sentence, which is scored on its own: another key.
    assert key("nice game\nnow uninstall") != key("nice game now uninstall")
    # Special tokens are matched before normalisation: [MASK] and [mask] tokenise apart.
    assert key("[MASK] me") != key("[mask] me")


def test_padding_follows_the_batch_not_a_fixed_length(classifier):
    windows, _ = classifier.encoder.windows(["hi", "hello there friend"])
    assert max(len(w) for w in windows) == 5  # [CLS] hello there friend [SEP]
    assert all(len(w) <= classifier.config.window_tokens for w in
               classifier.encoder.windows([BENIGN_PARAGRAPH * 20])[0])


def test_head_file_is_plain_arrays():
    with np.load(HEAD_PATH, allow_pickle=False) as arrays:
        assert arrays["weights"].shape == (5, 384)
        assert arrays["weights"].dtype == np.float32
        assert list(arrays["labels"]) == ["toxic", "threat", "sexual", "spam", "ok"]
        assert all(arrays[name].dtype != object for name in arrays.files)
    head = SoftmaxHead.load(HEAD_PATH)
    assert "messages.jsonl" in head.trained_on


def test_pickled_head_is_refused(tmp_path):
    path = tmp_path / "evil.npz"
    np.savez(path, weights=np.array([{"x": 1}], dtype=object), bias=np.zeros(1), labels=np.array(["ok"]))
    with pytest.raises(HeadFormatError):
        SoftmaxHead.load(path)


def test_head_that_does_not_fit_the_encoder_fails_at_load(tmp_path):
    path = tmp_path / "small.npz"
    SoftmaxHead(np.zeros((2, 10), np.float32), np.zeros(2, np.float32), ("ok", "bad")).save(path)
    with pytest.raises(Exception, match="expects 10-dimensional embeddings"):
        TextClassifier(ModelConfig(head_path=str(path), head_sha256=sha256_of(path)))


def test_missing_model_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.onnx_path"):
        TextClassifier(ModelConfig(onnx_path=str(tmp_path / "nope.onnx"), onnx_sha256="0" * 64))


DEFAULT_FILES = {"onnx": DEFAULT_ENCODER, "tokenizer": DEFAULT_TOKENIZER, "head": DEFAULT_HEAD}


def test_recorded_digests_are_those_of_the_installed_files():
    recorded = recorded_digests()
    assert set(recorded) == {default.key for default in DEFAULT_FILES.values()}
    for default in DEFAULT_FILES.values():
        assert sha256_of(package_file(default)) == recorded[default.key], default.key


@pytest.mark.parametrize("setting", sorted(DEFAULT_FILES))
def test_a_corrupted_model_file_is_refused_naming_both_digests(tmp_path, setting):
    """A copy of the real file with one byte changed, configured with the real file's digest."""
    real = package_file(DEFAULT_FILES[setting])
    corrupted = tmp_path / real.name
    data = bytearray(real.read_bytes())
    data[len(data) // 2] ^= 0x01
    corrupted.write_bytes(bytes(data))
    expected = recorded_digests()[DEFAULT_FILES[setting].key]
    config = ModelConfig(**{f"{setting}_path": str(corrupted), f"{setting}_sha256": expected})
    with pytest.raises(ModelFileMismatch) as refused:
        TextClassifier(config)
    message = str(refused.value)
    assert str(corrupted) in message and f"model.{setting}_sha256" in message
    assert expected in message and sha256_of(corrupted) in message


def test_a_default_file_that_is_not_the_recorded_one_is_refused(tmp_path, monkeypatch):
    """The installed tokenizer against a record that says otherwise: what a swapped package
    looks like to the service."""
    digests = tmp_path / "model_files.sha256"
    wrong = "f" * 64
    digests.write_text(model_files.DIGESTS_PATH.read_text().replace(
        recorded_digests()[DEFAULT_TOKENIZER.key], wrong))
    monkeypatch.setattr(model_files, "DIGESTS_PATH", digests)
    with pytest.raises(ModelFileMismatch) as refused:
        TextClassifier()
    message = str(refused.value)
    installed = package_file(DEFAULT_TOKENIZER)
    assert str(installed) in message and DEFAULT_TOKENIZER.key in message
    assert wrong in message and sha256_of(installed) in message


def test_recording_a_digest_rewrites_that_line_only(tmp_path, monkeypatch):
    digests = tmp_path / "model_files.sha256"
    digests.write_text(model_files.DIGESTS_PATH.read_text())
    monkeypatch.setattr(model_files, "DIGESTS_PATH", digests)
    before = recorded_digests()
    record_digest(DEFAULT_HEAD, "ab" * 32)
    assert recorded_digests() == {**before, DEFAULT_HEAD.key: "ab" * 32}


def test_a_configured_model_file_needs_its_digest():
    with pytest.raises(ConfigError, match="model.onnx_path needs model.onnx_sha256"):
        ServiceConfig.from_mapping({"model": {"onnx_path": "/models/mine.onnx"}})
    with pytest.raises(ConfigError, match="model.head_sha256 goes with model.head_path"):
        ModelConfig(head_sha256="0" * 64)
    with pytest.raises(ConfigError, match="64 hex digits"):
        ModelConfig(tokenizer_path="/models/tokenizer.json", tokenizer_sha256="sha256:abc")


def test_config_rejects_unknown_and_inconsistent_settings():
    with pytest.raises(ConfigError, match="unknown model settings"):
        ServiceConfig.from_mapping({"model": {"widow_tokens": 64}})
    with pytest.raises(ConfigError, match="max_batch_size"):
        ServiceConfig.from_mapping({"serving": {"max_batch_size": 16, "max_ongoing_requests": 5}})
    with pytest.raises(ConfigError, match="unknown cache settings"):
        ServiceConfig.from_mapping({"cache": {"size": 5}})
    with pytest.raises(ConfigError, match="queue_timeout_s"):
        ServiceConfig.from_mapping({"serving": {"queue_timeout_s": 0}})
    # Serve's proxy path admits what the replica's own queue and one running batch hold.
    serving = ServiceConfig.from_mapping(None).serving
    assert serving.effective_max_ongoing_requests == serving.max_queued_texts + serving.max_batch_size


def _tiny_classifier_onnx(path: Path, vocab: int, spam_token: int) -> None:
    """A real (tiny) sequence-classification ONNX model: embedding lookup, mean, logits."""
    import onnx
    from onnx import TensorProto, helper

    table = np.zeros((vocab, 3), dtype=np.float32)
    table[:, 0] = 1.0  # every token leans "ok"...
    table[spam_token] = [0.0, 6.0, 0.0]  # ...except this one
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "input_ids"], ["embedded"]),
            helper.make_node("ReduceMean", ["embedded"], ["logits"], axes=[1], keepdims=0),
        ],
        "tiny",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor("table", TensorProto.FLOAT, table.shape, table.flatten())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_a_sequence_classification_model_plugs_in_by_config(tmp_path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(default_tokenizer_path()))
    onnx_path = tmp_path / "tiny-spam.onnx"
    _tiny_classifier_onnx(onnx_path, tokenizer.get_vocab_size(), tokenizer.token_to_id("free"))
    (tmp_path / "config.json").write_text(json.dumps({"id2label": {"0": "ok", "1": "spam", "2": "toxic"}}))
    model = TextClassifier(ModelConfig(kind="classifier", onnx_path=str(onnx_path),
                                       onnx_sha256=sha256_of(onnx_path), version="t1"))
    assert model.labels == ("ok", "spam", "toxic")
    assert model.model_id == "tiny-spam@t1"
    free, hello = model.score_batch(["free free free", "hello"])
    assert free.label == "spam" and free.score > 0.5
    assert hello.label == "ok" and hello.score < 0.5
