"""What the demo, the tests and the benches share to run the system on loopback: Envoy
(`envoyctl`, its configuration `render_envoy`), the recording backend (`backend`), the signed
model registry (`registry`), exact-header HTTP (`client`), free ports and silent servers
(`loopback`), a started Envoy's test handle (`running`), test requirements and seeds
(`require`), Prometheus, a scripted NLP service, a Ray cluster and the guides' shell sessions;
and the licence list of the shipped crates (`licenses`).

Every server here binds 127.0.0.1; whoever starts a process stops it by PID.
"""
