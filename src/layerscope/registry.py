"""``Registry``: every name → implementation table of layerscope (cost models, scheduling policies,
execution profiles, hardware loaders, config families, op types, trace readers) is one of these.

One lookup (:meth:`Registry.lookup`) and one error message: an unknown name raises the registry's own
typed error (a :class:`~layerscope.errors.LayerscopeError`), naming what was asked for and listing
the known names, so the CLI turns it into exit code 2 with the choices in the message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar, overload

from layerscope.errors import LayerscopeError

T = TypeVar("T")

__all__ = ["Registry"]


class Registry(Mapping[str, T], Generic[T]):
    """Named implementations of one kind of thing, in registration order.

    It reads as a mapping (``name in registry``, ``registry[name]``, ``.items()``; ``[]`` raises
    ``KeyError`` as a dict does); :meth:`lookup` is the one checked lookup that callers taking a
    user's name use. ``kind`` is what one entry is called in messages ("cost model", "policy")."""

    def __init__(self, kind: str, error: type[LayerscopeError], entries: Mapping[str, T] | None = None) -> None:
        self.kind = kind
        self.error = error
        self._entries: dict[str, T] = {}
        for name, entry in (entries or {}).items():
            self.add(name, entry)

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name``; a name registered twice is a programming error."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind}: a registered name must be a non-empty string, not {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, entry: T) -> T: ...

    def register(self, name: str, entry: T | None = None) -> T | Callable[[T], T]:
        """``registry.register("name", entry)``, or as a decorator: ``@registry.register("name")``."""
        if entry is not None:
            return self.add(name, entry)

        def decorate(item: T) -> T:
            return self.add(name, item)

        return decorate

    def lookup(self, name: str) -> T:
        """The entry registered as ``name``; otherwise the registry's error, listing the known names."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.error(self.unknown_message(name)) from None

    def unknown_message(self, name: object) -> str:
        """``unknown <kind> 'name'; known: a, b, c`` (the one wording of every registry)."""
        return f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}"

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
