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
