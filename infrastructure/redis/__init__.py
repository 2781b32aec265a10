"""Redis adapters: one shared client, the lease, the worker registry, the signals."""
