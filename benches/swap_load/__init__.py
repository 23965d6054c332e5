"""Model updates under load: registry swaps vs inline-config pushes through a real Envoy (README.md)."""
