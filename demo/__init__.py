"""What `make demo` runs, as a package: `python -m demo.run` (the whole system), `python -m
demo.render_envoy`, and the modules the tests and benches import (`envoyctl`, `render_envoy`,
`traffic`, `backend`, `loopback`). `backend.py` also runs on its own (the compose file mounts it)."""
