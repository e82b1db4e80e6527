"""A generated block's list of runs, as its marker writes it ("284-293,295-299"): one parser for every block."""

from __future__ import annotations


def run_ids(text: str) -> list[int]:
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out
