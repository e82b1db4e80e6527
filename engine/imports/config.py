"""`import`'s settings: a plain dataclass, no pandas or torch, so the command line answers --help at once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ImportConfig:
    format: str = "auto"  # auto | vllm-bench | sglang-bench | guidellm | aiperf | lm-eval | prometheus (/metrics)
    engine: str = ""  # the server the tool measured (vllm, sglang, phoenix, ...), where the file does not say
    model: str = ""  # the model it served, where the file does not say (default: the file's model id)
    variant: str = "as-served"  # the server's setting, in Phoenix's grammar (none, eagle3-k3, ngram-k4, ...)
    hardware: str = ""  # what it ran on ("8x H100"): labels the runs, which are never ranked against other hardware
    price_per_hour: float = 0.0  # the hardware's price in USD an hour (0: not given): each level's cost per 1k tokens
    name: str = ""  # the runs' name (each level's load is appended); default: the tool and the file
