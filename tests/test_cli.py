"""The CLI's error contract: bad input gives one clear line on stderr and exit 1 — never a
panic, a backtrace or a partial artifact; a usage error (the command line itself) gives clap's
error and usage and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.require import missing

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("EDGESCORE_BIN", REPO / "target" / "release" / "edgescore"))
FIXTURE = REPO / "tests" / "models" / "xgb_binary"

if not BIN.is_file():
    missing(f"edgescore binary not found at {BIN}", module=True)


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RUST_BACKTRACE="1")
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, env=env, timeout=60)


def assert_clean_error(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("edgescore: error: "), lines[0]
    assert needle in lines[0], lines[0]
    assert "panicked" not in p.stderr and "backtrace" not in p.stderr.lower()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["compile", "model.json"], "the following required arguments were not provided"),
        (["compile", "model.json", "-o", "x.esm", "--bogus"], "unexpected argument '--bogus'"),
        (["compile", "model.json", "-o", "x.esm", "--format", "sklearn"], "[possible values: auto, xgboost"),
        (["inspect", "m.esm", "--json", "--html", "r.html"], "cannot be used with"),
        (["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        ([], "Usage: edgescore <COMMAND>"),
    ],
)
def test_usage_errors_exit_2(args, needle, tmp_path):
    """clap's convention: its error with the usage (or the accepted values), exit 2; nothing
    is read or written."""
    p = subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert needle in p.stderr and ("Usage: edgescore" in p.stderr or "possible values" in p.stderr), p.stderr
    assert p.stdout == "" and "panicked" not in p.stderr and "edgescore: error:" not in p.stderr
    assert list(tmp_path.iterdir()) == []


def test_help_and_version_exit_0():
    for args in (["--help"], ["compile", "--help"], ["--version"]):
        p = run(*args)
        assert p.returncode == 0 and p.stdout and not p.stderr, (args, p.stderr)


def test_missing_model(tmp_path):
    assert_clean_error(run("compile", str(tmp_path / "nope.json"), "-o", str(tmp_path / "x.esm")), "cannot read")


def test_garbage_model(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(os.urandom(4096))
    out = tmp_path / "x.esm"
    assert_clean_error(run("compile", str(bad), "-o", str(out)), "cannot tell the model format")
    assert not out.exists()


def test_truncated_json_model(tmp_path):
    text = (FIXTURE / "model.json").read_text()
    bad = tmp_path / "cut.json"
    bad.write_text(text[: len(text) // 2])
    assert_clean_error(run("compile", str(bad), "-o", str(tmp_path / "x.esm"), "--format", "xgboost"), "malformed XGBoost model")


def test_linear_booster_is_refused_by_name(tmp_path):
    for file in ("model.json", "model.ubj"):
        model = REPO / "tests" / "models" / "xgb_gblinear_refuse" / file
        assert_clean_error(run("compile", str(model), "-o", str(tmp_path / "x.esm")), "booster `gblinear` (a linear model")


def test_wrong_format_flag(tmp_path):
    assert_clean_error(
        run("compile", str(FIXTURE / "model.json"), "-o", str(tmp_path / "x.esm"), "--format", "lightgbm"),
        "lightgbm",
    )


def test_compile_replaces_the_output_whole_and_writes_through_links(tmp_path):
    """The artifact is written beside the output and renamed over it once valid: a refused
    compile leaves the previous artifact, no partial file is left, and a symbolic link (or
    /dev/null) is written through, not replaced."""
    esm = tmp_path / "m.esm"
    assert run("compile", str(FIXTURE / "model.json"), "-o", str(esm)).returncode == 0
    before = esm.read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert_clean_error(run("compile", str(bad), "-o", str(esm), "--format", "xgboost"), "malformed XGBoost model")
    assert esm.read_bytes() == before
    unwritable = tmp_path / "missing-dir" / "m.esm"
    assert_clean_error(run("compile", str(FIXTURE / "model.json"), "-o", str(unwritable)), "cannot write")
    link = tmp_path / "current.esm"
    link.symlink_to("m.esm")
    esm.unlink()
    assert run("compile", str(FIXTURE / "model.json"), "-o", str(link)).returncode == 0
    assert link.is_symlink() and esm.read_bytes() == before
    assert run("compile", str(FIXTURE / "model.json"), "-o", os.devnull).returncode == 0
    assert Path(os.devnull).is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "current.esm", "m.esm"]


def version(artifact: Path) -> int:
    """An artifact's format version (its header's)."""
    return int.from_bytes(artifact.read_bytes()[8:12], "little")


def test_max_format_for_a_fleet_not_yet_upgraded(tmp_path):
    """`--max-format` writes what older filters read: the fixture has node values (format 6) by
    default, not with `--max-format 5`; its missing-goes-yes tests use NaN-low columns (format
    4) there and plain NaN tests with `--max-format 3`, scoring the same; a model that needs a
    newer format than asked for is refused in one line; timings go to stderr."""
    version = lambda p: int.from_bytes(p.read_bytes()[8:12], "little")  # noqa: E731
    new, old = tmp_path / "new.esm", tmp_path / "old.esm"
    p = run("compile", str(FIXTURE / "model.json"), "-o", str(new), "--timings")
    assert p.returncode == 0 and "validated at" in p.stderr, p.stderr
    assert run("compile", str(FIXTURE / "model.json"), "-o", str(old), "--max-format", "3").returncode == 0
    five = tmp_path / "five.esm"
    assert run("compile", str(FIXTURE / "model.json"), "-o", str(five), "--max-format", "5").returncode == 0
    assert (version(new), version(five), version(old)) == (6, 4, 1)
    rows = FIXTURE / "rows.csv"
    assert run("score", str(new), "--csv", str(rows)).stdout == run("score", str(old), "--csv", str(rows)).stdout
    assert run("score", str(five), "--csv", str(rows)).stdout == run("score", str(old), "--csv", str(rows)).stdout
    assert_clean_error(run("compile", str(FIXTURE / "model.json"), "-o", str(old), "--max-format", "8"), "this build writes 1 to 7")
    cat = REPO / "tests" / "models" / "catboost_binary" / "model.json"
    assert_clean_error(run("compile", str(cat), "-o", str(old), "--max-format", "2"), "oblivious trees need format 3")


def test_compile_with_a_drift_reference(tmp_path):
    """`--reference` stores the rows' bins (format 6, the only format-6 section here: the node
    values are left out) and changes no score; a reference the model cannot read, or a fleet on
    format 5, is a clean error."""
    rows, plain, drift = FIXTURE / "rows.csv", tmp_path / "plain.esm", tmp_path / "drift.esm"
    assert run("compile", str(FIXTURE / "model.json"), "-o", str(plain), "--no-node-values").returncode == 0
    p = run("compile", str(FIXTURE / "model.json"), "-o", str(drift), "--no-node-values", "--reference", str(rows), "--reference-bins", "4")
    assert p.returncode == 0, p.stderr
    assert version(drift) == 6 and version(plain) < 6
    assert run("score", str(drift), "--csv", str(rows)).stdout == run("score", str(plain), "--csv", str(rows)).stdout
    report = json.loads(run("inspect", "--json", str(drift)).stdout)["drift_reference"]
    assert len(report["features"]) == json.loads(run("inspect", "--json", str(plain)).stdout)["n_features"]
    for series in report["features"] + report["outputs"]:
        assert len(series["edges"]) <= 3 and len(series["shares"]) == len(series["edges"]) + 2
        assert abs(sum(series["shares"]) - 1) < 1e-3
    assert "drift reference" in run("inspect", str(drift)).stdout
    assert json.loads(run("inspect", "--json", str(plain)).stdout)["drift_reference"] is None
    assert_clean_error(run("compile", str(FIXTURE / "model.json"), "-o", str(drift), "--reference", str(rows), "--max-format", "5"),
                       "needs format 6")
    assert_clean_error(run("compile", str(FIXTURE / "model.json"), "-o", str(drift), "--reference", str(rows), "--reference-bins", "0"),
                       "--reference-bins 0")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert_clean_error(run("compile", str(FIXTURE / "model.json"), "-o", str(drift), "--reference", str(bad)), "no column for feature")


def test_compile_with_a_ua_fingerprint_table(tmp_path):
    """`--ua-fingerprints` stores the table `tls_ua_consistent` reads (format 7), which `inspect`
    shows and `features` reads from the artifact; a model that reads the feature without a table,
    a malformed or oversized table, or a fleet on format 6 is a clean error."""
    names = ["header_count", "path_length", "path_depth", "query_length", "query_param_count", "cookie_count", "tls_ja4_ciphers",
             "tls_ua_consistent"]
    schema, esm, model = tmp_path / "schema.json", tmp_path / "m.esm", str(FIXTURE / "model.json")
    schema.write_text(json.dumps({"features": [{"name": n} for n in names]}))
    table = REPO / "models" / "example" / "ua_fingerprints.json"
    p = run("compile", model, "-o", str(esm), "--schema", str(schema), "--ua-fingerprints", str(table))
    assert p.returncode == 0, p.stderr
    assert version(esm) == 7
    report = json.loads(run("inspect", "--json", str(esm)).stdout)["ua_fingerprints"]
    assert report["chrome"] == ["t13d1516h2_8daaf6152771_*"], report
    assert "UA fingerprints" in run("inspect", str(esm)).stdout
    plain = tmp_path / "plain.esm"
    assert run("compile", model, "-o", str(plain)).returncode == 0
    assert json.loads(run("inspect", "--json", str(plain)).stdout)["ua_fingerprints"] is None
    # The filter's features for a request over TLS, from the artifact's own table.
    requests, out = tmp_path / "req.jsonl", tmp_path / "features.csv"
    chrome_ua = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/143.0.0.0 Safari/537.36"
    lines = [{"headers": [[":path", "/"], ["user-agent", ua], ["x-edgescore-ja4", "t13d1516h2_8daaf6152771_d8a2da3f94cd"]],
              "properties": {"connection.tls_version": tls}} for ua, tls in ((chrome_ua, "TLSv1.3"), ("curl/8.5.0", "TLSv1.3"), (chrome_ua, ""))]
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    p = run("features", "--schema", str(esm), "--hash-key", "0123456789abcdef", "--requests", str(requests), "-o", str(out))
    assert p.returncode == 0, p.stderr
    header, *rows = out.read_text().splitlines()
    assert header.split(",")[-1] == "tls_ua_consistent"
    assert [r.split(",")[-1] for r in rows] == ["1", "0", ""]

    assert_clean_error(run("compile", model, "-o", str(esm), "--schema", str(schema)), "needs a UA fingerprint table: compile with --ua-fingerprints")
    assert_clean_error(run("compile", model, "-o", str(esm), "--schema", str(schema), "--ua-fingerprints", str(table), "--max-format", "6"),
                       "need format 7")
    bad = tmp_path / "bad.json"
    for text, needle in [
        ('{"families": {"chromium": ["t13d*"]}}', "unknown user-agent family `chromium` (ua_family names: "),
        ('{"families": {"chrome": ["t13d1516h2"]}}', "`t13d1516h2` is neither a JA4"),
        ('{"families": {"chrome": ["t13d*"]}, "extra": 1}', "unknown field `extra`"),
        ("[", "is not a UA fingerprint table"),
    ]:
        bad.write_text(text)
        assert_clean_error(run("compile", model, "-o", str(esm), "--schema", str(schema), "--ua-fingerprints", str(bad)), needle)
    bad.write_text(" " * (1 << 20) + "{}")
    assert_clean_error(run("compile", model, "-o", str(esm), "--ua-fingerprints", str(bad)), "more than a UA fingerprint table may be")


def test_corrupted_artifact_is_refused(tmp_path):
    esm = tmp_path / "m.esm"
    assert run("compile", str(FIXTURE / "model.json"), "-o", str(esm)).returncode == 0
    data = bytearray(esm.read_bytes())
    data[len(data) // 2] ^= 0x10
    esm.write_bytes(bytes(data))
    assert_clean_error(run("inspect", str(esm)), "checksum mismatch")
    assert_clean_error(run("score", str(esm), "--csv", str(FIXTURE / "rows.csv")), "checksum mismatch")


def test_truncated_artifact_is_refused(tmp_path):
    esm = tmp_path / "m.esm"
    assert run("compile", str(FIXTURE / "model.json"), "-o", str(esm)).returncode == 0
    esm.write_bytes(esm.read_bytes()[:100])
    assert_clean_error(run("inspect", str(esm), "--json"), "truncated")


def test_csv_missing_column_and_bad_cell(tmp_path):
    esm = tmp_path / "m.esm"
    assert run("compile", str(FIXTURE / "model.json"), "-o", str(esm)).returncode == 0
    header, *rows = (FIXTURE / "rows.csv").read_text().splitlines()
    cols = header.split(",")
    missing = tmp_path / "missing.csv"
    missing.write_text(",".join(cols[1:] + ["zzz"]) + "\n" + ",".join(["1"] * len(cols)) + "\n")
    assert_clean_error(run("score", str(esm), "--csv", str(missing)), "no column for feature")
    bad = tmp_path / "bad.csv"
    bad.write_text(header + "\n" + ",".join(["abc"] + ["1"] * (len(cols) - 1)) + "\n")
    assert_clean_error(run("score", str(esm), "--csv", str(bad)), "is not a number")


def test_inspect_json_describes_the_model(tmp_path):
    import json

    esm = tmp_path / "m.esm"
    p = run("compile", str(FIXTURE / "model.json"), "-o", str(esm), "--name", "bot", "--version", "2026-11-22")
    assert p.returncode == 0 and p.stdout.count("\n") == 1, p.stdout
    report = json.loads(run("inspect", str(esm), "--json").stdout)
    assert report["name"] == "bot" and report["version"] == "2026-11-22"
    assert report["source"] == "XGBoost" and report["trees"] > 0
    assert sum(report["depth_histogram"]) == report["trees"]
    assert report["size_bytes"] == esm.stat().st_size
    assert report["leaves"] < report["nodes"]
