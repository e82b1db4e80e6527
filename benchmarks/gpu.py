"""GPU check, for the accelerator machine when one is lent (never needed elsewhere).

1. Random-init Qwen3-1.7B (target) and Qwen3-0.6B (draft) configs in bf16: no
   weights are needed to time them. On a cache holding a prompt, time one draft
   step and target passes over 1..9 tokens, so c = draft step / target step and
   the verify cost of k+1 tokens in target steps are measured, not assumed; then
   the break-even predictions at a in {0.6, 0.7, 0.8}.
2. With ``--compile``: the same target passes on a static cache with the forward compiled (``reduce-overhead``:
   CUDA graphs), in bf16 and fp16, against eager; compile time and recompiles recorded.
3. The embedded pair's full decode benchmark on the same GPU (eager, and compiled with ``--compile``), each a run.

    python -m benchmarks.gpu [--skip-decode] [--compile]   # on the device machine
    python -m benchmarks.gpu --tiny --device cpu  # the CI smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import engine  # noqa: F401
from benchmarks.common import write
from engine.analysis.breakeven import expected_tokens

QWEN3 = {  # architecture hyperparameters of the published configs (no weights, no hub)
    "Qwen/Qwen3-1.7B": dict(
        hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8
    ),
    "Qwen/Qwen3-0.6B": dict(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8
    ),
}
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def build(name: str, tiny: bool, device: str, dtype):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shape = TINY if tiny else QWEN3[name]
    cfg = Qwen3Config(
        vocab_size=151936 if not tiny else 512,
        head_dim=128 if not tiny else 16,
        tie_word_embeddings=True,
        max_position_embeddings=40960,
        rope_theta=1_000_000.0,
        **shape,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg)
    return model.to(dtype).eval()


def time_pass(model, prompt_len: int, n_tokens: int, reps: int, device: str, cache=None) -> float:
    """Median seconds of one forward over n_tokens on a cache of prompt_len, cropped back after each (a growing
    cache unless ``cache`` is given: an empty static one)."""
    import torch
    from transformers import DynamicCache

    from engine.decode.spec import sync

    dev = torch.device(device)
    vocab = model.config.vocab_size
    cache = cache if cache is not None else DynamicCache(config=model.config)
    times = []
    with torch.inference_mode():  # ids made here too: a tensor from outside inference mode is another guard
        ids = torch.randint(0, vocab, (1, prompt_len), device=dev, generator=torch.Generator(device=dev).manual_seed(1))
        new = torch.randint(0, vocab, (1, n_tokens), device=dev, generator=torch.Generator(device=dev).manual_seed(2))
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        for i in range(reps + 3):
            sync(dev)
            t0 = time.perf_counter()
            model(input_ids=new, cache=cache, use_cache=True, logits_to_keep=n_tokens)
            sync(dev)
            if i >= 3:  # warm-up left out
                times.append(time.perf_counter() - t0)
            cache.crop(-n_tokens)  # negative: drop what this pass added
    return statistics.median(times)


def verify_costs(args, dtype) -> dict:
    target = build("Qwen/Qwen3-1.7B", args.tiny, args.device, dtype)
    draft = build("Qwen/Qwen3-0.6B", args.tiny, args.device, dtype)
    t = {n: time_pass(target, args.prompt_len, n, args.reps, args.device) for n in range(1, 10)}
    d1 = time_pass(draft, args.prompt_len, 1, args.reps, args.device)
    c = d1 / t[1]
    predictions = {}
    for a in (0.6, 0.7, 0.8):
        rows = {}
        for k in range(1, 9):
            simple = expected_tokens(a, k) / (1 + c * k)
            measured_verify = expected_tokens(a, k) / (t[k + 1] / t[1] + c * k)
            rows[k] = {"model": simple, "with_measured_verify": measured_verify}
        best = max(rows, key=lambda k: rows[k]["with_measured_verify"])
        predictions[str(a)] = {"by_k": rows, "best_k": best, "best_speedup": rows[best]["with_measured_verify"]}
    del target, draft
    return {
        "target_pass_s": t,
        "draft_step_s": d1,
        "c": c,
        "verify_in_target_steps": {n: t[n] / t[1] for n in t},
        "predictions": predictions,
    }


def compiled_costs(args, dtype) -> dict:
    """Eager against compiled target passes of 1..9 tokens, on the same random Qwen3-1.7B-shaped target."""
    from engine.decode.compiled import StaticCaches, compile_models, graph_count

    target = build("Qwen/Qwen3-1.7B", args.tiny, args.device, dtype)
    caches, positions = StaticCaches(), args.prompt_len + 16
    eager = {n: time_pass(target, args.prompt_len, n, args.reps, args.device) for n in range(1, 10)}
    mode = "reduce-overhead" if args.device == "cuda" else None
    models, stats = compile_models([target], caches, 9, positions, mode=mode)
    before = graph_count()
    compiled = {
        n: time_pass(models[0], args.prompt_len, n, args.reps, args.device, caches.get(models[0], positions))
        for n in range(1, 10)
    }
    del target, models
    return {
        "dtype": str(dtype),
        "mode": mode,
        "compile": {**vars(stats), "recompiles": graph_count() - before},
        "eager_pass_s": eager,
        "compiled_pass_s": compiled,
        "speedup_step": eager[1] / compiled[1],
        "verify_in_steps_eager": {n: eager[n] / eager[1] for n in eager},
        "verify_in_steps_compiled": {n: compiled[n] / compiled[1] for n in compiled},
    }


def main(argv=None) -> dict:
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="tiny shapes, for the CPU smoke test")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--skip-decode", action="store_true")
    p.add_argument("--compile", action="store_true", help="also eager against compiled (CUDA graphs), bf16 and fp16")
    p.add_argument("--decode-limit", type=int, default=10)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: this script is for the GPU machine (or pass --tiny --device cpu)")
    if args.device == "cuda":
        gpu = torch.cuda.get_device_name(0)
    else:
        from benchmarks.common import provenance

        gpu = f"no GPU: CPU {provenance()['cpu']}" + (" (tiny smoke run)" if args.tiny else "")
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    result = {"settings": vars(args), "gpu": gpu, "dtype": str(dtype), "qwen3_random_init": verify_costs(args, dtype)}
    q = result["qwen3_random_init"]
    print(
        f"{gpu}: target step {q['target_pass_s'][1] * 1e3:.2f} ms, draft step {q['draft_step_s'] * 1e3:.2f} ms, "
        f"c = {q['c']:.3f}"
    )
    print("verify cost in target steps: " + ", ".join(f"{n}: {v:.2f}" for n, v in q["verify_in_target_steps"].items()))
    for a, pr in q["predictions"].items():
        print(f"a={a}: best k {pr['best_k']} -> {pr['best_speedup']:.2f}x (with measured verify cost)")
    if args.compile:
        dtypes = (torch.bfloat16, torch.float16) if args.device == "cuda" else (torch.float32,)
        result["compiled"] = [compiled_costs(args, d) for d in dtypes]
        for r in result["compiled"]:
            print(
                f"{r['dtype']}: compiled step {r['speedup_step']:.2f}x eager; verify(5) "
                f"{r['verify_in_steps_compiled'][5]:.2f} steps compiled, {r['verify_in_steps_eager'][5]:.2f} eager; "
                f"compile {r['compile']['warmup_s']:.0f} s, recompiles {r['compile']['recompiles']}"
            )
    if not args.skip_decode:
        import subprocess
        import sys

        # the decode comparison is a run like any other: recorded in the store, opened on the dashboard
        db = str(Path(args.out) / "gpu.db") if args.out else "data/gpu.db"
        cmd = [
            sys.executable,
            "-m",
            "engine",
            "bench",
            "--device",
            args.device,
            "--limit",
            str(args.decode_limit),
            "--max-new-tokens",
            "96",
            "--modes",
            "target,model_2,model_4,ngram_4,hf_4",
            "--name",
            "gpu decode",
            "--db",
            db,
        ]
        result["decode"] = {"command": " ".join(cmd), "returncode": subprocess.call(cmd)}
        if args.compile:
            cmd = cmd[:-4] + ["--compile", "--name", "gpu decode, compiled", "--db", db]
            result["decode_compiled"] = {"command": " ".join(cmd), "returncode": subprocess.call(cmd)}
    path = write("gpu", result, Path(args.out)) if args.out else write("gpu", result)
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
