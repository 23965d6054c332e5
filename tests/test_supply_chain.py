"""What edgescore installs and ships: the Python locks against the lists they are compiled from
(`make lock`), the Rust crates' licences (`make licenses`), and the LICENSE file."""

from __future__ import annotations

import hashlib
import re
import shutil
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness import licenses
from harness.require import missing

ROOT = Path(__file__).resolve().parent.parent
LOCKS = [("requirements.in", "requirements.txt"), ("requirements-nodeps.in", "requirements-nodeps.txt")]


class Locked(NamedTuple):
    requirement: Requirement
    hashes: list[str]
    via: list[str]  # uv's annotations: "-r requirements.in", the packages that need it


def read_lock(path: Path) -> dict[str, Locked]:
    """A lock as uv (or pip-compile) writes it: one requirement and its `--hash`es per entry,
    continued with `\\`, then its `# via` annotations."""
    entries: dict[str, Locked] = {}
    current = None
    for line in path.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("#"):
            if current is not None:
                current.via.append(line.lstrip("#").strip().removeprefix("via").strip())
        elif line:
            requirement, *hashes = re.split(r"\s+--hash=", line)
            current = Locked(Requirement(requirement), [h.strip() for h in hashes], [])
            entries[canonicalize_name(current.requirement.name)] = current
    return entries


def read_list(path: Path) -> dict[str, Requirement]:
    requirements = [Requirement(line.split("#")[0]) for line in path.read_text().splitlines()
                    if line.split("#")[0].strip()]
    return {canonicalize_name(r.name): r for r in requirements}


def pinned_version(requirement: Requirement) -> str | None:
    """X of `name==X`; None for anything looser."""
    specs = list(requirement.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
        return specs[0].version
    return None


def disagreements(listed_path: Path, lock_path: Path) -> list[str]:
    """Every way the lock is not the compiled list: a listed package missing, pinned to
    another version or listed without `==`; a locked one not pinned, without a hash, or
    locked as listed when the list no longer has it."""
    listed, locked = read_list(listed_path), read_lock(lock_path)
    found = []
    for name, requirement in listed.items():
        version = pinned_version(requirement)
        if version is None:
            found.append(f"{listed_path.name}: {requirement} is not pinned with ==")
        elif name not in locked:
            found.append(f"{lock_path.name} lacks {requirement}")
        elif pinned_version(locked[name].requirement) != version:
            found.append(f"{lock_path.name} has {locked[name].requirement}, {listed_path.name} {requirement}")
    for name, entry in locked.items():
        if pinned_version(entry.requirement) is None:
            found.append(f"{lock_path.name}: {entry.requirement} is not pinned with ==")
        if not entry.hashes or not all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in entry.hashes):
            found.append(f"{lock_path.name}: {entry.requirement} has no sha256 hash")
        if f"-r {listed_path.name}" in entry.via and name not in listed:
            found.append(f"{lock_path.name} has {entry.requirement} from {listed_path.name}, which no longer lists it")
    return found


@pytest.mark.parametrize("listed, lock", LOCKS)
def test_each_lock_is_its_list_compiled(listed, lock):
    found = disagreements(ROOT / listed, ROOT / lock)
    assert not found, "run make lock:\n" + "\n".join(found)


def test_the_no_deps_lock_holds_only_what_its_list_names():
    """Installed with --no-deps: anything else in it would be installed unchecked by a resolver."""
    assert set(read_lock(ROOT / "requirements-nodeps.txt")) == set(read_list(ROOT / "requirements-nodeps.in"))


def test_a_lock_that_drifted_from_its_list_is_caught(tmp_path):
    lock = (ROOT / "requirements.txt").read_text()
    listed = (ROOT / "requirements.in").read_text()
    numpy = re.search(r"^numpy==(\S+)", listed, re.M).group(1)
    cases = {
        "lacks catboost": (listed, re.sub(r"^catboost==.*?(?=^\S)", "", lock, flags=re.M | re.S)),
        f"has numpy=={numpy}, requirements.in numpy==0.0.1": (listed.replace(f"numpy=={numpy}", "numpy==0.0.1"), lock),
        "lightgbm==4.7.0 has no sha256 hash": (listed, re.sub(r"(^lightgbm==\S+)[^#]*", r"\1\n    ", lock, flags=re.M)),
        "from requirements.in, which no longer lists it": (listed.replace("tqdm==", "# tqdm=="), lock),
    }
    for expected, (listed_text, lock_text) in cases.items():
        (tmp_path / "requirements.in").write_text(listed_text)
        (tmp_path / "requirements.txt").write_text(lock_text)
        found = disagreements(tmp_path / "requirements.in", tmp_path / "requirements.txt")
        assert any(expected in line for line in found), (expected, found)


@pytest.mark.parametrize("expression, ok", [
    ("MIT OR Apache-2.0", True),
    ("MIT/Apache-2.0", True),
    ("Apache-2.0 WITH LLVM-exception", True),
    ("(MIT OR Apache-2.0) AND Unicode-3.0", True),
    ("GPL-3.0-only OR MIT", True),
    ("GPL-3.0-only", False),
    ("MIT AND GPL-2.0-only", False),
    ("(GPL-2.0-only OR LGPL-2.1-only) AND MIT", False),
    ("MIT WITH Classpath-exception-2.0", False),
    ("MIT OR", False),
    ("(MIT", False),
    (None, False),
])
def test_licence_expressions_against_the_allow_list(expression, ok):
    assert licenses.allowed(expression) is ok


def test_the_licence_list_is_current_and_every_licence_allowed():
    if shutil.which("cargo") is None:
        missing("cargo is not on PATH")
    text, refused = licenses.render()
    assert not refused, "licences outside the allow-list (docs/licenses.md, 'Not allowed'): " + ", ".join(
        f"{c.name} {c.version} ({c.license})" for c in refused)
    assert licenses.OUT.read_text(encoding="utf-8") == text, "docs/licenses.md is stale: run make licenses"


# SHA-256 of the Apache License 2.0 as apache.org publishes it (with its appendix), every run of
# white space made one space: the copies crates and wheels ship differ only in white space.
APACHE_2_TEXT = "0ffddef9e48f8a09aed5caf2d44f7ba1c1be2d9b8e0a6f693b1635b2d5566645"


def test_the_license_file_is_the_apache_2_text_cargo_declares():
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())
    assert cargo["workspace"]["package"]["license"] == "Apache-2.0"
    words = " ".join((ROOT / "LICENSE").read_text().split())
    assert hashlib.sha256(words.encode()).hexdigest() == APACHE_2_TEXT
