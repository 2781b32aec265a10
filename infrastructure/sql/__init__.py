"""The read-model database (SQLite or PostgreSQL) and the mailbox state on it."""
