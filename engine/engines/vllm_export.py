"""Phoenix's EAGLE-3 head in vLLM's own format, converted and validated by vLLM's `speculators` library (PyPI) in
vLLM's venv rather than by checks written here.

Phoenix writes its head as the EAGLE-3 reference code does (``LlamaForCausalLMEagle3``: ``midlayer.*``, ``d2t``
offsets, a ``t2d`` mask, the tapped layers in ``eagle_config``), which vLLM loads as it is. `speculators` converts
that layout to a speculators checkpoint (``Eagle3Speculator``: its config names the verifier, the algorithm and the
tapped layers), then loads the result against the verifier; a head it cannot convert or load is refused with its
reason in one line. The converted folder serves with `vllm start --method eagle3 --draft <folder>`, and vLLM's own
`vllm serve <folder>` finds the verifier in it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from engine.engines import vllm
from engine.errors import PhoenixError
from engine.paths import CARD, DATA_DIR, check_ours

CONVERT = (  # run in vLLM's venv: speculators pins the transformers vLLM has, not Phoenix's
    "import sys\n"
    "from speculators.convert.eagle.eagle3_converter import Eagle3Converter\n"
    "head, out, verifier, layers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]\n"
    "ids = [int(x) for x in layers.split(',')] if layers else None\n"
    "Eagle3Converter().convert(head, out, verifier, validate=True, eagle_aux_hidden_state_layer_ids=ids)\n"
)


def tapped_layers(head: Path) -> list[int]:
    """The target layers the head reads, as its config names them (EAGLE-3's eagle_config)."""
    try:
        config = json.loads((head / "config.json").read_text())
    except (OSError, ValueError):
        raise PhoenixError(f"--head {head}: its config.json is unreadable") from None
    ids = ((config if isinstance(config, dict) else {}).get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids"
    )
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise PhoenixError(f"--head {head}: no eagle_config.eagle_aux_hidden_state_layer_ids in its config.json")
    return ids


def export(head: str, target: str, out: str = "", say=print) -> Path:
    """Convert and validate; returns the speculators folder (default data/vllm/<head>-speculators)."""
    if not vllm.installed():
        raise PhoenixError(f"speculators runs in vLLM's venv: run `{vllm.INSTALL}` first")
    head_dir = vllm.model_dir(head, "draft", "--head")
    target_dir = vllm.model_dir(target, "target", "--target")
    dest = Path(out) if out else DATA_DIR / "vllm" / f"{head_dir.name}-speculators"
    check_ours(dest, "--out")  # never over a folder Phoenix did not write
    layers = ",".join(map(str, tapped_layers(head_dir)))
    argv = [str(vllm.python_of()), "-c", CONVERT, str(head_dir), str(dest), str(target_dir), layers]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=vllm.offline_env())
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else "")
        raise PhoenixError(f"speculators refused the head {head_dir}: {why[:240] or 'no output'}")
    card = {"source": str(head_dir), "verifier": str(target_dir), "converted_by": "speculators 0.9.0"}
    (dest / CARD).write_text(json.dumps(card, indent=1))
    say(f"{head_dir} converted and validated by speculators: {dest}")
    return dest
