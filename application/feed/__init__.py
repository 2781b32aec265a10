"""The change feed: every tenant's ordered, replayable stream of public integration events."""
