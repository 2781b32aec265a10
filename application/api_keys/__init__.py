"""API keys: create, list and revoke them (use cases), turn a presented key into a User,
and the port of their last use."""
