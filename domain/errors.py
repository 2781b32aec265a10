"""The domain's error hierarchy: guard methods raise these, handlers translate them."""


class DomainError(Exception):
    """Base class of every rule the domain enforces."""
