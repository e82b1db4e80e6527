"""What a load sweep sends beyond the prompt itself: a shared system prompt before every prompt (a deployment's,
for a server's prefix cache), optionally one per tenant (``--tenants N``: N deployments whose system prompts differ
from their first token, each prompt always its tenant's, as a router sees several customers' prefixes), and sampling
with one seed per prompt, the same in every variant."""

from __future__ import annotations

import functools
import hashlib
from typing import Protocol

from engine.errors import PhoenixError
from engine.prompts.sets import Prompt


class Sweep(Protocol):
    """What of a load sweep's config this reads (engine.engines.load.LoadConfig)."""

    temperature: float
    seed: int
    system_prompt: str
    tenants: int
    chat: bool


MAX_SYSTEM = 64 << 10  # bytes of a --system-prompt file


@functools.cache
def system_text(path: str) -> str:
    """The --system-prompt file's text: read once, at most 64 kB of UTF-8."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SYSTEM + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PhoenixError(f"--system-prompt {path}: cannot read it ({exc})", field="system_prompt") from None
    if len(data) > MAX_SYSTEM or not text.strip():
        raise PhoenixError(f"--system-prompt {path}: must hold some text, at most {MAX_SYSTEM} bytes", "system_prompt")
    return text


def as_sent(cfg: Sweep, prompt: Prompt, extra: dict | None) -> tuple[str, dict | None]:
    """One prompt's text and extra fields as sent: sampled with its own seed under --temperature (the same in every
    variant, so a variant's output is compared with speculation off token for token), and with the system
    prompt."""
    if cfg.temperature > 0:
        seed = int.from_bytes(hashlib.sha256(f"{cfg.seed}:{prompt.id}".encode()).digest()[:8]) >> 1
        extra = (extra or {}) | {"temperature": cfg.temperature, "seed": seed}
    return with_system(cfg, prompt.text, extra, tenant_of(cfg, prompt.id))


def tenant_of(cfg: Sweep, prompt_id: str) -> int:
    """The tenant a prompt belongs to (0 with one tenant): by a hash of its id, so the same in every variant."""
    if cfg.tenants <= 1:
        return 0
    return int.from_bytes(hashlib.sha256(f"tenant:{prompt_id}".encode()).digest()[:4]) % cfg.tenants


def with_system(cfg: Sweep, text: str, extra: dict | None, tenant: int = 0) -> tuple[str, dict | None]:
    """One prompt as sent under --system-prompt: a system message before it (chat), or the text before it (raw);
    with several tenants, each tenant's system prompt starts with its own line, so no two share a first block."""
    if not cfg.system_prompt:
        return text, extra
    system = system_text(cfg.system_prompt)
    if cfg.tenants > 1:
        system = f"You serve deployment {tenant + 1} of {cfg.tenants}.\n{system}"
    if not cfg.chat:
        return f"{system}\n\n{text}", extra
    messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
    return text, (extra or {}) | {"messages": messages}
