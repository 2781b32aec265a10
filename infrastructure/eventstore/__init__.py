"""The event store: eventsourcing's recorders, the event codec, JSONL export/import."""
