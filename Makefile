# edgescore: `make demo` runs the main job, `make test` the whole suite. Both install what
# they need on first use: the pinned Rust toolchain (rust-toolchain.toml, via rustup) and a
# Python venv under .venv with requirements.txt.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
CARGO ?= cargo
EDGESCORE_DEBUG := target/debug/edgescore
EDGESCORE := target/release/edgescore

.PHONY: all build demo test test-rust test-python bench bench-peers fixtures reference fuzz toolchain venv clean

all: build

toolchain:
	@command -v rustup >/dev/null || { echo "rustup is required (https://rustup.rs)"; exit 1; }
	@rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
	@rustup target list --installed | grep -q wasm32-wasip1 || rustup target add wasm32-wasip1

venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

build: toolchain
	$(CARGO) build --release -p edgescore-compile

demo: build
	@bash models/demo.sh $(EDGESCORE)

test: toolchain venv
	$(CARGO) build -p edgescore-compile
	$(CARGO) test --workspace
	EDGESCORE_BIN=$(CURDIR)/$(EDGESCORE_DEBUG) $(PY) -m pytest -q tests

# Regenerate the committed parity fixtures and reference models with the real libraries.
fixtures: venv
	$(PY) tests/gen_fixtures.py
reference: venv
	$(PY) models/train_reference.py

bench: toolchain venv
	$(CARGO) bench -p edgescore-benches
	$(MAKE) bench-peers
bench-peers: toolchain venv
	$(CARGO) build --release -p edgescore-benches --bin peer-native
	$(PY) benches/peers/run.py

fuzz:
	cd fuzz && $(CARGO) +nightly fuzz run artifact -- -max_total_time=$${SECONDS_TO_FUZZ:-300}

clean:
	$(CARGO) clean
	rm -rf $(VENV)
