"""Blob store adapters: raw MIME and other large payloads, content-addressed."""
