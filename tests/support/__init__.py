"""Helpers shared by integration and e2e tests (never imported by the product)."""
