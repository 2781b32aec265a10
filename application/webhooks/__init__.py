"""Webhooks: endpoints that receive the change feed, signed, in order, with retries."""
