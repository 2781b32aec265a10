"""Deterministic stream ids: the same name always maps to the same stream, so two
writers creating "the same thing" collide in the store instead of duplicating it."""

from uuid import UUID, uuid5

NAMESPACE = UUID("6b1f7a52-6d0c-4d52-9a55-3f0f3e1c9b7e")


def stream_id(kind: str, *parts: str) -> UUID:
    # Parts are joined with a separator that no validated key or tenant id contains.
    return uuid5(NAMESPACE, "\x1f".join((kind, *parts)))
