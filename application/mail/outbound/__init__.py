"""Sending mail: the outbox's handlers and queries, composing a message, and the
delivery service the workers run (one attempt at a time per message across the fleet)."""
