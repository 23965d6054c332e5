"""The shape matrix's report: ratios per cell and row set (Markdown), the heat map (PNG), and
the README's results section.

ratio = edgescore ns/row ÷ the peer's ns/row on the same cell and row set (< 1: edgescore is
faster). "vs compiled" is against the faster of lleaves and tl2cgen (the compiled peers), with
the lowest and highest ratio of a single round beside the median. "wasm ÷ native" and "V8 ÷
native" are the evaluator's own ns/row in wasmtime and in V8 over its native ns/row."""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from .cells import Cell
from .rows import ROW_SETS

COMPILED = ("tl2cgen", "lleaves")
RATIO_PEERS = ("tl2cgen", "lleaves", "lightgbm-capi", "xgboost-capi", "onnxruntime")
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


def shape(cell: Cell) -> str:
    d = cell.data
    parts = [f"{d.features} f"]
    if d.categories:
        parts[0] += f" ({len(d.categories)} cat)"
    if d.classes > 2:
        parts.append(f"{d.classes} cl")
    p = cell.params
    if "max_depth" in p or "depth" in p:
        parts.append(f"depth {p.get('max_depth', p.get('depth'))}")
    elif cell.library == "lightgbm":
        parts.append(f"{p.get('num_leaves', 31)} leaves")
    if p.get("zero_as_missing"):
        parts.append("0=missing")
    return ", ".join(parts)


def ns(entry: dict | None) -> float | None:
    return entry.get("ns_per_row") if entry and entry.get("status") == "ok" else None


def ratios(per_peer: dict) -> dict:
    """edgescore ÷ each peer, ÷ the faster compiled peer, and wasm ÷ native, for one row set."""
    es = ns(per_peer.get("edgescore"))
    out: dict = {}
    for peer in RATIO_PEERS:
        p = ns(per_peer.get(peer))
        out[peer] = es / p if es and p else None
    compiled = [(ns(per_peer.get(k)), k) for k in COMPILED if ns(per_peer.get(k))]
    if es and compiled:
        best, which = min(compiled)
        out["compiled"], out["compiled_peer"] = es / best, which
        out["compiled_range"] = round_range(per_peer["edgescore"], per_peer[which])
    else:
        out["compiled"], out["compiled_peer"], out["compiled_range"] = None, None, None
    w = per_peer.get("wasm")
    out["wasm_native"] = w.get("ratio") if w and w.get("status") == "ok" else None
    v8 = ns(per_peer.get("v8"))
    out["v8_native"] = v8 / es if v8 and es else None
    return out


def round_range(ours: dict, peer: dict) -> tuple[float, float] | None:
    """The lowest and highest ratio of one interleaved round (each round times both peers
    back to back), or None with fewer than two rounds."""
    pairs = list(zip(ours.get("runs_ns") or [], peer.get("runs_ns") or []))
    if len(pairs) < 2:
        return None
    per_round = [a / b for a, b in pairs]
    return min(per_round), max(per_round)


def summary(cells: list[Cell], results: dict) -> str:
    """How many cell/row-set pairs are at or under 1.0 of the faster compiled peer, and their median."""
    every = [ratios(results[c.name][rs]) for c in cells for rs in ROW_SETS]
    vs = sorted(r["compiled"] for r in every if r["compiled"])
    if not vs:
        return "No cell has a compiled peer to compare with."
    text = (f"{sum(v <= 1.0 for v in vs)} of {len(vs)} cell/row-set pairs at or under 1.0 of the faster "
            f"compiled peer, median {statistics.median(vs):.2f}, range {vs[0]:.2f}–{vs[-1]:.2f}")
    for key, engine in (("wasm_native", "wasm"), ("v8_native", "V8")):
        within = sorted(r[key] for r in every if r[key])
        if within:
            text += (f"; {engine} ÷ native {within[0]:.2f}–{within[-1]:.2f}, "
                     f"{sum(v <= 1.3 for v in within)} of {len(within)} within 1.3")
    return text + "."


def _r(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def markdown(cells: list[Cell], results: dict) -> list[str]:
    lines = [("| cell | library | trees | shape | rows | edgescore ns/row | ÷ compiled (which) | ÷ tl2cgen "
              "| ÷ lleaves | ÷ LGBM C API | ÷ XGB C API | ÷ ORT (Python) | wasm ÷ native | V8 ÷ native |"),
             "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for cell in cells:
        for rs in ROW_SETS:
            per = results[cell.name][rs]
            r = ratios(per)
            es = ns(per.get("edgescore"))
            rr = r["compiled_range"]
            spread = f", rounds {rr[0]:.2f}–{rr[1]:.2f}" if rr else ""
            comp = f"**{_r(r['compiled'])}** ({r['compiled_peer']}{spread})" if r["compiled"] else "–"
            lines.append(f"| {cell.name} | {cell.library} | {cell.total_trees:,} | {shape(cell)} | {rs} | "
                         f"{'–' if es is None else f'{es:,.0f}'} | {comp} | "
                         + " | ".join(_r(r[p]) for p in RATIO_PEERS) + f" | {_r(r['wasm_native'])} | {_r(r['v8_native'])} |")
    return lines


def notes(cells: list[Cell], results: dict) -> list[str]:
    """Peers not reported for a cell, and why (not applicable, disagreeing, failed)."""
    out = []
    for cell in cells:
        for peer, why in sorted({(p, e.get("reason", "")) for rs in ROW_SETS
                                 for p, e in results[cell.name][rs].items() if e.get("status") != "ok"}):
            out.append(f"- {cell.name}, {peer}: {why}")
    return out


def heatmap(cells: list[Cell], results: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm

    grid = np.full((len(cells), len(ROW_SETS)), np.nan)
    for i, cell in enumerate(cells):
        for j, rs in enumerate(ROW_SETS):
            v = ratios(results[cell.name][rs])["compiled"]
            grid[i, j] = v if v else np.nan
    finite = grid[np.isfinite(grid)]
    lim = 2.0 ** max(1, math.ceil(float(np.max(np.abs(np.log2(finite)))))) if finite.size else 2.0
    fig, ax = plt.subplots(figsize=(6.5, 0.32 * len(cells) + 1.6))
    cmap = matplotlib.colormaps["RdYlGn_r"].copy()
    cmap.set_bad("#dddddd")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=LogNorm(vmin=1 / lim, vmax=lim), aspect="auto")
    ax.set_xticks(range(len(ROW_SETS)), ROW_SETS)
    ax.set_xlabel("edgescore ns/row ÷ the faster of lleaves and tl2cgen", fontsize=8)
    ax.set_yticks(range(len(cells)), [f"{c.name} ({c.total_trees:,})" for c in cells], fontsize=8)
    for i in range(len(cells)):
        for j in range(len(ROW_SETS)):
            txt = "n/a" if math.isnan(grid[i, j]) else f"{grid[i, j]:.2f}"
            ax.text(j, i, txt, ha="center", va="center", fontsize=7)
    bar = fig.colorbar(im, ax=ax, label="< 1: edgescore faster")
    ticks = [2.0 ** k for k in range(-int(math.log2(lim)), int(math.log2(lim)) + 1)]
    bar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
    bar.minorticks_off()
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_readme(readme: Path, section: str) -> None:
    text = readme.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{readme} has no {BEGIN} ... {END} markers")
    readme.write_text(pattern.sub(lambda _: f"{BEGIN}\n{section.strip()}\n{END}", text))
