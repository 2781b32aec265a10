"""The HTTP API: an ASGI adapter beside the CLI that turns requests into App calls."""
