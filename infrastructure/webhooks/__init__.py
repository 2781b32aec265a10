"""Webhook adapters: the SQL store of webhooks and deliveries, the HTTP sender, the loop."""
