"""Errors that adapters raise through the application's ports."""


class ApplicationError(Exception):
    """Base class of the application layer's errors."""


class ConcurrencyConflict(ApplicationError):
    """Another writer appended to one of the streams first."""


class StaleRead(ConcurrencyConflict):
    """A stream the caller decided on (without writing to it) has moved on since it was
    read: nothing is written, the caller decides again on fresh state."""


class StoreUnavailable(ApplicationError):
    """The event store or read-model database cannot be reached right now."""


class EventNotStorable(ApplicationError, ValueError):
    """An event holds a value the store cannot give back exactly (an integer past 64
    bits, a non-finite float, a lone surrogate…): nothing is written."""


class UnreadableEvent(ApplicationError, ValueError):
    """A stored event cannot be decoded into its class (written by an older, looser
    encoder, or imported): the projections quarantine it; a stream holding it cannot
    be loaded."""
