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


def add_options(parser, cls, help_text: dict[str, str] | None = None) -> None:
    """One --flag per dataclass field, so the CLI cannot drift from the config."""
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        text = (help_text or {}).get(f.name, f"default {f.default!r}")
        if f.type in (bool, "bool"):
            parser.add_argument(flag, action="store_true", help=text)
        else:
            parser.add_argument(flag, default=None, metavar=f.name.upper(), help=text)


def from_args(cls: type[T], args) -> T:
    """The dataclass from add_options' flags: only the given ones, typed, unknown keys impossible."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        v = getattr(args, f.name)
        kind = str(f.type)
        if f.type in (bool, "bool"):
            if v:
                values[f.name] = True
            continue
        if v is None:
            continue
        try:
            if "None" in kind and v.lower() == "none":
                values[f.name] = None
            elif "int" in kind:
                values[f.name] = int(v)
            elif "float" in kind:
                values[f.name] = float(v)
            else:
                values[f.name] = v
        except ValueError:
            raise PhoenixError(f"--{f.name.replace('_', '-')} expects a number, got {v!r}") from None
    return from_dict(cls, values)
