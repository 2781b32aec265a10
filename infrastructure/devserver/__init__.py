"""A private Dovecot on loopback for the demo, the tests and the benchmarks (not an adapter)."""
