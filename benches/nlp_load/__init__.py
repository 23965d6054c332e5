"""The NLP service under load, directly and through Envoy (README.md)."""
