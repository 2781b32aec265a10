"""API keys: create and revoke them (use cases), and turn a presented key into a User."""
