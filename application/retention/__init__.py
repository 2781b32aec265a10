"""Retention: data that expires, swept on a schedule, each expiry recorded in the log."""
