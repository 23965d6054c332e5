"""The bench's figures: per-round ratios against the raw model, their median and spread over
rounds, the targets of issue 16, and the Markdown that goes into the README."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

# (figure, how it is computed from one round, the target, True when the figure must be <=)
TARGETS = (
    ("throughput at saturation / raw best batch", "throughput_ratio", 0.8, False),
    ("p50 at c=1 minus raw batch-1 latency (ms)", "p50_delta_ms", 3.0, True),
    ("CPU per 1,000 texts at saturation / raw loop's at max_batch_size", "cpu_ratio", 1.3, True),
    ("spam flood throughput / no-cache", "flood_ratio", 5.0, False),
)


def best_batch(raw: dict) -> str:
    return max(raw["batch"], key=lambda size: raw["batch"][size]["texts_per_s"])


def round_figures(r: dict) -> dict[str, float]:
    """The ratios of one round: the service's doors against the raw loop of the same round.

    Throughput is compared with the raw loop's best batch size; CPU with the raw loop at the
    largest batch size (the service's max_batch_size), which is what a saturated service
    runs (its texts per batch are reported), so the ratio is the cost of serving the same
    model work rather than of a different batch size.
    """
    raw, best = r["raw"], best_batch(r["raw"])
    largest = max(raw["batch"], key=int)
    single = raw["batch"]["1"]
    figures = {
        "raw_best_texts_per_s": raw["batch"][best]["texts_per_s"],
        "raw_best_batch": float(best),
        "raw_batch1_p50_ms": single["call_p50_ms"],
        "raw_batch1_p99_ms": single["call_p99_ms"],
        "raw_full_batch_cpu_s_per_1000": raw["batch"][largest]["cpu_s_per_1000"],
        "raw_batch1_cpu_s_per_1000": single["cpu_s_per_1000"],
    }
    for door in ("fast", "serve"):
        sat, c1 = r[f"{door}_sat"], r[f"{door}_c1"]
        figures |= {
            f"{door}_sat_refused_pct": 100 * sat["refused_share"],
            f"{door}_sat_rps": sat["requests_per_s"],
            f"{door}_sat_texts_per_batch": sat["texts_per_batch"],
            f"{door}_c1_p50_ms": c1["p50_ms"],
            f"{door}_c1_p99_ms": c1["p99_ms"],
            f"{door}_sat_cpu_s_per_1000": sat["cpu_s_per_1000"],
            f"{door}_c1_cpu_s_per_1000": c1["cpu_s_per_1000"],
            f"{door}_throughput_ratio": sat["requests_per_s"] / figures["raw_best_texts_per_s"],
            f"{door}_p50_delta_ms": c1["p50_ms"] - single["call_p50_ms"],
            f"{door}_p99_delta_ms": c1["p99_ms"] - single["call_p99_ms"],
            f"{door}_cpu_ratio": sat["cpu_s_per_1000"] / figures["raw_full_batch_cpu_s_per_1000"],
            f"{door}_c1_cpu_ratio": c1["cpu_s_per_1000"] / single["cpu_s_per_1000"],
        }
    figures |= {
        "throughput_ratio": figures["fast_throughput_ratio"],
        "p50_delta_ms": figures["fast_p50_delta_ms"],
        "cpu_ratio": figures["fast_cpu_ratio"],
        "client_cpu_s_per_1000": r["fast_sat"]["client_cpu_s_per_1000"],
        "long_c1_p50_ms": r["long_c1"]["p50_ms"],
        "raw_long_p50_ms": raw["long"]["call_p50_ms"],
        "long_latency_ratio": r["long_c1"]["p50_ms"] / raw["long"]["call_p50_ms"],
        "flood_cache_rps": r["flood_cache"]["requests_per_s"],
        "flood_nocache_rps": r["flood_nocache"]["requests_per_s"],
        "flood_ratio": r["flood_cache"]["requests_per_s"] / r["flood_nocache"]["requests_per_s"],
        "flood_cache_cpu_s_per_1000": r["flood_cache"]["cpu_s_per_1000"],
        "flood_nocache_cpu_s_per_1000": r["flood_nocache"]["cpu_s_per_1000"],
    }
    return figures


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float

    def text(self, digits: int = 2) -> str:
        if self.low == self.high:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}–{self.high:.{digits}f})"


def spread(rounds: list[dict[str, float]], key: str) -> Spread:
    values = [r[key] for r in rounds]
    return Spread(statistics.median(values), min(values), max(values))


def targets_table(rounds: list[dict[str, float]]) -> list[str]:
    lines = ["| figure | target | median (min–max) over rounds | met |", "|---|---|---|---|"]
    for title, key, target, at_most in TARGETS:
        s = spread(rounds, key)
        met = s.median <= target if at_most else s.median >= target
        lines.append(f"| {title} | {'≤' if at_most else '≥'} {target:g} | {s.text()} | {'yes' if met else 'no'} |")
    return lines


def doors_table(rounds: list[dict[str, float]]) -> list[str]:
    rows: list[tuple[str, Callable[[str], str]]] = [
        ("throughput at saturation (texts/s, answered 200)", lambda d: spread(rounds, f"{d}_sat_rps").text(1)),
        ("  refused (503) at saturation, %", lambda d: spread(rounds, f"{d}_sat_refused_pct").text(1)),
        ("  / raw best batch", lambda d: spread(rounds, f"{d}_throughput_ratio").text()),
        ("  texts per model batch", lambda d: spread(rounds, f"{d}_sat_texts_per_batch").text(1)),
        ("p50 at c=1 (ms)", lambda d: spread(rounds, f"{d}_c1_p50_ms").text(1)),
        ("  minus raw batch-1 p50 (ms)", lambda d: spread(rounds, f"{d}_p50_delta_ms").text(1)),
        ("p99 at c=1 (ms)", lambda d: spread(rounds, f"{d}_c1_p99_ms").text(1)),
        ("  minus raw batch-1 p99 (ms)", lambda d: spread(rounds, f"{d}_p99_delta_ms").text(1)),
        ("service CPU s / 1,000 texts, saturation", lambda d: spread(rounds, f"{d}_sat_cpu_s_per_1000").text()),
        ("  / raw loop's at max_batch_size", lambda d: spread(rounds, f"{d}_cpu_ratio").text()),
        ("service CPU s / 1,000 texts, c=1", lambda d: spread(rounds, f"{d}_c1_cpu_s_per_1000").text()),
        ("  / raw loop's at batch 1", lambda d: spread(rounds, f"{d}_c1_cpu_ratio").text()),
    ]
    lines = ["| | replica's own listener (shipped) | Serve's HTTP proxy |", "|---|---|---|"]
    lines += [f"| {title} | {cell('fast')} | {cell('serve')} |" for title, cell in rows]
    return lines


def raw_table(raw_rounds: list[dict]) -> list[str]:
    lines = ["| raw loop | texts/s | per call p50 (ms) | per call p99 (ms) | CPU s / 1,000 texts |", "|---|---|---|---|---|"]
    for size in raw_rounds[0]["batch"]:
        rows = [r["batch"][size] for r in raw_rounds]
        cells = [spread(rows, key).text(digits) for key, digits in
                 (("texts_per_s", 1), ("call_p50_ms", 2), ("call_p99_ms", 2), ("cpu_s_per_1000", 2))]
        lines.append(f"| batch {size} | " + " | ".join(cells) + " |")
    longs = [r["long"] for r in raw_rounds]
    windows = raw_rounds[0]["long"]["windows_per_text"]
    cells = [spread(longs, key).text(digits) for key, digits in
             (("texts_per_s", 2), ("call_p50_ms", 1), ("call_p99_ms", 1), ("cpu_s_per_1000", 1))]
    lines.append(f"| long posts, one at a time (~{windows:.0f} windows each) | " + " | ".join(cells) + " |")
    return lines


def other_table(rounds: list[dict[str, float]]) -> list[str]:
    return [
        "| | median (min–max) |",
        "|---|---|",
        f"| spam flood (90 % one message), with the cache (texts/s) | {spread(rounds, 'flood_cache_rps').text(1)} |",
        f"| the same flood, cache off (texts/s) | {spread(rounds, 'flood_nocache_rps').text(1)} |",
        f"| service CPU s / 1,000 texts in the flood, cache on / off | {spread(rounds, 'flood_cache_cpu_s_per_1000').text()} / {spread(rounds, 'flood_nocache_cpu_s_per_1000').text()} |",
        f"| long post at c=1, p50 (ms) / raw one-at-a-time p50 | {spread(rounds, 'long_c1_p50_ms').text(1)} / {spread(rounds, 'raw_long_p50_ms').text(1)} |",
        f"| load generator's own CPU s / 1,000 requests (not in the service's) | {spread(rounds, 'client_cpu_s_per_1000').text(3)} |",
    ]


def layouts_table(layouts: list[dict]) -> list[str]:
    lines = ["| replicas × ORT threads | raw loops, same cores (texts/s) | service at saturation (texts/s) | ratio | refused % | p50 at c=1 (ms) | CPU s / 1,000 texts |",
             "|---|---|---|---|---|---|---|"]
    for layout in layouts:
        sat = layout["sat"]
        lines.append(
            f"| {layout['name']} | {layout['raw_texts_per_s']:.1f} | {sat['requests_per_s']:.1f} | "
            f"{sat['requests_per_s'] / layout['raw_texts_per_s']:.2f} | {100 * sat['refused_share']:.1f} | "
            f"{layout['c1']['p50_ms']:.1f} | {sat['cpu_s_per_1000']:.2f} |"
        )
    return lines


def cpu_roles_line(measurement: dict) -> str:
    roles = sorted(measurement["cpu_by_role"].items(), key=lambda item: -item[1])
    total = sum(seconds for _, seconds in roles) or 1.0
    return ", ".join(f"{role} {100 * seconds / total:.0f} %" for role, seconds in roles if seconds / total >= 0.01)
