"""`python -m engine ...`: a thin layer over the library functions, one module per command group; flags come from the
config dataclasses, and `reference` writes docs/cli.md and the package maps from the code.

Each command's flags come from its config dataclass (engine.config); errors the user can fix are one line and exit
status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from db.entities import StoreError
from engine.cli import decode, engines, imports, jobs, queue, runs, serving, tracker
from engine.cli.examples import describe
from engine.errors import PhoenixError


class OneLineParser(argparse.ArgumentParser):
    """Argparse errors as one line and a hint, like every other error, not the whole usage block."""

    def error(self, message: str):
        self.exit(2, f"error: {message}; see `{self.prog} --help`\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m engine", description="Phoenix speculative-decoding engine")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (decode, runs, queue, jobs, engines, serving, tracker, imports):
        group.add_commands(sub)
    describe(sub)
    return parser


def check_text_args(argv: list[str]) -> None:
    """Every argument is text. Linux hands bytes that are not UTF-8 to Python as lone surrogates, which would
    fail later, mid-write, as a traceback; the one place that reads argv refuses them up front."""
    for i, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise PhoenixError(
                f"argument {i} ({arg.encode('utf-8', 'replace').decode()!r}) is not valid UTF-8 text; pass it in UTF-8"
            ) from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        check_text_args(argv)
        if serving.moved(argv):
            raise PhoenixError(serving.moved(argv) or "")
    except PhoenixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    args, extras = build_parser().parse_known_args(argv)
    if extras:  # the command's own help says what it takes: `bench --bogus` once pointed at `engine --help`
        words = [args.command] + [v for k, v in sorted(vars(args).items()) if k.endswith("_command") and v]
        print(f"error: unrecognized arguments: {' '.join(extras)}; see `python -m engine {' '.join(words)} --help`",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        return args.func(args)
    except (PhoenixError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `runs | head -1`: the reader left; end quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not raise again
        return 0
