"""Phoenix engine: speculative decoding, greedy or sampled exactly in distribution, with full acceptance accounting.

The shared vocabulary sits at the top, named once: modes and their drafters (`modes`), dataclass configs to CLI
flags (`config`), file locations (`paths`), the models known by name (`catalog`), `PhoenixError` (`errors`), and
where a figure was measured: the CPU, versions and commit every run stores (`provenance`).
"""

import os as _os


def _tune_blas_for_amd() -> None:
    # MKL picks a slow generic path for small GEMMs on AMD CPUs; multi-token
    # verification measured 1.7x cheaper with the AVX2 code path pinned. Must be
    # set before torch (and so MKL) is first imported. Intel CPUs are left alone.
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            amd = "AuthenticAMD" in f.read(4096)
    except OSError:
        return
    if amd:
        _os.environ.setdefault("MKL_CBWR", "AVX2")


_tune_blas_for_amd()
_os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may reach a hub at run time
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
