"""Use cases about a tenant as a whole."""
