"""Named registries: how a probe, a checkpoint source, an executor, a per-checkpoint stage, a finding
or a report figure is found from the name a panel file, a CLI option or a finding's code gives.
Adding one is registering it; nothing that chooses among them needs editing (docs/architecture.md)."""

from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterator, TypeVar

from headtrace.errors import HeadtraceError

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries of one kind by name, in the order they were registered."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register `entry` under `name` (a later registration under the same name replaces it)."""
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""
        return lambda entry: self.add(name, entry)

    def get(self, name: str) -> T:
        """The entry for `name`; an unknown name is a one-line error listing the known ones."""
        if name not in self._entries:
            hint = difflib.get_close_matches(name, list(self._entries), n=1)
            raise HeadtraceError(
                f"unknown {self.kind} '{name}'; "
                + (f"did you mean '{hint[0]}'?" if hint else f"use {' or '.join(self._entries)}")
            )
        return self._entries[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)
