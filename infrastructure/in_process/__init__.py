"""Single-process mode (no Redis): lease, worker registry and signals in memory."""
