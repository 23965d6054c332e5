"""Benchmarks: run each as a module from the repository root (`python -m benches.envoy_load.run`)."""
