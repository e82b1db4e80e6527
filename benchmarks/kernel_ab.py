"""The decode extension as it is against the same source at another commit, step by step (issue 66): one verify
pass of B rows, one token each, over cached contexts of ragged lengths (built as benchmarks.profile_step builds
them: each row joins the batch as the server's do, so a short row keeps a masked stretch as wide as the widest),
the two builds alternating round by round in one process; each one's median step and their ratio. Run it on a
quiet machine.

    python -m benchmarks.kernel_ab [--against HEAD] [--target smollm2] [--rows 1,4,8,16] [--contexts 150-450]
        [--cut N]  (each build's GEMM cut set to N tokens instead of measured)
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import subprocess
import tempfile
from pathlib import Path

from torch.utils.cpp_extension import load

import engine  # noqa: F401
from benchmarks.profile_step import rows_cache, step_s
from engine.decode import fast_attention
from engine.decode.cuts import measure_cut
from engine.decode.loading import load_pair, prepare


def build_at(rev: str):
    """The extension built from the kernels' sources at ``rev`` (every file of the folder: the .cpp includes its
    headers), a module apart from the working tree's."""
    folder = fast_attention.SOURCE.parent.resolve().relative_to(Path(engine.__file__).resolve().parents[1])
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{rev}:{folder}"], capture_output=True, check=True)
    out, code = Path(tempfile.mkdtemp()), b""
    for name in sorted(names.stdout.decode().split()):
        text = subprocess.run(["git", "show", f"{rev}:{folder}/{name}"], capture_output=True, check=True).stdout
        (out / name).write_bytes(text)
        code += text
    tag = hashlib.sha256(code).hexdigest()[:12]
    source = str(out / fast_attention.SOURCE.name)
    return load(name=f"phoenix_decode_attention_ab_{tag}", sources=[source], extra_cflags=list(fast_attention.FLAGS))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", default="HEAD")
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--rows", default="1,4,8,16")
    ap.add_argument("--contexts", default="150-450")
    ap.add_argument("--rounds", type=int, default=4)
    # one cut for both builds: a change to attention alone, timed without the cut's own noise (a disturbed host's
    # measured cut flapped between 0 and 16 tokens from one run to the next for the 1.5B)
    ap.add_argument("--cut", type=int, default=None)
    args = ap.parse_args()
    target = prepare(load_pair(args.target, None, "cpu", "bfloat16"), runner="auto").target
    builds = {"tree": fast_attention.extension(), args.against: build_at(args.against)}
    if builds["tree"] is None:
        raise SystemExit(fast_attention.describe())
    cuts = {}  # each build's own GEMM cut, measured as the server measures it (engine.decode.cuts)
    for name, module in builds.items():
        fast_attention._state["module"] = module
        cut = measure_cut(target)
        if args.cut is not None:
            fast_attention._cuts = {shape: args.cut for shape in fast_attention._cuts}
            cut = args.cut
        cuts[name] = (cut, dict(fast_attention._cuts))
    print("cuts: " + ", ".join(f"{n} up to {c[0]} tokens" for n, c in cuts.items()))
    print(f"{args.target} bf16, ragged rows; the working tree's extension against {args.against}'s")
    for span in args.contexts.split(","):
        lo, hi = map(int, span.split("-"))
        for b in map(int, args.rows.split(",")):
            rng = random.Random(b)
            batch = rows_cache(target, [rng.randint(lo, hi) for _ in range(b)])  # in arrival order, as served
            steps: dict[str, list[float]] = {name: [] for name in builds}
            for turn in range(args.rounds):
                order = list(builds) if turn % 2 == 0 else list(builds)[::-1]
                for name in order:
                    fast_attention._state["module"], fast_attention._cuts = builds[name], cuts[name][1]
                    step_s(target, batch, 2)
                    steps[name].append(statistics.median(step_s(target, batch, 10)))
            tree, old = (statistics.median(steps[n]) for n in builds)
            spread = " ".join(f"{n} {min(v) * 1e3:.2f}-{max(v) * 1e3:.2f}" for n, v in steps.items())
            print(f"contexts {span} rows {b:2d}: tree {tree * 1e3:.2f} ms, {args.against} {old * 1e3:.2f} ms, "
                  f"{tree / old:.3f}x ({spread})")  # fmt: skip
    fast_attention._state["module"], fast_attention._cuts = builds["tree"], cuts["tree"][1]


if __name__ == "__main__":
    main()
