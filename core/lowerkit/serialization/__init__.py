"""The file format (stub)."""

from __future__ import annotations


def dumps(obj) -> bytes:
    raise NotImplementedError


def loads(data: bytes, *, fallback=None):
    raise NotImplementedError


def save(obj, path) -> None:
    raise NotImplementedError


def load(path, *, fallback=None):
    raise NotImplementedError
