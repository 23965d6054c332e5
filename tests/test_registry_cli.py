"""The signed model registry from the publisher's side (docs/registry.md): `edgescore keygen`,
`publish`, `renew`, `cosign` and `verify` on a real directory — round trip, versions and
sequence, shadow and promotion, rollback by republishing, key rotation, the signed expiry and its
renewal, several signatures, and a tampered byte anywhere in the registry found by `verify`."""

from __future__ import annotations

import base64
import calendar
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from harness.registry import signed_envelope, utc
from harness.require import missing, module

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("EDGESCORE_BIN", REPO / "target" / "release" / "edgescore"))
EXAMPLE = REPO / "models" / "example"
CONTEXT = b"edgescore-manifest-v1\0"
PAYLOAD_TYPE = "application/vnd.edgescore.manifest.v1+json"

if not BIN.is_file():
    missing(f"edgescore binary not found at {BIN}", module=True)


def run(*args: str | Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, RUST_BACKTRACE="1")
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, env=env, timeout=60)


def ok(*args: str | Path) -> str:
    p = run(*args)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout


def assert_clean_error(p: subprocess.CompletedProcess, needle: str) -> None:
    """Exit 1; every stderr line is one `edgescore: error:` (or `note:`) line; no panic."""
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert lines, p.stderr
    for line in lines:
        assert line.startswith(("edgescore: error: ", "edgescore: note: ")), line
    assert "panicked" not in p.stderr and "backtrace" not in p.stderr.lower()
    assert needle in p.stderr, p.stderr


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    """Two different `bot` artifacts (same trees, different version strings) and an `abuse` one."""
    d = tmp_path_factory.mktemp("artifacts")
    out = {}
    for key, src, name, version in [
        ("a", "bot.json", "bot", "2026-11-01"),
        ("b", "bot.json", "bot", "2026-11-02"),
        ("abuse", "abuse.json", "abuse", "1"),
    ]:
        esm = d / f"{key}.esm"
        ok("compile", EXAMPLE / src, "-o", esm, "--schema", EXAMPLE / "schema.json", "--name", name, "--version", version)
        out[key] = esm
    assert out["a"].read_bytes() != out["b"].read_bytes()
    return out


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    ok("keygen", "-o", d / "team")
    ok("keygen", "-o", d / "other")
    ok("keygen", "-o", d / "third")
    return {"key": d / "team.key", "pub": d / "team.pub", "other_key": d / "other.key", "other_pub": d / "other.pub",
            "third_key": d / "third.key", "third_pub": d / "third.pub"}


def envelope(reg: Path) -> dict:
    return json.loads((reg / "manifest.json").read_text())


def manifest(reg: Path) -> dict:
    return json.loads(base64.b64decode(envelope(reg)["payload"]))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def publish(esm: Path, reg: Path, key: Path, *extra: str | Path) -> str:
    return ok("publish", esm, "--registry", reg, "--key", key, *extra)


def key_id_of(pub: Path) -> str:
    return json.loads(pub.read_text())["key_id"]


def seconds(t: str) -> int:
    """A manifest time (`YYYY-MM-DDTHH:MM:SSZ`) as seconds since the epoch."""
    return calendar.timegm(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ"))


# --- keygen ---------------------------------------------------------------------------------


def test_keygen_writes_a_secret_0600_and_a_public_key(tmp_path):
    out = ok("keygen", "-o", tmp_path / "team")
    secret, public = tmp_path / "team.key", tmp_path / "team.pub"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    s, p = json.loads(secret.read_text()), json.loads(public.read_text())
    assert s["kind"] == "edgescore-ed25519-secret" and p["kind"] == "edgescore-ed25519-public"
    raw = base64.b64decode(p["public"], validate=True)
    assert len(raw) == 32 and len(base64.b64decode(s["secret"], validate=True)) == 32
    # key_id = "ed25519:" + the first 8 bytes of SHA-256(public key), hex.
    assert p["key_id"] == s["key_id"] == "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]
    assert p["key_id"] in out and out.count("\n") == 1
    assert s["secret"] not in out
    # Refuses to overwrite either file, and leaves both as they were.
    before = secret.read_bytes()
    assert_clean_error(run("keygen", "-o", tmp_path / "team"), "already exists")
    assert secret.read_bytes() == before
    public.unlink()
    assert_clean_error(run("keygen", "-o", tmp_path / "team"), "already exists")
    assert secret.read_bytes() == before and not public.exists()


def test_two_keys_differ(keys):
    assert key_id_of(keys["pub"]) != key_id_of(keys["other_pub"])


# --- publish / verify -----------------------------------------------------------------------


def test_publish_and_verify_round_trip(tmp_path, artifacts, keys):
    reg = tmp_path / "registry"
    out = publish(artifacts["a"], reg, keys["key"])
    sha = sha256(artifacts["a"])
    assert re.fullmatch(rf"published bot v1 \(active\) sha256 {sha[:12]}… seq 1 -> {re.escape(str(reg))}/manifest\.json\n", out), out
    # Content-addressed copy, nothing else but the manifest.
    assert (reg / "artifacts" / f"{sha}.esm").read_bytes() == artifacts["a"].read_bytes()
    assert sorted(p.name for p in reg.iterdir()) == ["artifacts", "manifest.json"]
    env = envelope(reg)
    assert set(env) == {"payload_type", "payload", "signatures"}
    assert env["payload_type"] == PAYLOAD_TYPE
    assert [s["key_id"] for s in env["signatures"]] == [key_id_of(keys["pub"])]
    m = manifest(reg)
    assert m["format"] == 1 and m["sequence"] == 1 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", m["published_at"])
    # Signed, seven days after the publish by default.
    assert seconds(m["expires"]) - seconds(m["published_at"]) == 7 * 86400
    assert abs(seconds(m["published_at"]) - time.time()) < 120
    [entry] = m["models"]
    assert entry["name"] == "bot" and entry["version"] == 1 and entry["mode"] == "active"
    assert entry["artifact"] == f"artifacts/{sha}.esm" and entry["sha256"] == sha
    assert entry["size"] == artifacts["a"].stat().st_size
    assert re.fullmatch(r"[0-9a-f]{64}", entry["schema_hash"]) and "hash_key_id" not in entry
    golden = entry["golden"]
    assert 2 <= len(golden) <= 8
    assert all(len(r["x"]) == 21 and len(r["y"]) == 1 for r in golden)
    assert all(v is None for v in golden[0]["x"]), "the first golden row is all-missing"
    assert len({r["y"][0] for r in golden}) >= 3, "golden rows should take different branches"

    out = ok("verify", reg, "--pub", keys["pub"])
    assert f"signed by {key_id_of(keys['pub'])}, sequence 1, published {m['published_at']}, expires {m['expires']}, 1 model(s)" in out
    assert re.search(rf"^bot v1 \(active\): ok, sha256 {sha[:12]}…, \d+ bytes, {len(golden)} golden row\(s\)$", out, re.M), out


def test_golden_rows_are_the_cli_scores(tmp_path, artifacts, keys):
    """The y the manifest records is what `edgescore score` gives for the row's x."""
    reg = tmp_path / "registry"
    publish(artifacts["a"], reg, keys["key"])
    golden = manifest(reg)["models"][0]["golden"]
    features = [f["name"] for f in json.loads((EXAMPLE / "schema.json").read_text())["features"]]
    csv = tmp_path / "rows.csv"
    lines = [",".join(features)] + [",".join("" if v is None else repr(v) for v in r["x"]) for r in golden]
    csv.write_text("\n".join(lines) + "\n")
    scores = [float(v) for v in ok("score", artifacts["a"], "--csv", csv).split()]
    assert scores == pytest.approx([r["y"][0] for r in golden], rel=1e-6)


def test_golden_csv(tmp_path, artifacts, keys):
    features = [f["name"] for f in json.loads((EXAMPLE / "schema.json").read_text())["features"]]
    csv = tmp_path / "golden.csv"
    row1 = ["3"] * len(features)
    row2 = [""] * len(features)
    row2[0] = "12.5"
    csv.write_text(",".join(features) + "\n" + ",".join(row1) + "\n" + ",".join(row2) + "\n")
    reg = tmp_path / "registry"
    publish(artifacts["a"], reg, keys["key"], "--golden-csv", csv)
    golden = manifest(reg)["models"][0]["golden"]
    assert [r["x"] for r in golden] == [[3.0] * len(features), [12.5] + [None] * (len(features) - 1)]
    ok("verify", reg, "--pub", keys["pub"])
    too_many = tmp_path / "many.csv"
    too_many.write_text(",".join(features) + "\n" + (",".join(row1) + "\n") * 9)
    assert_clean_error(run("publish", artifacts["a"], "--registry", tmp_path / "r2", "--key", keys["key"], "--golden-csv", too_many), "golden rows must be 1 to 8")


def test_publish_twice_bumps_version_and_sequence(tmp_path, artifacts, keys):
    reg = tmp_path / "registry"
    assert " v1 (active) " in publish(artifacts["a"], reg, keys["key"])
    out = publish(artifacts["b"], reg, keys["key"])
    assert re.match(r"published bot v2 \(active\) sha256 [0-9a-f]{12}… seq 2 ", out), out
    m = manifest(reg)
    assert m["sequence"] == 2
    assert [(e["name"], e["version"], e["mode"], e["sha256"]) for e in m["models"]] == [("bot", 2, "active", sha256(artifacts["b"]))]
    # The old artifact stays for rollbacks; both are content-addressed.
    assert {p.name for p in (reg / "artifacts").iterdir()} == {f"{sha256(artifacts['a'])}.esm", f"{sha256(artifacts['b'])}.esm"}
    # Another model gets its own version line; the sequence is manifest-wide.
    assert " abuse v1 (active) " in " " + publish(artifacts["abuse"], reg, keys["key"])
    m = manifest(reg)
    assert m["sequence"] == 3 and sorted((e["name"], e["version"]) for e in m["models"]) == [("abuse", 1), ("bot", 2)]
    ok("verify", reg, "--pub", keys["pub"])


def test_shadow_promote_and_roll_back(tmp_path, artifacts, keys):
    reg = tmp_path / "registry"
    a, b = sha256(artifacts["a"]), sha256(artifacts["b"])
    entries = lambda: sorted((e["mode"], e["version"], e["sha256"]) for e in manifest(reg)["models"])  # noqa: E731
    publish(artifacts["a"], reg, keys["key"])
    assert "bot v2 (shadow)" in publish(artifacts["b"], reg, keys["key"], "--shadow")
    assert entries() == [("active", 1, a), ("shadow", 2, b)]
    out = ok("verify", reg, "--pub", keys["pub"])
    assert "bot v1 (active): ok" in out and "bot v2 (shadow): ok" in out
    # A newer shadow replaces the shadow.
    assert "bot v3 (shadow)" in publish(artifacts["b"], reg, keys["key"], "--shadow")
    assert entries() == [("active", 1, a), ("shadow", 3, b)]
    # Promote: publish the shadow's artifact as active; the shadow entry goes.
    assert "bot v4 (active)" in publish(artifacts["b"], reg, keys["key"])
    assert entries() == [("active", 4, b)]
    # Roll back: publish the old artifact again; it gets a new, higher version.
    assert "bot v5 (active)" in publish(artifacts["a"], reg, keys["key"])
    assert entries() == [("active", 5, a)]
    assert manifest(reg)["sequence"] == 5
    ok("verify", reg, "--pub", keys["pub"])


def test_hash_key_id(tmp_path, artifacts, keys):
    reg = tmp_path / "registry"
    hk = EXAMPLE / "hash_key.txt"
    publish(artifacts["a"], reg, keys["key"], "--hash-key-file", hk)
    want = hashlib.sha256(b"edgescore-hash-key-v1\0" + hk.read_text().strip().encode()).hexdigest()[:16]
    assert manifest(reg)["models"][0]["hash_key_id"] == want
    ok("verify", reg, "--pub", keys["pub"], "--hash-key-file", hk)
    other = tmp_path / "other_key.txt"
    other.write_text("another-hash-key-of-enough-bytes\n")
    assert_clean_error(run("verify", reg, "--pub", keys["pub"], "--hash-key-file", other), "hash key")
    short = tmp_path / "short.txt"
    short.write_text("short\n")
    assert_clean_error(run("publish", artifacts["a"], "--registry", reg, "--key", keys["key"], "--hash-key-file", short), "at least 16")


def test_signature_is_over_the_context_and_payload(tmp_path, artifacts, keys):
    """An independent Ed25519 implementation accepts the signature over exactly
    b"edgescore-manifest-v1\\0" + payload bytes (docs/registry.md)."""
    ed = module("cryptography.hazmat.primitives.asymmetric.ed25519")
    reg = tmp_path / "registry"
    publish(artifacts["a"], reg, keys["key"])
    env = envelope(reg)
    payload = base64.b64decode(env["payload"])
    sig = base64.b64decode(env["signatures"][0]["sig"])
    pub = ed.Ed25519PublicKey.from_public_bytes(base64.b64decode(json.loads(keys["pub"].read_text())["public"]))
    pub.verify(sig, CONTEXT + payload)
    with pytest.raises(Exception):
        pub.verify(sig, payload)


# --- refusals -------------------------------------------------------------------------------


@pytest.fixture
def registry(tmp_path, artifacts, keys) -> Path:
    """A registry with an active and a shadow `bot` and an active `abuse`."""
    reg = tmp_path / "registry"
    publish(artifacts["a"], reg, keys["key"])
    publish(artifacts["b"], reg, keys["key"], "--shadow")
    publish(artifacts["abuse"], reg, keys["key"])
    ok("verify", reg, "--pub", keys["pub"])
    return reg


def tampered_copy(reg: Path, dest: Path, rel: str, at: int, mask: int = 0x01) -> Path:
    shutil.copytree(reg, dest)
    f = dest / rel
    data = bytearray(f.read_bytes())
    data[at] ^= mask
    f.write_bytes(bytes(data))
    return dest


def rewrite_envelope(reg: Path, edit) -> None:
    env = envelope(reg)
    edit(env)
    (reg / "manifest.json").write_text(json.dumps(env))


def test_flipped_payload_byte_is_a_bad_signature(registry, keys):
    def flip(env):
        p = bytearray(base64.b64decode(env["payload"]))
        i = p.index(b'"sequence":') + len(b'"sequence":')
        p[i] = ord("7")  # still valid JSON and a valid manifest: only the signature catches it
        env["payload"] = base64.b64encode(bytes(p)).decode()

    rewrite_envelope(registry, flip)
    p = run("verify", registry, "--pub", keys["pub"])
    assert_clean_error(p, f"manifest signature by {key_id_of(keys['pub'])} does not verify")
    assert "NOT TRUSTED" in p.stdout


def test_flipped_signature_byte_is_a_bad_signature(registry, keys):
    def flip(env):
        s = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
        s[10] ^= 0x40
        env["signatures"][0]["sig"] = base64.b64encode(bytes(s)).decode()

    rewrite_envelope(registry, flip)
    assert_clean_error(run("verify", registry, "--pub", keys["pub"]), "does not verify")


def test_unsigned_manifest(registry, keys):
    rewrite_envelope(registry, lambda env: env.update(signatures=[]))
    assert_clean_error(run("verify", registry, "--pub", keys["pub"]), "not signed")


def test_verify_with_another_key_is_unknown_key(registry, keys):
    p = run("verify", registry, "--pub", keys["other_pub"])
    assert_clean_error(p, f"signed only by unknown key(s) {key_id_of(keys['pub'])}")
    # With both keys configured (a rotation), it verifies.
    ok("verify", registry, "--pub", keys["other_pub"], "--pub", keys["pub"])


def test_flipped_artifact_byte_is_a_sha_mismatch(registry, keys):
    m = manifest(registry)
    entry = next(e for e in m["models"] if e["name"] == "abuse")
    f = registry / entry["artifact"]
    data = bytearray(f.read_bytes())
    data[len(data) // 3] ^= 0x08
    f.write_bytes(bytes(data))
    p = run("verify", registry, "--pub", keys["pub"])
    assert_clean_error(p, f"abuse v{entry['version']}: artifact sha256 is {hashlib.sha256(data).hexdigest()}, manifest says {entry['sha256']}")
    # The other models are still reported fine, and only one problem is listed.
    assert "bot v1 (active): ok" in p.stdout and "bot v2 (shadow): ok" in p.stdout and "abuse v1 (active): FAILED" in p.stdout
    assert len(p.stderr.strip().splitlines()) == 2  # the problem and the summary


def test_truncated_and_missing_artifacts(registry, keys):
    m = manifest(registry)
    bot = next(e for e in m["models"] if e["name"] == "bot" and e["mode"] == "active")
    abuse = next(e for e in m["models"] if e["name"] == "abuse")
    f = registry / bot["artifact"]
    f.write_bytes(f.read_bytes()[:-16])
    (registry / abuse["artifact"]).unlink()
    p = run("verify", registry, "--pub", keys["pub"])
    assert_clean_error(p, f"bot v1: artifact is {bot['size'] - 16} bytes, manifest says {bot['size']}")
    assert f"abuse v{abuse['version']}: cannot read" in p.stderr
    assert "2 problem(s)" in p.stderr.strip().splitlines()[-1]


def test_every_tampered_byte_is_found(registry, keys, tmp_path):
    """One flipped bit anywhere in manifest.json or in an artifact fails `verify`."""
    targets = [("manifest.json", 41)] + [(f"artifacts/{p.name}", 211) for p in sorted((registry / "artifacts").iterdir())]
    checked = 0
    for rel, stride in targets:
        size = (registry / rel).stat().st_size
        for at in list(range(0, size, stride)) + [size - 1]:
            copy = tampered_copy(registry, tmp_path / f"t{checked}", rel, at)
            p = run("verify", copy, "--pub", keys["pub"])
            assert p.returncode == 1, (rel, at, p.stdout, p.stderr)
            assert p.stderr.startswith("edgescore: error: ") and "panicked" not in p.stderr, p.stderr
            shutil.rmtree(copy)
            checked += 1
    assert checked > 100


def test_resigned_payload_changes_are_found(registry, keys, tmp_path):
    """Someone holding the key but editing the manifest by hand (a wrong schema hash, a
    golden output, an unknown field) is still caught by the artifact and manifest checks."""
    ed = module("cryptography.hazmat.primitives.asymmetric.ed25519")
    seed = base64.b64decode(json.loads(keys["key"].read_text())["secret"])
    signer = ed.Ed25519PrivateKey.from_private_bytes(seed)

    def resigned(name: str, edit) -> Path:
        reg = tmp_path / name
        shutil.copytree(registry, reg)
        m = manifest(reg)
        edit(m)
        payload = json.dumps(m).encode()
        env = {
            "payload_type": PAYLOAD_TYPE,
            "payload": base64.b64encode(payload).decode(),
            "signatures": [{"key_id": key_id_of(keys["pub"]), "sig": base64.b64encode(signer.sign(CONTEXT + payload)).decode()}],
        }
        (reg / "manifest.json").write_text(json.dumps(env))
        return reg

    ok("verify", resigned("same", lambda m: None), "--pub", keys["pub"])

    def golden(m):
        m["models"][0]["golden"][1]["y"][0] += 1e-3

    p = run("verify", resigned("golden", golden), "--pub", keys["pub"])
    assert_clean_error(p, "golden row 1: output 0 scores")

    def schema(m):
        m["models"][0]["schema_hash"] = "0" * 64

    assert_clean_error(run("verify", resigned("schema", schema), "--pub", keys["pub"]), "feature schema hash")

    def swapped(m):
        # Point bot's entry at abuse's artifact (sha and size consistent): the names differ.
        abuse = next(e for e in m["models"] if e["name"] == "abuse")
        bot = next(e for e in m["models"] if e["name"] == "bot")
        for k in ("artifact", "sha256", "size"):
            bot[k] = abuse[k]

    assert_clean_error(run("verify", resigned("swapped", swapped), "--pub", keys["pub"]), "model name is \"abuse\"")

    def unknown_field(m):
        m["models"][0]["weight"] = 2

    assert_clean_error(run("verify", resigned("unknown", unknown_field), "--pub", keys["pub"]), "unknown field `weight`")

    def two_active(m):
        m["models"].append(dict(m["models"][0]))

    assert_clean_error(run("verify", resigned("dup", two_active), "--pub", keys["pub"]), "a second active entry")

    def escape(m):
        m["models"][0]["artifact"] = "../../../etc/passwd"

    assert_clean_error(run("verify", resigned("escape", escape), "--pub", keys["pub"]), "artifact path")


def test_publish_refuses_a_tampered_manifest(registry, artifacts, keys):
    rewrite_envelope(registry, lambda env: env.update(payload=base64.b64encode(base64.b64decode(env["payload"]).replace(b'"sequence":3', b'"sequence":9')).decode()))
    before = (registry / "manifest.json").read_bytes()
    assert_clean_error(run("publish", artifacts["a"], "--registry", registry, "--key", keys["key"]), "refusing to publish over it")
    assert (registry / "manifest.json").read_bytes() == before
    assert not (registry / "manifest.json.tmp").exists()


def test_publish_with_a_rotated_key(registry, artifacts, keys):
    """A new key publishes over a manifest the old key signed: versions and sequence go on."""
    p = run("publish", artifacts["a"], "--registry", registry, "--key", keys["other_key"])
    assert p.returncode == 0, p.stderr
    assert "bot v3 (active)" in p.stdout and "seq 4" in p.stdout
    assert p.stderr.startswith("edgescore: note: ") and key_id_of(keys["pub"]) in p.stderr
    ok("verify", registry, "--pub", keys["other_pub"])
    assert_clean_error(run("verify", registry, "--pub", keys["pub"]), "unknown key")


def test_concurrent_publish_is_refused(registry, artifacts, keys):
    (registry / "manifest.json.tmp").write_text("")
    before = (registry / "manifest.json").read_bytes()
    assert_clean_error(run("publish", artifacts["a"], "--registry", registry, "--key", keys["key"]), "another publish is running")
    assert (registry / "manifest.json").read_bytes() == before
    assert (registry / "manifest.json.tmp").exists(), "the other publisher's file is left alone"


def test_cli_errors_are_one_line(tmp_path, artifacts, keys):
    assert_clean_error(run("publish", tmp_path / "nope.esm", "--registry", tmp_path / "r", "--key", keys["key"]), "cannot read")
    assert_clean_error(run("publish", artifacts["a"], "--registry", tmp_path / "r", "--key", keys["pub"]), "is not an edgescore secret key")
    bad = tmp_path / "bad.esm"
    bad.write_bytes(artifacts["a"].read_bytes()[:200])
    assert_clean_error(run("publish", bad, "--registry", tmp_path / "r", "--key", keys["key"]), "is not a valid artifact")
    assert_clean_error(run("verify", tmp_path / "r", "--pub", keys["pub"]), "cannot read")
    assert_clean_error(run("verify", tmp_path, "--pub", keys["key"]), "is not an edgescore public key")


# --- expiry, renewal and several signatures -------------------------------------------------


def test_valid_for(tmp_path, artifacts, keys):
    reg = tmp_path / "registry"
    publish(artifacts["a"], reg, keys["key"], "--valid-for", "36h")
    m = manifest(reg)
    assert seconds(m["expires"]) - seconds(m["published_at"]) == 36 * 3600
    # Longer than readers accept by default: published, with a note; `verify` with a reader's
    # default maximum refuses it, with a larger one accepts it.
    p = run("publish", artifacts["b"], "--registry", reg, "--key", keys["key"], "--valid-for", "40d")
    assert p.returncode == 0 and p.stderr.startswith("edgescore: note: valid for 3456000 s"), p.stderr
    assert_clean_error(run("verify", reg, "--pub", keys["pub"]), "manifest is valid for 3456000 s")
    ok("verify", reg, "--pub", keys["pub"], "--max-validity", "40d")
    # Outside a minute to 366 days: refused before anything is written.
    before = (reg / "manifest.json").read_bytes()
    seconds_of = {"59s": 59, "367d": 367 * 86400}
    for bad in seconds_of:
        p = run("publish", artifacts["a"], "--registry", reg, "--key", keys["key"], "--valid-for", bad)
        assert_clean_error(p, f"--valid-for {seconds_of[bad]} s is not 60..=31622400 s (a minute to 366 days")
    assert (reg / "manifest.json").read_bytes() == before
    # Not a duration: a usage error.
    p = run("publish", artifacts["a"], "--registry", reg, "--key", keys["key"], "--valid-for", "7 days")
    assert p.returncode == 2 and "is not a duration" in p.stderr, p.stderr


def test_renew_keeps_the_models_and_moves_the_expiry(tmp_path, artifacts, keys):
    reg = tmp_path / "registry"
    publish(artifacts["a"], reg, keys["key"])
    publish(artifacts["b"], reg, keys["key"], "--shadow")
    before = manifest(reg)
    out = ok("renew", reg, "--key", keys["key"], "--valid-for", "2d")
    after = manifest(reg)
    assert after["models"] == before["models"] and after["sequence"] == before["sequence"] + 1
    assert seconds(after["published_at"]) >= seconds(before["published_at"])
    assert seconds(after["expires"]) - seconds(after["published_at"]) == 2 * 86400
    assert out == f"renewed seq 3 (2 model(s)), expires {after['expires']}, signed by {key_id_of(keys['pub'])} -> {reg}/manifest.json\n"
    ok("verify", reg, "--pub", keys["pub"])
    # Nothing to renew, or a manifest someone altered: refused, nothing written.
    assert_clean_error(run("renew", tmp_path / "empty", "--key", keys["key"]), "no manifest to renew")
    rewrite_envelope(reg, lambda env: env.update(payload=base64.b64encode(base64.b64decode(env["payload"]).replace(b'"sequence":3', b'"sequence":9')).decode()))
    tampered = (reg / "manifest.json").read_bytes()
    assert_clean_error(run("renew", reg, "--key", keys["key"]), "does not verify")
    assert (reg / "manifest.json").read_bytes() == tampered and not (reg / "manifest.json.tmp").exists()


def test_an_expired_manifest_is_found_and_renewed(tmp_path, artifacts, keys):
    """`verify` refuses an expired manifest (still checking its artifacts) and one without an
    expiry; `renew`, the cron job, makes either valid again."""
    reg = tmp_path / "registry"
    publish(artifacts["a"], reg, keys["key"])
    now = time.time()
    m = manifest(reg) | {"published_at": utc(now - 3 * 86400), "expires": utc(now - 86400)}
    (reg / "manifest.json").write_bytes(signed_envelope(m, [keys["key"]]))
    p = run("verify", reg, "--pub", keys["pub"])
    assert_clean_error(p, f"manifest expired at {m['expires']} (now ")
    assert "bot v1 (active): ok" in p.stdout, p.stdout
    assert_clean_error(run("cosign", reg, "--key", keys["other_key"]), "renew it (`edgescore renew`)")
    ok("renew", reg, "--key", keys["key"])
    assert manifest(reg)["sequence"] == 2
    ok("verify", reg, "--pub", keys["pub"])
    legacy = manifest(reg)
    del legacy["expires"]
    (reg / "manifest.json").write_bytes(signed_envelope(legacy, [keys["key"]]))
    assert_clean_error(run("verify", reg, "--pub", keys["pub"]), "manifest has no `expires`")
    ok("renew", reg, "--key", keys["key"])
    ok("verify", reg, "--pub", keys["pub"])


def test_several_keys_and_cosign(tmp_path, artifacts, keys):
    reg = tmp_path / "registry"
    team, other, third = (key_id_of(keys[k]) for k in ("pub", "other_pub", "third_pub"))
    two = ["--pub", keys["pub"], "--pub", keys["other_pub"]]
    # Two keys (one given twice signs once): two signatures over one payload.
    publish(artifacts["a"], reg, keys["key"], "--key", keys["other_key"], "--key", keys["key"])
    assert [s["key_id"] for s in envelope(reg)["signatures"]] == [team, other]
    out = ok("verify", reg, *two, "--threshold", "2")
    assert f"signed by {team}, {other}, sequence 1" in out
    p = run("verify", reg, *two, "--pub", keys["third_pub"], "--threshold", "3")
    assert_clean_error(p, f"manifest is signed by 2 of the configured keys ({team}, {other}), 3 required")
    # A co-signature: the payload and the other signatures untouched.
    before = envelope(reg)
    out = ok("cosign", reg, "--key", keys["third_key"])
    after = envelope(reg)
    assert after["payload"] == before["payload"] and after["signatures"][:2] == before["signatures"]
    assert after["signatures"][2]["key_id"] == third
    expires = manifest(reg)["expires"]
    assert out == f"co-signed seq 1 [bot v1], expires {expires}, by {third}: 3 signature(s) -> {reg}/manifest.json\n", out
    ok("verify", reg, *two, "--pub", keys["third_pub"], "--threshold", "3")
    # Co-signing again replaces the key's own signature.
    ok("cosign", reg, "--key", keys["third_key"])
    assert envelope(reg) == after
    # A renewal by one key drops the co-signatures, which covered the old payload, with a note.
    p = run("renew", reg, "--key", keys["key"])
    assert p.returncode == 0 and p.stderr.startswith("edgescore: note: "), p.stderr
    assert other in p.stderr and third in p.stderr and "`edgescore cosign`" in p.stderr
    assert [s["key_id"] for s in envelope(reg)["signatures"]] == [team]
    assert_clean_error(run("verify", reg, *two, "--threshold", "2"), f"manifest is signed by 1 of the configured keys ({team}), 2 required")
    ok("cosign", reg, "--key", keys["other_key"])
    ok("verify", reg, *two, "--threshold", "2")
    # A policy that cannot be met, nothing to co-sign, an envelope that does not open.
    assert_clean_error(run("verify", reg, "--pub", keys["pub"], "--threshold", "2"), "--threshold: 2 is more than the 1 distinct key(s) configured")
    assert_clean_error(run("verify", reg, "--pub", keys["pub"], "--max-validity", "30s"), "--max-validity: 30 s is not 60..=31622400 s")
    assert_clean_error(run("cosign", tmp_path / "none", "--key", keys["key"]), "no manifest to co-sign")
    rewrite_envelope(reg, lambda env: env.update(payload_type="application/json"))
    assert_clean_error(run("cosign", reg, "--key", keys["key"]), "refusing to co-sign it")
