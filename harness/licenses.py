"""The third-party Rust crates in what edgescore ships, and their licences: docs/licenses.md.

    python -m harness.licenses           # write docs/licenses.md (make licenses)
    python -m harness.licenses --check   # exit 1 if it is stale or a licence is not allowed

Read from `cargo tree --locked` (Cargo.lock's resolution), per shipped artifact: every crate
its package builds with, normal and build dependencies, for the artifact's target.
tests/test_supply_chain.py runs the check.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "licenses.md"


class Artifact(NamedTuple):
    title: str
    package: str
    target: str


ARTIFACTS = (
    Artifact("CLI", "edgescore-compile", "x86_64-unknown-linux-gnu"),
    Artifact("Wasm filter", "edgescore-filter", "wasm32-wasip1"),
    Artifact("native module", "edgescore-native", "x86_64-unknown-linux-gnu"),
)

# Permissive licences whose code an Apache-2.0 project may ship, as source or binary, with its
# notices (the Apache Software Foundation's "category A"). Anything else needs a decision.
ALLOWED = frozenset(
    {
        "0BSD",
        "Apache-2.0",
        "Apache-2.0 WITH LLVM-exception",
        "BSD-2-Clause",
        "BSD-3-Clause",
        "BSL-1.0",
        "ISC",
        "MIT",
        "Unicode-3.0",
        "Unicode-DFS-2016",
        "Zlib",
    }
)


class Crate(NamedTuple):
    name: str
    version: str
    license: str | None


def allowed(expression: str | None) -> bool:
    """Whether an SPDX expression can be met with ALLOWED licences alone: one side of an OR
    suffices, every part of an AND is needed; `X WITH E` is allowed only as listed. Cargo's
    legacy `/` means OR. No expression, or one that does not parse, is not allowed."""
    if not expression:
        return False
    tokens = re.findall(r"\(|\)|/|[A-Za-z0-9.+-]+", expression)
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        if position >= len(tokens):
            raise ValueError("unexpected end")
        position += 1
        return tokens[position - 1]

    def any_of() -> bool:
        ok = all_of()
        while peek() in ("OR", "/"):
            take()
            ok = all_of() or ok
        return ok

    def all_of() -> bool:
        ok = one()
        while peek() == "AND":
            take()
            ok = one() and ok
        return ok

    def one() -> bool:
        token = take()
        if token == "(":
            ok = any_of()
            if take() != ")":
                raise ValueError("unbalanced parenthesis")
            return ok
        if token in ("AND", "OR", "WITH", "/", ")"):
            raise ValueError(f"{token} where a licence was expected")
        if peek() == "WITH":
            take()
            token = f"{token} WITH {take()}"
        return token in ALLOWED

    try:
        ok = any_of()
    except ValueError:
        return False
    return ok and position == len(tokens)


def crates_of(artifact: Artifact) -> set[Crate]:
    """The third-party crates `artifact.package` builds with for its target. `cargo tree -p`
    resolves features as `cargo build -p` does; `cargo metadata` would unify them over the
    workspace and list crates only the tests' features pull in."""
    tree = subprocess.run(
        ["cargo", "tree", "--quiet", "--locked", "-p", artifact.package, "--target", artifact.target,
         "--edges", "normal,build", "--prefix", "none", "--format", "{p}|{l}"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    crates = set()
    for line in tree.splitlines():
        package, _, license = line.removesuffix(" (*)").partition("|")
        name, version, *source = package.split()
        # A source of "(/...)" is a path: edgescore's own crates, under its LICENSE.
        if not any(part.startswith("(/") for part in source):
            crates.add(Crate(name, version.removeprefix("v"), license or None))
    return crates


def render() -> tuple[str, list[Crate]]:
    """docs/licenses.md's text, and the crates whose licence is not allowed."""
    used_by: dict[Crate, set[str]] = {}
    for artifact in ARTIFACTS:
        for crate in crates_of(artifact):
            used_by.setdefault(crate, set()).add(artifact.title)
    crates = sorted(used_by)
    refused = [crate for crate in crates if not allowed(crate.license)]
    titles = [artifact.title for artifact in ARTIFACTS]
    artifacts = [f"the {a.title} (`{a.package}`, {a.target})" for a in ARTIFACTS]
    intro = (
        "edgescore is licensed under the Apache License 2.0 ([LICENSE](../LICENSE)). What it "
        "ships also holds the Rust crates below: every crate that "
        + ", ".join(artifacts[:-1]) + " and " + artifacts[-1]
        + " build with (their features as `cargo build -p` resolves them), build-time crates "
        "included, at the versions of `Cargo.lock`."
    )
    check = (
        "Written by `make licenses` (`harness/licenses.py`, from `cargo tree`). "
        "`tests/test_supply_chain.py` fails when this page is stale or a licence is not "
        "allowed; allowed are " + ", ".join(f"`{name}`" for name in sorted(ALLOWED))
        + ", and an SPDX expression that these alone satisfy (`MIT OR GPL-3.0-only` is; "
        "`MIT AND GPL-3.0-only` is not)."
    )
    lines = [
        "# Third-party licences",
        "",
        _wrap(intro),
        "",
        _wrap(check),
        "",
        "## Not allowed",
        "",
    ]
    lines += [f"- **{c.name} {c.version}: `{c.license}`**" for c in refused] or ["None."]
    lines += [
        "",
        f"## Crates ({len(crates)})",
        "",
        "| crate | version | licence | " + " | ".join(titles) + " |",
        "|---|---|---|" + "---|" * len(titles),
    ]
    for crate in crates:
        marks = " | ".join("x" if title in used_by[crate] else "" for title in titles)
        lines.append(f"| {crate.name} | {crate.version} | {crate.license or '(none)'} | {marks} |")
    return "\n".join(lines) + "\n", refused


def _wrap(paragraph: str) -> str:
    return textwrap.fill(paragraph, 96, break_on_hyphens=False, break_long_words=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with docs/licenses.md instead of writing it")
    args = parser.parse_args(argv)
    text, refused = render()
    for crate in refused:
        print(f"licence not allowed: {crate.name} {crate.version}: {crate.license}", file=sys.stderr)
    if args.check:
        stale = not OUT.is_file() or OUT.read_text(encoding="utf-8") != text
        if stale:
            print(f"{OUT.relative_to(ROOT)} is stale: run make licenses", file=sys.stderr)
        return 1 if stale or refused else 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(refused)} licence(s) not allowed")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
