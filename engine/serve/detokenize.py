"""Incremental detokenizing for streams (vLLM's ``detokenize_incrementally``): each step decodes a short window of
recent tokens, never the whole output again, so a long stream costs the same per chunk at its end as at its start.

The window starts a step back (``prefix``), because a token's text can depend on the token before it (a leading
space, a byte-level character split across tokens); the delta is what the window adds beyond the text of its first
part. A window that ends inside a character (U+FFFD at the end) waits for the next tokens.
"""

from __future__ import annotations


class Detokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # the window's start: the tokens before it are already text
        self.read = 0  # the tokens up to here were sent as text
        self.sent = ""  # every delta so far, joined

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, new: list[int]) -> str:
        """The text ``new`` adds to the stream ("" while a character is still incomplete)."""
        self.ids += new
        before = self._text(self.ids[self.prefix : self.read])
        text = self._text(self.ids[self.prefix :])
        if len(text) <= len(before) or text.endswith("\ufffd"):
            return ""
        delta = text[len(before) :]
        self.prefix, self.read = self.read, len(self.ids)
        self.sent += delta
        return delta

    def tail(self, full: str) -> str:
        """At the end: what of the whole output's text was not sent yet (held back characters, mostly)."""
        return full[len(self.sent) :] if full.startswith(self.sent) else ""


class StopStrings:
    """A request's stop strings, checked on the loop's thread after each emitted token (the core's ``StopCheck``):
    a short window of the newest tokens is decoded, long enough to hold any stop string that ends in the newest
    token, so the check costs the same at every length."""

    def __init__(self, tokenizer, stops: list[str], keep: bool = False):
        self.tokenizer, self.stops, self.keep = tokenizer, list(stops), keep
        self.window = max(len(s) for s in self.stops) + 4  # tokens: one character at least each, and byte pieces

    def __call__(self, output_ids: list[int]) -> str | None:
        text = self.tokenizer.decode(output_ids[-self.window :], skip_special_tokens=True)
        return next((s for s in self.stops if s in text), None)

    @property
    def holdback(self) -> int:
        """Characters a stream holds back until it is sure they do not begin a stop string."""
        return max(len(s) for s in self.stops) - 1

    def cut(self, text: str) -> str:
        """The output's text up to the first stop string (kept when ``keep``: vLLM's include_stop_str_in_output)."""
        hits = [(i, s) for s in self.stops if (i := text.find(s)) >= 0]
        if not hits:
            return text
        i, s = min(hits)
        return text[: i + len(s)] if self.keep else text[:i]
