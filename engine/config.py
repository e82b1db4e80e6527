"""One flat dataclass per concern (nanoGPT style), and the one path from it to the CLI.

Every command's flags come from its dataclass: one ``--flag`` per field, help from
the field's trailing comment (continued inside its parentheses when long), values typed from its
annotation, unknown keys refused.
A nested dataclass field (``fallback: FallbackConfig``) becomes ``--fallback-<field>``
flags, with its ``enabled`` field as plain ``--fallback``. ``field(metadata={"flag":
"--poll"})`` keeps an established flag name.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import math
import os
import textwrap
import tokenize
import types
import typing
from typing import Any, TypeVar

from engine.errors import PhoenixError
from engine.paths import ROOT

T = TypeVar("T")


def from_dict(cls: type[T], values: dict[str, Any]) -> T:
    """Build ``cls`` from ``values``; a key the dataclass does not name is refused."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # T is always a dataclass here
    unknown = sorted(set(values) - names)
    if unknown:
        raise PhoenixError(
            f"unknown {cls.__name__} key(s): {', '.join(unknown)}; valid keys: {', '.join(sorted(names))}"
        )
    built = {
        k: from_dict(hints[k], v) if _is_config(hints[k]) and isinstance(v, dict) else v for k, v in values.items()
    }
    return cls(**built)


def _is_config(tp) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def field_help(cls) -> dict[str, str]:
    """Each field's comment, searched through the class and its bases: every comment inside the field's statement
    (a trailing ``# comment``, or the comment lines of a statement the formatter wrapped in parentheses)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        out.update(_comments_of_fields(source))
    return out


def _comments_of_fields(source: str) -> dict[str, str]:
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    out: dict[str, str] = {}
    lines = source.splitlines()
    body = ast.parse(source).body[0]
    for stmt in getattr(body, "body", []):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        end = stmt.end_lineno or stmt.lineno
        while end + 1 in comments and lines[end].lstrip().startswith("#"):  # comment lines that carry on below it
            end += 1
        text = " ".join(comments[n] for n in range(stmt.lineno, end + 1) if n in comments)
        if text:
            out[stmt.target.id] = text
    return out


def _flag(f: dataclasses.Field, prefix: str) -> str:
    if "flag" in f.metadata:
        return f.metadata["flag"]
    if prefix and f.name == "enabled":
        return "--" + prefix
    return "--" + "-".join(p for p in (prefix, f.name.replace("_", "-")) if p)


def _dest(f: dataclasses.Field, prefix: str) -> str:
    return "__".join(p for p in (prefix.replace("-", "_"), f.name) if p)


def _default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def add_options(parser, cls, prefix: str = "") -> None:
    """One --flag per dataclass field, so the CLI cannot drift from the config."""
    hints = typing.get_type_hints(cls)
    helps = field_help(cls)
    for f in dataclasses.fields(cls):
        tp, flag, dest = hints[f.name], _flag(f, prefix), _dest(f, prefix)
        if _is_config(tp):
            add_options(parser, tp, prefix=f.name.replace("_", "-") if not prefix else f"{prefix}-{f.name}")
            continue
        default = _default(f)
        text = helps.get(f.name, "")
        shown = _shown(default)
        text = (f"{text} (default {shown!r})" if text else f"default {shown!r}").replace("%", "%%")
        if typing.get_origin(tp) is typing.Literal:
            parser.add_argument(flag, dest=dest, default=None, choices=typing.get_args(tp), help=text)
        elif tp is bool and default is True:  # the flag turns it off: say so, not "(default True)" beside --no-X
            no = "--no-" + flag.removeprefix("--")
            off = f"turns this off (on by default): {helps[f.name]}" if helps.get(f.name) else "turns this off"
            parser.add_argument(
                no, dest=dest, action="store_const", const=False, default=None, help=off.replace("%", "%%")
            )
        elif tp is bool:
            parser.add_argument(flag, dest=dest, action="store_const", const=True, default=None, help=text)
        else:
            names = [flag, *f.metadata.get("aliases", ())]  # an old flag name kept working after a rename
            parser.add_argument(*names, dest=dest, default=None, metavar=f.name.upper(), help=text)


def _shown(default):
    """A default inside the checkout is shown relative to it, so help (and docs/cli.md) reads the same anywhere."""
    root = str(ROOT)
    if isinstance(default, (str, os.PathLike)) and str(default).startswith(root + os.sep):
        return os.path.join(".", os.path.relpath(str(default), root))
    return default


def from_args(cls: type[T], args, prefix: str = "") -> T:
    """The dataclass from add_options' flags: only the given ones change a default."""
    return from_dict(cls, given_values(cls, args, prefix))


def given_values(cls, args, prefix: str = "") -> dict[str, Any]:
    """Only the flags the user gave, typed; nested configs as dicts."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if _is_config(tp):
            sub = given_values(tp, args, f.name if not prefix else f"{prefix}_{f.name}")
            if sub:
                values[f.name] = sub
            continue
        raw = getattr(args, _dest(f, prefix), None)
        if raw is not None:
            values[f.name] = raw if tp is bool else parse_value(tp, raw, _flag(f, prefix.replace("_", "-")))
    return values


def check_choices(cfg, prefix: str = "") -> None:
    """Every ``Literal`` field of ``cfg`` (nested configs too) holds one of its choices. argparse already refuses a
    bad flag; this catches the same mistake in a form, a stored config or a Python caller."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        tp, value = hints[f.name], getattr(cfg, f.name)
        if _is_config(tp):
            check_choices(value, f"{prefix}{f.name}.")
        elif typing.get_origin(tp) is typing.Literal and value not in typing.get_args(tp):
            flag = _flag(f, prefix.rstrip(".").replace("_", "-"))
            raise PhoenixError(
                f"{flag} must be one of {', '.join(map(str, typing.get_args(tp)))}, got {value!r}",
                field=prefix + f.name,
            )


def parse_value(tp, text: str, flag: str):
    """One flag's text as its field's type; a bad value names the flag."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if type(None) in args and text.strip().lower() in ("none", ""):
            return None
        tp = next(a for a in args if a is not type(None))
        args = typing.get_args(tp)
    if typing.get_origin(tp) in (list, tuple):
        item = args[0] if args else str
        parts = [p.strip() for p in text.split(",") if p.strip()]
        try:
            return [item(p) for p in parts]
        except ValueError:
            kind = "whole numbers" if item is int else "numbers"
            raise PhoenixError(f"{flag} must be comma-separated {kind}, got {text!r}", field=_field_of(flag)) from None
    if tp in (int, float):
        try:
            value = tp(text)
        except ValueError:
            raise PhoenixError(f"{flag} expects a number, got {text!r}", field=_field_of(flag)) from None
        if tp is float and not math.isfinite(value):  # no setting here means anything at infinity or NaN
            raise PhoenixError(f"{flag} must be a finite number, got {text!r}", field=_field_of(flag))
        return value
    return text


def _field_of(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")
