"""Errors that adapters raise through the application's ports."""


class ApplicationError(Exception):
    """Base class of the application layer's errors."""


class ConcurrencyConflict(ApplicationError):
    """Another writer appended to one of the streams first."""


class StoreUnavailable(ApplicationError):
    """The event store or read-model database cannot be reached right now."""
