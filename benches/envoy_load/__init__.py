"""wrk against a real Envoy: no filter, edgescore, a no-op Wasm filter (README.md)."""
