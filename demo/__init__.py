"""What `make demo` runs, as a package: `python -m demo.run` (the whole system) and its traffic
(`python -m demo.traffic`). What it shares with the tests and benches (Envoy, the backend, the
registry, the configuration) is in harness/."""
