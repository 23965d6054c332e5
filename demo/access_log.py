"""What the demo reads from the filter's outputs in Envoy's JSON access log (envoy.yaml's
`json_format`): the `edgescore` field (decision and scores), `edgescore_reasons`, and the
client's address."""

from __future__ import annotations


def parse_state(s: str | None) -> tuple[str, dict[str, str]]:
    """The access log's `edgescore` field (filter state `wasm.edgescore`, the native module's
    `edgescore`): the decision, a space, the scores (`tag;model=abuse@v1 bot=0.0312;abuse=0.7700`)."""
    decision, _, scores = (s or "").partition(" ")
    return decision or "-", parse_scores(scores)


def parse_scores(s: str | None) -> dict[str, str]:
    """Scores by model name: registry models are named with their version (`bot@3=0.0312`),
    shadow challengers (`bot@4~shadow=...`) are left out."""
    out = {}
    for part in (s or "").split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            if "~" not in k:
                out[k.split("@", 1)[0]] = v
    return out


def parse_reasons(s: str | None) -> dict[str, list[tuple[str, float]]]:
    """The `edgescore_reasons` field (`bot:tls_ja4=+3.120,header_order=-0.410;scanner:…`): per
    model, its features and credits, largest first."""
    out: dict[str, list[tuple[str, float]]] = {}
    for part in (s or "").split(";"):
        model, sep, credits = part.partition(":")
        if sep:
            out[model] = [(f, float(c)) for f, _, c in (item.partition("=") for item in credits.split(",")) if c]
    return out


def client_address(line: dict) -> str:
    """The downstream address of a line's `client` field (`127.0.3.2:41395`), without its port."""
    return (line.get("client") or "").rsplit(":", 1)[0]
