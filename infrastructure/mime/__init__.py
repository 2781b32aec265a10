"""MIME adapters: reading raw mail into the parsed message the ingestion port takes."""
