"""EAGLE-3 in one place: the head (one Llama layer over three target taps), its checkpoint in vLLM's format, and the
drafter that runs it in Phoenix's loop. Training it is engine.train.eagle3.
"""

from engine.decode.eagle3.checkpoint import WEIGHTS, is_head_dir, load_head, save_head, vocab_maps
from engine.decode.eagle3.drafter import Eagle3Drafter
from engine.decode.eagle3.head import ARCHITECTURE, Eagle3Head, HeadCache, HeadConfig, default_taps, head_config_for

__all__ = [
    "ARCHITECTURE",
    "WEIGHTS",
    "Eagle3Drafter",
    "Eagle3Head",
    "HeadCache",
    "HeadConfig",
    "default_taps",
    "head_config_for",
    "is_head_dir",
    "load_head",
    "save_head",
    "vocab_maps",
]
