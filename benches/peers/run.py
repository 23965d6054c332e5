#!/usr/bin/env python3
"""Peer comparison: edgescore vs tl2cgen, lleaves, ONNX Runtime, XGBoost and LightGBM.

Measures, in ONE run so every number shares the machine's current noise, the mean single-row
latency of each peer: cycle through the same 1000 rows of models/reference/rows.csv, one row per
call, one warm-up pass, then whole passes until --seconds have elapsed (the loop of
benches/src/bin/peer_native.rs, reproduced in the C harnesses and in the Python worker). Then a
compile-time comparison (`edgescore compile` vs loading the model in XGBoost/LightGBM, plus the
recorded tl2cgen and lleaves build times).

Peers (ratio = edgescore ns/row on the matching model / peer ns/row; < 1 means edgescore is faster):
  edgescore         target/release/peer-native (Rust, native loop)
  tl2cgen           treelite -> tl2cgen C, gcc -O3 -march=native, native loop (tl2cgen_harness.c)
  lleaves           LightGBM -> LLVM object file, linked into a native loop (lleaves_harness.c)
  lleaves (ctypes)  the same compiled entry point called per row from Python through ctypes
  onnxruntime       onnxmltools conversion, InferenceSession.run per row from Python
  xgboost           Booster.inplace_predict per row from Python
  lightgbm          Booster.predict per row from Python
  python floor      the Python timing loop calling a no-op: the overhead every Python peer pays

Artifacts (generated C, objects, ONNX files, the 2000-tree model, rows as f32) are cached in
benches/peers/build/ keyed by a hash of the model file and tool versions; `--rebuild` ignores the
cache. Results are written to benches/peers/build/last_run.json.

Usage: .venv/bin/python -m benches.peers.run [--seconds 2.5] [--rounds 1] [--only a,b] [--skip a,b]
                                              [--no-compile-time] [--rebuild]
"""

from __future__ import annotations

import os

# Single-threaded everything (set before numpy / xgboost / lightgbm / onnxruntime load; inherited
# by the workers and harnesses).
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from tqdm import tqdm  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BUILD = HERE / "build"
REF = ROOT / "models" / "reference"
XGB_MODEL = REF / "bot_xgb.json"
LGB_MODEL = REF / "bot_lgb.txt"
ROWS_CSV = REF / "rows.csv"
EXPECTED = {"xgb": REF / "expected_xgb.csv", "lgb": REF / "expected_lgb.csv"}
MODELS = {"xgb": XGB_MODEL, "lgb": LGB_MODEL}
PEER_NATIVE = ROOT / "target" / "release" / "peer-native"
EDGESCORE = ROOT / "target" / "release" / "edgescore"
N_CHECK = 20  # rows whose predictions are checked against the library's own (expected_*.csv)
CFLAGS = ["-O3", "-march=native"]
BIG_TREES = 2000


def log(msg: str) -> None:
    with tqdm.external_write_mode(file=sys.stderr):  # above the progress bar, not through it
        print(msg, file=sys.stderr, flush=True)


def progress(total: int, desc: str, unit: str) -> tqdm:
    """A bar on stderr, on a terminal only (disable=None): logs keep the log lines and the table."""
    return tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False)


def sha(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.read_bytes() if isinstance(p, Path) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def run(cmd, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-2000:]}"
                           f"\n{r.stderr[-4000:]}")
    return r


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON line in output:\n{text[-2000:]}")


def pred_lines(text: str) -> list[float]:
    return [float(line.split()[2]) for line in text.splitlines() if line.startswith("pred ")]


def worker(name: str, *args: str, seconds: float | None = None, timeout: float = 3600) -> dict:
    """Run one measurement/build step in a fresh Python process (libraries never share a process)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, *args]
    if seconds is not None:
        cmd += ["--seconds", str(seconds)]
    return last_json(run(cmd, timeout=timeout).stdout)


# ----------------------------------------------------------------------------- inputs


def wait_for_reference() -> None:
    needed = [XGB_MODEL, LGB_MODEL, ROWS_CSV, *EXPECTED.values()]
    deadline = time.time() + 20 * 60
    while not all(p.exists() for p in needed):
        if time.time() > deadline:
            script = ROOT / "models" / "train_reference.py"
            if not script.exists():
                sys.exit(f"reference models missing ({', '.join(str(p) for p in needed if not p.exists())})")
            log(f"reference models still missing: running {script.relative_to(ROOT)}")
            run([sys.executable, script], cwd=ROOT)
            break
        log("waiting for models/reference/* (written by models/train_reference.py) ...")
        time.sleep(60)


def load_rows():
    import numpy as np

    header = ROWS_CSV.read_text().splitlines()[0].split(",")
    X = np.genfromtxt(ROWS_CSV, delimiter=",", skip_header=1, dtype=np.float64)  # empty -> NaN
    return header, np.ascontiguousarray(X.astype(np.float32))


def rows_f32() -> tuple[Path, int, int]:
    """The rows as a raw row-major float32 matrix (NaN = missing) for the C harnesses."""
    header, X = load_rows()
    path = BUILD / f"rows-{sha(ROWS_CSV)}.f32"
    if not path.exists():
        X.tofile(path)
    return path, X.shape[0], X.shape[1]


def expected(kind: str) -> list[float]:
    return [float(v) for v in EXPECTED[kind].read_text().split()]


def max_diff(preds: list[float], kind: str) -> float | None:
    if not preds:
        return None
    ref = expected(kind)
    return max(abs(a - b) for a, b in zip(preds, ref))


def ensure_cargo_bin(path: Path, package: str, bin_name: str, features: str | None = None) -> None:
    if path.exists():
        return
    cmd = ["cargo", "build", "--release", "-p", package, "--bin", bin_name] + (["--features", features] if features else [])
    log(f"building {path.relative_to(ROOT)} ({' '.join(cmd)}) ...")
    subprocess.run(cmd, cwd=ROOT, check=True)


def meta_load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------------- builds (cached)


def build_tl2cgen(kind: str, rebuild: bool) -> dict:
    """treelite load -> tl2cgen.generate_c_code -> gcc -O3 -march=native -c main.c (cached)."""
    import tl2cgen
    import treelite

    model = MODELS[kind]
    key = sha(model, treelite.__version__, tl2cgen.__version__, " ".join(CFLAGS))
    out = BUILD / f"tl2cgen-{kind}-{key}"
    meta = meta_load(out / "meta.json")
    if meta and not rebuild and (out / "main.o").exists():
        return {**meta, "dir": str(out), "cached": True}
    shutil.rmtree(out, ignore_errors=True)
    log(f"tl2cgen: generating C for {model.name} ...")
    t0 = time.perf_counter()
    if kind == "xgb":
        tm = treelite.frontend.load_xgboost_model(str(model))
    else:
        tm = treelite.frontend.load_lightgbm_model(str(model))
    t1 = time.perf_counter()
    tl2cgen.generate_c_code(tm, str(out), params={}, verbose=False)
    t2 = time.perf_counter()
    log(f"tl2cgen: gcc {' '.join(CFLAGS)} -c main.c ({(out / 'main.c').stat().st_size / 1e6:.1f} MB) ...")
    run(["gcc", *CFLAGS, "-c", out / "main.c", "-o", out / "main.o"])
    t3 = time.perf_counter()
    meta = {"model": str(model.relative_to(ROOT)), "load_s": t1 - t0, "codegen_s": t2 - t1,
            "gcc_s": t3 - t2, "total_s": t3 - t0, "main_c_bytes": (out / "main.c").stat().st_size,
            "created": _dt.datetime.now().isoformat(timespec="seconds"),
            "treelite": treelite.__version__, "tl2cgen": tl2cgen.__version__}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return {**meta, "dir": str(out), "cached": False}


def tl2cgen_harness(art: dict) -> Path:
    src = Path(art["dir"])
    header = (src / "header.h").read_text()
    m = re.search(r"void predict\(union Entry\* data, int pred_margin, (\w+)\* result\);", header)
    if not m:
        raise RuntimeError(f"unexpected tl2cgen entry point in {src / 'header.h'}")
    exe = src / "harness"
    run(["gcc", *CFLAGS, f"-DTL_RESULT_T={m.group(1)}", f"-I{src}", HERE / "tl2cgen_harness.c",
         src / "main.o", "-lm", "-o", exe])
    return exe


def build_lleaves(rebuild: bool) -> dict:
    import importlib.metadata as md

    key = sha(LGB_MODEL, md.version("lleaves"), md.version("llvmlite"), platform.machine())
    obj = BUILD / f"lleaves-lgb-{key}.o"
    meta_path = obj.with_suffix(".json")
    meta = meta_load(meta_path)
    if meta and not rebuild and obj.exists():
        return {**meta, "obj": str(obj), "cached": True}
    obj.unlink(missing_ok=True)
    log("lleaves: compiling bot_lgb.txt (LLVM -O3; takes minutes, cached afterwards) ...")
    r = worker("lleaves-compile", str(LGB_MODEL), str(obj))
    meta = {"model": str(LGB_MODEL.relative_to(ROOT)), "compile_s": r["compile_s"],
            "created": _dt.datetime.now().isoformat(timespec="seconds"),
            "lleaves": md.version("lleaves"), "llvmlite": md.version("llvmlite"),
            "shim": r.get("shim")}
    meta_path.write_text(json.dumps(meta, indent=2))
    return {**meta, "obj": str(obj), "cached": False}


def lleaves_harness(art: dict) -> Path:
    obj = Path(art["obj"])
    exe = obj.with_suffix(".harness")
    run(["gcc", *CFLAGS, HERE / "lleaves_harness.c", obj, "-lm", "-o", exe])
    return exe


def onnx_path(kind: str) -> Path:
    import importlib.metadata as md

    return BUILD / f"onnx-{kind}-{sha(MODELS[kind], md.version('onnxmltools'))}.onnx"


# ----------------------------------------------------------------------------- lleaves shim


def patch_lleaves() -> str | None:
    """lleaves 1.3.0 still drives llvmlite's legacy pass manager, which llvmlite >= 0.45 removed
    (AttributeError: 'PassManagerBuilder'; and llvm.initialize() now raises). Swap in the same
    pipeline on the new pass manager (PipelineTuningOptions(speed_level=3), inlining on), as in
    upstream siboehm/lleaves PR #97. Returns a description of the shim, or None if not needed."""
    import llvmlite.binding as llvm

    if hasattr(llvm, "PassManagerBuilder"):
        return None
    import llvmlite.ir
    import lleaves.compiler
    import lleaves.llvm_binding as lb
    from lleaves.compiler.ast import parse_to_ast
    from lleaves.compiler.codegen import gen_forest

    def _init():
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()

    def compile_to_module(file_path, fblocksize=34, finline=True, raw_score=False,
                          froot_func_name="forest_root", use_fp64=True):
        forest = parse_to_ast(file_path)
        forest.raw_score = raw_score
        ir = llvmlite.ir.Module(name="forest")
        gen_forest(forest, ir, fblocksize, froot_func_name, use_fp64)
        ir.triple = llvm.get_process_triple()
        _init()
        module = llvm.parse_assembly(str(ir))
        module.name = str(file_path)
        module.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        if finline:
            pto.inlining_threshold = 1
        pb = llvm.create_pass_builder(lb._get_target_machine("large"), pto)
        pb.getModulePassManager().run(module, pb)
        return module

    lb._initialize_llvm = _init
    lleaves.compiler.compile_to_module = compile_to_module
    return f"new-pass-manager shim for llvmlite {llvmlite.__version__} (lleaves 1.3.0 predates it)"


# ----------------------------------------------------------------------------- workers


def time_calls(fn, items, seconds: float) -> tuple[float, int]:
    """The peer-native loop in Python: warm-up pass, then whole passes until the budget is spent."""
    for it in items:
        fn(it)
    budget = seconds * 1e9
    calls = 0
    t0 = time.perf_counter_ns()
    elapsed = 0
    while elapsed < budget:
        for it in items:
            fn(it)
        calls += len(items)
        elapsed = time.perf_counter_ns() - t0
    return elapsed / calls, calls


def run_worker(name: str, args: list[str], seconds: float) -> dict:
    import numpy as np

    if name == "lleaves-compile":
        shim = patch_lleaves()
        import lleaves

        model_file, obj, *cpu = args
        t0 = time.perf_counter()
        m = lleaves.Model(model_file=model_file)
        # fblocksize = num_trees: lleaves' documented setting for single-row prediction. An
        # optional CPU name (benches/shapes/floor.py: "x86-64-v3", which valgrind can run)
        # replaces the host's CPU and its features.
        target = {"target_cpu": cpu[0], "target_cpu_features": ""} if cpu else {}
        m.compile(cache=obj, fblocksize=m.num_trees(), **target)
        return {"compile_s": time.perf_counter() - t0, "shim": shim}

    if name == "train-big":
        import xgboost as xgb

        (out,) = args
        rng = np.random.default_rng(7)
        X = rng.normal(size=(20_000, 30)).astype(np.float32)
        s = X[:, 0] * X[:, 1] + np.sin(3 * X[:, 2]) + (X[:, 3] > 0.5) * X[:, 4] - 0.5 * X[:, 5] ** 2
        y = (s + rng.logistic(0, 1, len(s)) > 0).astype(int)
        t0 = time.perf_counter()
        params = {"objective": "binary:logistic", "max_depth": 6, "eta": 0.05, "tree_method": "hist",
                  "subsample": 0.8, "colsample_bytree": 0.8, "seed": 0, "nthread": 2}
        bst = xgb.train(params, xgb.DMatrix(X, label=y), BIG_TREES)
        bst.save_model(out)
        return {"train_s": time.perf_counter() - t0}

    if name == "load-time":
        kind, model_file, reps = args
        best = float("inf")
        if kind == "xgb":
            import xgboost as xgb

            for _ in range(int(reps)):
                t0 = time.perf_counter()
                xgb.Booster(model_file=model_file)
                best = min(best, time.perf_counter() - t0)
        else:
            import lightgbm as lgb

            for _ in range(int(reps)):
                t0 = time.perf_counter()
                lgb.Booster(model_file=model_file)
                best = min(best, time.perf_counter() - t0)
        return {"best_s": best}

    # ---- latency workers: (kind) -> ns_per_row, calls, preds for the first N_CHECK rows
    header, X = load_rows()
    rows = [X[i:i + 1] for i in range(len(X))]  # [1, 30] float32, C-contiguous views
    kind = args[0] if args else "xgb"
    model_file = str(MODELS[kind])

    if name == "python-floor":
        def noop(r):
            return None

        ns, calls = time_calls(noop, rows, seconds)
        return {"ns_per_row": ns, "calls": calls, "preds": []}

    if name == "xgboost":
        import xgboost as xgb

        b = xgb.Booster(model_file=model_file)
        b.set_param({"nthread": 1})
        preds = [float(b.inplace_predict(r)[0]) for r in rows[:N_CHECK]]
        ns, calls = time_calls(b.inplace_predict, rows, seconds)
        return {"ns_per_row": ns, "calls": calls, "preds": preds, "version": xgb.__version__}

    if name == "lightgbm":
        import lightgbm as lgb

        b = lgb.Booster(model_file=model_file)
        preds = [float(b.predict(r, num_threads=1)[0]) for r in rows[:N_CHECK]]
        ns, calls = time_calls(lambda r: b.predict(r, num_threads=1), rows, seconds)
        return {"ns_per_row": ns, "calls": calls, "preds": preds, "version": lgb.__version__}

    if name == "onnxruntime":
        import onnxruntime as ort

        path = Path(args[1])
        convert_s = None
        if not path.exists():
            from onnxmltools.convert.common.data_types import FloatTensorType

            t0 = time.perf_counter()
            initial = [("input", FloatTensorType([None, X.shape[1]]))]
            if kind == "xgb":
                import xgboost as xgb
                from onnxmltools import convert_xgboost

                b = xgb.Booster(model_file=model_file)
                b.feature_names = None  # the converter wants f0..fN split indices
                onx = convert_xgboost(b, initial_types=initial, target_opset=15)
            else:
                import lightgbm as lgb
                from onnxmltools import convert_lightgbm

                b = lgb.Booster(model_file=model_file)
                onx = convert_lightgbm(b, initial_types=initial, target_opset=15, zipmap=False)
            convert_s = time.perf_counter() - t0
            path.write_bytes(onx.SerializeToString())
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
        in_name = sess.get_inputs()[0].name
        out_names = [o.name for o in sess.get_outputs() if o.name == "probabilities"] or \
                    [sess.get_outputs()[-1].name]
        run_ = sess.run
        preds = [float(run_(out_names, {in_name: r})[0].reshape(-1)[-1]) for r in rows[:N_CHECK]]
        ns, calls = time_calls(lambda r: run_(out_names, {in_name: r}), rows, seconds)
        return {"ns_per_row": ns, "calls": calls, "preds": preds, "version": ort.__version__,
                "convert_s": convert_s}

    if name == "lleaves-ctypes":
        import ctypes

        patch_lleaves()
        import lleaves

        m = lleaves.Model(model_file=model_file)
        m.compile(cache=args[1], fblocksize=m.num_trees())  # loads the cached object
        Xd = np.ascontiguousarray(X.astype(np.float64))
        out = np.zeros(1, dtype=np.float64)
        dptr = ctypes.POINTER(ctypes.c_double)
        ptrs = [Xd[i].ctypes.data_as(dptr) for i in range(len(Xd))]
        optr = out.ctypes.data_as(dptr)
        f = m._c_entry_func
        preds = []
        for p in ptrs[:N_CHECK]:
            f(p, optr, 0, 1)
            preds.append(float(out[0]))
        ns, calls = time_calls(lambda p: f(p, optr, 0, 1), ptrs, seconds)
        return {"ns_per_row": ns, "calls": calls, "preds": preds}

    raise SystemExit(f"unknown worker {name}")


# ----------------------------------------------------------------------------- the run


class Peer:
    def __init__(self, key, label, how, kind, measure):
        self.key, self.label, self.how, self.kind, self.measure = key, label, how, kind, measure


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "-"
    return f"{ns:,.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.5, help="time budget per peer per round (default 2.5)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every peer this many times, interleaved; report the best (default 1)")
    ap.add_argument("--only", default="", help="comma-separated peer keys to run (see --list)")
    ap.add_argument("--skip", default="", help="comma-separated peer keys to skip")
    ap.add_argument("--list", action="store_true", help="list peer keys and exit")
    ap.add_argument("--no-compile-time", action="store_true", help="skip the compile-time comparison")
    ap.add_argument("--rebuild", action="store_true", help="ignore cached artifacts in benches/peers/build")
    ap.add_argument("--json", type=Path, default=BUILD / "last_run.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("worker_args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:
        print(json.dumps(run_worker(a.worker, a.worker_args, a.seconds)), flush=True)
        return 0

    BUILD.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    S = a.seconds
    started = _dt.datetime.now().astimezone()
    load_before = os.getloadavg()

    def native(exe_fn, kind):
        def m():
            exe = exe_fn()
            r = run([exe, rows_bin, n_feat, S, N_CHECK], timeout=600)
            j = last_json(r.stdout)
            return {"ns_per_row": j["ns_per_row"], "calls": j["calls"], "preds": pred_lines(r.stdout)}
        return m

    def edgescore(kind):
        def m():
            env = {k: v for k, v in os.environ.items() if k != "EDGESCORE_PASSES"}  # time budget, not passes
            r = run([PEER_NATIVE, MODELS[kind], ROWS_CSV, S], timeout=600, env=env)
            j = last_json(r.stdout)
            return {"ns_per_row": j["ns_per_row"], "calls": j["calls"], "preds": edgescore_preds.get(kind, [])}
        return m

    def py(name, kind, *extra):
        return lambda: worker(name, kind, *[str(e() if callable(e) else e) for e in extra], seconds=S)

    builds: dict = {}

    def tl(kind):
        def exe():
            if ("tl2cgen", kind) not in builds:
                builds[("tl2cgen", kind)] = build_tl2cgen(kind, a.rebuild)
            art = builds[("tl2cgen", kind)]
            if "exe" not in art:
                art["exe"] = tl2cgen_harness(art)
            return art["exe"]
        return exe

    def ll_art():
        if "lleaves" not in builds:
            builds["lleaves"] = build_lleaves(a.rebuild)
        return builds["lleaves"]

    def ll_exe():
        art = ll_art()
        if "exe" not in art:
            art["exe"] = lleaves_harness(art)
        return art["exe"]

    peers = [
        Peer("edgescore-xgb", "edgescore", "native loop (Rust, peer-native)", "xgb", edgescore("xgb")),
        Peer("tl2cgen-xgb", "tl2cgen", "native loop (C harness, gcc -O3 -march=native)", "xgb",
             native(tl("xgb"), "xgb")),
        Peer("onnxruntime-xgb", "onnxruntime", "Python: InferenceSession.run([1,30])", "xgb",
             py("onnxruntime", "xgb", lambda: onnx_path("xgb"))),
        Peer("xgboost", "xgboost", "Python: Booster.inplace_predict([1,30])", "xgb", py("xgboost", "xgb")),
        Peer("edgescore-lgb", "edgescore", "native loop (Rust, peer-native)", "lgb", edgescore("lgb")),
        Peer("tl2cgen-lgb", "tl2cgen", "native loop (C harness, gcc -O3 -march=native)", "lgb",
             native(tl("lgb"), "lgb")),
        Peer("lleaves", "lleaves", "native loop (C harness linked to lleaves' .o)", "lgb",
             native(ll_exe, "lgb")),
        Peer("lleaves-ctypes", "lleaves (ctypes)", "Python: ctypes forest_root(row, out, 0, 1)", "lgb",
             py("lleaves-ctypes", "lgb", lambda: ll_art()["obj"])),
        Peer("onnxruntime-lgb", "onnxruntime", "Python: InferenceSession.run([1,30])", "lgb",
             py("onnxruntime", "lgb", lambda: onnx_path("lgb"))),
        Peer("lightgbm", "lightgbm", "Python: Booster.predict([1,30], num_threads=1)", "lgb",
             py("lightgbm", "lgb")),
        Peer("python-floor", "python floor", "Python: the timing loop calling a no-op", "-",
             py("python-floor", "xgb")),
    ]
    if a.list:
        for p in peers:
            print(f"{p.key:18} {p.label:18} {p.how}")
        return 0
    only = {k for k in a.only.split(",") if k}
    skip = {k for k in a.skip.split(",") if k}
    for k in only | skip:
        if k not in {p.key for p in peers}:
            sys.exit(f"unknown peer {k!r} (see --list)")
    selected = [p for p in peers if (not only or p.key in only) and p.key not in skip]
    # A ratio needs the matching edgescore row.
    for kind in ("xgb", "lgb"):
        if any(p.kind == kind for p in selected) and not any(p.key == f"edgescore-{kind}" for p in selected):
            selected.insert(0, next(p for p in peers if p.key == f"edgescore-{kind}"))

    wait_for_reference()
    rows_bin, n_rows, n_feat = rows_f32()
    ensure_cargo_bin(PEER_NATIVE, "edgescore-benches", "peer-native", features="peer-native")

    # edgescore's own predictions for the sanity column (peer-native prints only timings).
    edgescore_preds: dict = {}
    if not EDGESCORE.exists():
        ensure_cargo_bin(EDGESCORE, "edgescore-compile", "edgescore")
    with tempfile.TemporaryDirectory() as td:
        for kind in ("xgb", "lgb"):
            esm = Path(td) / f"{kind}.esm"
            run([EDGESCORE, "compile", MODELS[kind], "-o", esm])
            out = run([EDGESCORE, "score", esm, "--csv", ROWS_CSV]).stdout.split()
            edgescore_preds[kind] = [float(v.split(",")[-1]) for v in out[:N_CHECK]]

    # Build everything before timing anything (builds are slow and would skew neighbours).
    for p in selected:
        if p.key.startswith("tl2cgen"):
            tl(p.kind)()
        elif p.key.startswith("lleaves"):
            ll_exe()
    for p in selected:
        if p.key.startswith("onnxruntime") and not onnx_path(p.kind).exists():
            log(f"onnxmltools: converting {MODELS[p.kind].name} to ONNX ...")
            r = worker("onnxruntime", p.kind, str(onnx_path(p.kind)), seconds=0.01)
            onnx_path(p.kind).with_suffix(".json").write_text(json.dumps(
                {"convert_s": r["convert_s"], "created": _dt.datetime.now().isoformat(timespec="seconds")}))
        if p.key.startswith("onnxruntime"):
            builds[f"onnx-{p.kind}"] = {"path": str(onnx_path(p.kind)),
                                        **(meta_load(onnx_path(p.kind).with_suffix(".json")) or {})}

    results: dict[str, dict] = {}
    with progress(a.rounds * len(selected), "peers", "peer") as bar:
        for rnd in range(a.rounds):
            for p in selected:
                bar.set_postfix_str(f"round {rnd + 1}/{a.rounds} {p.key}")
                log(f"[round {rnd + 1}/{a.rounds}] {p.key}: {S:g} s ...")
                try:
                    r = p.measure()
                except Exception as e:  # noqa: BLE001 - report and carry on with the other peers
                    log(f"  {p.key} FAILED: {e}")
                    results.setdefault(p.key, {"error": str(e)[:2000]})
                    continue
                finally:
                    bar.update()
                log(f"  {r['ns_per_row']:,.1f} ns/row over {r['calls']:,} calls")
                prev = results.get(p.key)
                runs = (prev or {}).get("runs_ns", []) + [r["ns_per_row"]]
                if prev is None or "ns_per_row" not in prev or r["ns_per_row"] < prev["ns_per_row"]:
                    results[p.key] = r
                results[p.key]["runs_ns"] = runs

    # ---- latency table
    es = {k: results.get(f"edgescore-{k}", {}).get("ns_per_row") for k in ("xgb", "lgb")}
    model_name = {"xgb": "bot_xgb", "lgb": "bot_lgb", "-": "-"}
    table = []
    for p in selected:
        r = results.get(p.key, {})
        ns = r.get("ns_per_row")
        ref = es.get(p.kind)
        row = {"key": p.key, "peer": p.label, "how": p.how, "model": model_name[p.kind],
               "ns_per_row": ns, "calls": r.get("calls"), "runs_ns": r.get("runs_ns"),
               "ratio_edgescore_over_peer": (ref / ns) if (ns and ref) else None,
               "max_abs_diff_vs_library": max_diff(r.get("preds", []), p.kind) if p.kind != "-" else None,
               "error": r.get("error")}
        runs = r.get("runs_ns") or []
        row["spread"] = max(runs) / min(runs) if len(runs) > 1 else None
        table.append(row)

    lines = []
    lines.append(f"edgescore peer comparison - {started:%Y-%m-%d %H:%M %Z} - {platform.node()} "
                 f"({os.cpu_count()} cpus, load avg {load_before[0]:.2f} before)")
    lines.append(f"single-row latency, {n_rows} rows x {n_feat} features cycled one row per call, "
                 f"{S:g} s per peer x {a.rounds} round(s), 1 thread")
    lines.append("ratio = edgescore ns/row (same model) / peer ns/row; < 1 = edgescore faster")
    lines.append("")
    spread_col = a.rounds > 1
    hdr = (f"{'peer':18} {'model':8} {'ns/row':>10} {'us/row':>8} {'es/peer':>8} {'peer/es':>8} "
           f"{'max|diff|':>9}{'  spread' if spread_col else ''}  how")
    lines.append(hdr)
    lines.append("-" * len(hdr))
    for row in table:
        ns = row["ns_per_row"]
        ratio = row["ratio_edgescore_over_peer"]
        d = row["max_abs_diff_vs_library"]
        sp = (f"{row['spread']:>8.2f}" if row["spread"] else f"{'-':>8}") if spread_col else ""
        if row["error"]:
            lines.append(f"{row['peer']:18} {row['model']:8} {'FAILED':>10}  {row['error'].splitlines()[0][:80]}")
            continue
        lines.append(
            f"{row['peer']:18} {row['model']:8} {fmt_ns(ns):>10} {ns / 1000:>8.2f} "
            f"{(f'{ratio:.2f}' if ratio else '-'):>8} {(f'{1 / ratio:.2f}x' if ratio else '-'):>8} "
            f"{(f'{d:.1e}' if d is not None else '-'):>9}{sp}  {row['how']}")
    lines.append("")
    lines.append(f"max|diff| = max abs difference from the library's own probabilities "
                 f"(models/reference/expected_*.csv) over the first {N_CHECK} rows;")
    lines.append("edgescore's from `edgescore score` on the same model (peer-native prints only timings)")
    if spread_col:
        lines.append(f"ns/row = best of {a.rounds} interleaved rounds; spread = slowest / fastest round")

    # ---- compile times
    compile_rows = []
    if not a.no_compile_time:
        big = BUILD / f"xgb{BIG_TREES}-depth6.json"
        if not big.exists():
            log(f"training a synthetic {BIG_TREES}-tree depth-6 XGBoost model (cached) ...")
            tr = worker("train-big", str(big))
            log(f"  trained in {tr['train_s']:.1f} s")
        ensure_cargo_bin(EDGESCORE, "edgescore-compile", "edgescore")
        compile_models = [(f"synthetic {BIG_TREES}-tree XGBoost", "xgb", big),
                          ("bot_xgb (300 trees)", "xgb", XGB_MODEL),
                          ("bot_lgb (300 trees)", "lgb", LGB_MODEL)]
        with tempfile.TemporaryDirectory() as td, progress(len(compile_models), "compile times", "model") as bar:
            for label, kind, path in compile_models:
                bar.set_postfix_str(label)
                times, inproc = [], []
                for _ in range(3):
                    t0 = time.perf_counter()
                    out = run([EDGESCORE, "compile", path, "-o", Path(td) / "x.esm"]).stdout
                    times.append(time.perf_counter() - t0)
                    m = re.search(r"([0-9.]+) ms\s*$", out)
                    if m:
                        inproc.append(float(m.group(1)) / 1e3)
                lib = worker("load-time", kind, str(path), "3")["best_s"]
                row = {"model": label, "file": str(path.relative_to(ROOT)), "edgescore_compile_s": min(times),
                       "edgescore_inprocess_s": min(inproc) if inproc else None,
                       "library": "xgboost.Booster(model_file=)" if kind == "xgb" else "lightgbm.Booster(model_file=)",
                       "library_load_s": lib, "ratio": min(times) / lib}
                if path != big:
                    t = builds.get(("tl2cgen", kind))
                    if t:
                        row["tl2cgen_s"] = t["total_s"]
                        row["tl2cgen_gcc_s"] = t["gcc_s"]
                        row["tl2cgen_cached"] = t["cached"]
                    if kind == "lgb" and "lleaves" in builds:
                        row["lleaves_s"] = builds["lleaves"]["compile_s"]
                compile_rows.append(row)
                bar.update()
        lines.append("")
        lines.append("compile / load time (wall clock, best of 3; edgescore = `target/release/edgescore compile "
                     "MODEL -o X.esm` incl. process start)")
        hdr2 = (f"{'model':30} {'edgescore':>10} {'(in-proc)':>10} {'lib load':>10} {'es/lib':>7} "
                f"{'tl2cgen':>9} {'lleaves':>9}")
        lines.append(hdr2)
        lines.append("-" * len(hdr2))
        for r in compile_rows:
            tl_s = f"{r['tl2cgen_s']:.1f} s" if "tl2cgen_s" in r else "-"
            ll_s = f"{r['lleaves_s']:.0f} s" if "lleaves_s" in r else "-"
            ip = f"{r['edgescore_inprocess_s'] * 1e3:.0f} ms" if r["edgescore_inprocess_s"] else "-"
            lines.append(f"{r['model']:30} {r['edgescore_compile_s'] * 1e3:>7.0f} ms {ip:>10} "
                         f"{r['library_load_s'] * 1e3:>7.0f} ms {r['ratio']:>7.2f} {tl_s:>9} {ll_s:>9}")
        lines.append("(in-proc) = the time `edgescore compile` reports itself: read + compile + validate + write, "
                     "no process start")
        lines.append("lib load = xgboost.Booster / lightgbm.Booster(model_file=...) inside Python (import excluded); "
                     "es/lib = edgescore wall / lib load")
        tl_builds = [(k[1], v) for k, v in builds.items() if isinstance(k, tuple) and k[0] == "tl2cgen"]
        if tl_builds:
            detail = "; ".join(f"{kind}: codegen {v['load_s'] + v['codegen_s']:.1f} s + gcc {v['gcc_s']:.1f} s"
                               f"{', measured ' + v['created'] if v['cached'] else ''}" for kind, v in tl_builds)
            lines.append(f"tl2cgen = treelite load + generate_c_code + gcc {' '.join(CFLAGS)} -c of the single "
                         f"generated main.c, one-off and cached ({detail})")
        if "lleaves" in builds:
            b = builds["lleaves"]
            lines.append(f"lleaves = Model.compile(fblocksize=num_trees), LLVM -O3, one-off and cached"
                         f"{' (measured ' + b['created'] + ')' if b['cached'] else ''}; "
                         f"{b.get('shim') or 'stock lleaves'}")

    load_after = os.getloadavg()
    lines.append("")
    lines.append(f"load avg after: {load_after[0]:.2f}")
    text = "\n".join(lines)
    print(text)

    report = {"date": started.isoformat(timespec="seconds"), "host": platform.node(),
              "cpus": os.cpu_count(), "cpu": _cpu_model(), "seconds_per_peer": S, "rounds": a.rounds,
              "rows": n_rows, "features": n_feat, "loadavg_before": load_before, "loadavg_after": load_after,
              "command": " ".join([Path(sys.executable).name, *sys.argv]),
              "latency": table, "compile": compile_rows,
              "builds": {(k if isinstance(k, str) else "-".join(k)): {kk: vv for kk, vv in v.items() if kk != "exe"}
                         for k, v in builds.items()},
              "text": text}
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(report, indent=2, default=str))
    log(f"wrote {a.json}")
    failed = [r["key"] for r in table if r["error"]]
    print(f"peers {'FAILED' if failed else 'OK'}: {len(selected)} peers × {a.rounds} round{'s' if a.rounds != 1 else ''} "
          f"of {S:g} s" + (f", {len(compile_rows)} compile-time models" if compile_rows else "")
          + f" in {time.monotonic() - t_start:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
