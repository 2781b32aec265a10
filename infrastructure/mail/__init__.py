"""Mail content adapters: MIME parsing for ingestion."""
