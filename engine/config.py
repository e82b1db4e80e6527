"""One flat dataclass per concern; unknown keys are errors (nanoGPT style)."""
from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from engine.errors import PhoenixError

T = TypeVar("T")


def from_dict(cls: type[T], values: dict[str, Any]) -> T:
    """Build ``cls`` from ``values``; a key the dataclass does not name is refused."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise PhoenixError(f"unknown {cls.__name__} key(s): {', '.join(unknown)}; valid keys: {', '.join(sorted(names))}")
    return cls(**values)


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)
