"""Helpers the test modules share (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import tempfile
import time
from contextlib import closing, contextmanager
from pathlib import Path

from db import migrate
from db.entities import BanditRecord, PositionCount, RequestRecord
from db.store import Store
from engine.bench.config import BenchConfig
from engine.cli import main
from engine.decode.decoder import Decoder

ROOT = Path(__file__).resolve().parent.parent
_TEMPLATE: list[Path] = []  # one migrated SQLite file per test process, copied for every fresh database


def migrated(url: str) -> str:
    """A fresh SQLite database at head, copied from a template migrated once per process (a copy takes ~0.03 s
    against ~0.4 s through 17 revisions); any other URL, or a file that exists, is migrated for real.
    test_store keeps the migration-from-empty tests on both databases."""
    path = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    if path is None or path.exists():
        migrate.upgrade(url)
        return url
    if not _TEMPLATE:
        template = Path(tempfile.mkdtemp(prefix="phoenix-template-")) / "template.db"
        migrate.upgrade(f"sqlite:///{template}")
        _TEMPLATE.append(template)
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(_TEMPLATE[0])) as src, closing(sqlite3.connect(path)) as dst:
        src.backup(dst)  # the backup API, not a file copy: nothing left behind in a WAL file
    return url


XSS = "<script>alert('pwned')</script>"
# A backtick and a blank line close any inline code span; what follows would render as Markdown.
BREAKOUT = "m`\n\n[click me](https://evil.example/x) ![beacon](https://evil.example/b.png)"


def pair_flags(d: dict, prompt_file, cpu: bool = False) -> list[str]:
    """The command-line flags of a run on a tiny target with its near-copy draft, over the test's prompt file."""
    return [
        "--target",
        d["target"],
        "--draft",
        d["near"],
        *(["--device", "cpu"] if cpu else []),
        "--prompts",
        str(prompt_file),
    ]


def bench_cfg(tiny_dirs, prompt_file, **kw) -> BenchConfig:
    """A small run on the tiny Qwen3 target with its near-copy draft."""
    d = tiny_dirs["qwen3"]
    base = dict(
        target=d["target"],
        draft=d["near"],
        prompts=prompt_file,
        limit=3,
        max_new_tokens=12,
        modes=["target", "model_2"],
        arms=[0, 2, 4],
        device="cpu",
    )
    base.update(kw)
    return BenchConfig(**base)


def request_record(
    run_id, seq, mode="model_4", k=4, latency=1.0, tokens=10, proposed=8, accepted=6, **kw
) -> RequestRecord:
    """A recorded request with plain defaults; any field of ``kw`` overrides its default."""
    fields = dict(
        run_id=run_id,
        seq=seq,
        mode=mode,
        k=k,
        prompt_id=f"p{seq}",
        prompt_tokens=5,
        output_tokens=tokens,
        latency_s=latency,
        ttft_s=0.1,
        tokens_per_s=tokens / latency,
        proposed=proposed,
        accepted=accepted,
        passes=3,
        draft_s=0.4,
        verify_s=0.6,
        output_text="x",
        output_sha256="0" * 64,
        trace_id="a" * 32,
    )
    return RequestRecord(**{**fields, **kw})


class CorruptingDecoder(Decoder):
    """Flips one token of every speculative output, as a bf16 near-tie would."""

    def run(self, prompt_ids, k, max_new_tokens, drafter="none", loop="phoenix", choose_k=None, timed=True, **kw):
        stats = super().run(prompt_ids, k, max_new_tokens, drafter, loop, choose_k, timed, **kw)
        if k > 0 and len(stats.output_ids) > 3:
            stats.output_ids[3] += 1
        return stats


def interrupt_after(n: int):
    """A progress hook that raises KeyboardInterrupt on its n-th call, as Ctrl-C mid-run would."""
    calls = []

    def hook(*_):
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt

    return hook


def run_cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors exit from inside parse_args
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, pattern):
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("Loading weights")]
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert re.search(pattern, lines[0]), lines[0]


def start_worker(db_url, *extra):
    env = {**os.environ, "PHOENIX_DB": db_url}
    folder = (
        Path(db_url.removeprefix("sqlite:///")).parent if db_url.startswith("sqlite") else Path(tempfile.gettempdir())
    )
    log = open(folder / f"worker{time.monotonic_ns()}.log", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "worker", "--poll", "0.2", *extra],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(cond, timeout=120.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def app_record(run_id, seq, mode, k, rng, **kw):
    """A dashboard test's request: target-only slowest, k=4 fastest, with a per-position curve that falls."""
    latency = {0: 2.0, 4: 1.4}.get(k, 1.6) * rng.uniform(0.9, 1.1)
    per_pos = [PositionCount(i, 12, max(0, 12 - 3 * i)) for i in range(k)]
    return request_record(
        run_id,
        seq,
        mode,
        k,
        latency=latency,
        tokens=64,
        proposed=4 * 12 if k else 0,
        accepted=sum(p.accepted for p in per_pos),
        **{
            "prompt_id": f"HumanEval/{seq % 5}",
            "prompt_tokens": 50,
            "ttft_s": 0.05,
            "passes": 12 if k else 64,
            "draft_s": 0.3 * (k > 0),
            "verify_s": latency - 0.3 * (k > 0),
            "output_text": f"return x  # {XSS}",
            "identical": True,
            "trace_id": f"{seq:032x}",
            "positions": per_pos,
            **kw,
        },
    )


def build_db(url: str) -> Store:
    """Two finished runs of target, model_4 and bandit, through the store; run 2 holds one divergence."""
    migrated(url)
    store = Store(url)
    rng = random.Random(0)
    for r in range(2):
        run = store.create_run(
            f"run-{r}",
            {
                "bench": {
                    "modes": ["target", "model_4", "bandit"],
                    "prompts": "humaneval-test",
                    "drafter": "model",
                    "max_new_tokens": 64,
                }
            },
            "embedded",
            "embedded",
            30,
            status="done",
        )
        recs, seq = [], 0
        for i in range(10):
            recs.append(app_record(run.id, seq, "target", 0, rng))
            recs.append(app_record(run.id, seq + 1, "model_4", 4, rng))
            b = app_record(run.id, seq + 2, "bandit", [0, 2, 4][i % 3], rng)
            b.bandit = BanditRecord(
                t=i,
                epsilon=1.0 if i < 6 else 0.2,
                explored=i < 6,
                chosen_k=b.k,
                arm_means={"0": 30.0, "2": 38.0, "4": 45.0},
                arm_counts={"0": 3, "2": 3, "4": 4},
                reward=b.tokens_per_s,
            )
            recs.append(b)
            seq += 3
        if r == 1:
            recs[4].identical, recs[4].diverged_at = False, 17
        store.add_requests(recs)
    return store


def write_tiny_gguf(
    path: Path, tokenizer, hidden: int = 32, layers: int = 2, seed: int = 0, arch: str = "llama"
) -> Path:
    """A small GGUF in F32, written with the gguf package as llama.cpp lays one out: tokenizer and weights. ``qwen2``:
    Qwen2.5's layout, with q/k/v biases and an untied output layer."""
    import json as _json

    import gguf
    import numpy as np

    state = _json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    vocab = sorted(state["vocab"].items(), key=lambda kv: kv[1])
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    special = set(tokenizer.all_special_tokens)
    eos = tokenizer.eos_token_id
    rng = np.random.default_rng(seed)
    ffn, heads, kv_heads = hidden * 2, 4, 2
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("phoenix-tiny-gguf")
    w.add_block_count(layers)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(1e6 if arch == "qwen2" else 10000.0)
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t, _ in vocab])
    w.add_token_merges(merges)
    w.add_bos_token_id(eos)
    w.add_eos_token_id(eos)
    w.add_pad_token_id(eos)

    def tensor(name, *shape, scale=0.3):
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    tensor("token_embd.weight", len(vocab), hidden)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        tensor(f"blk.{i}.attn_q.weight", hidden, hidden)
        tensor(f"blk.{i}.attn_k.weight", hidden * kv_heads // heads, hidden)
        tensor(f"blk.{i}.attn_v.weight", hidden * kv_heads // heads, hidden)
        if arch == "qwen2":
            tensor(f"blk.{i}.attn_q.bias", hidden)
            tensor(f"blk.{i}.attn_k.bias", hidden * kv_heads // heads)
            tensor(f"blk.{i}.attn_v.bias", hidden * kv_heads // heads)
        tensor(f"blk.{i}.attn_output.weight", hidden, hidden)
        tensor(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_up.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_down.weight", hidden, ffn)
    w.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    if arch == "qwen2":
        tensor("output.weight", len(vocab), hidden)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_prompts(path: Path, n: int = 4) -> str:
    """A JSONL prompt file of ``n`` small functions (p0, p1, ...), the one every test that needs a set uses."""
    import json

    path.write_text(
        "".join(json.dumps({"id": f"p{i}", "prompt": f"def f{i}(x):\n    return x + {i}\n"}) + "\n" for i in range(n))
    )
    return str(path)


@contextmanager
def http_server(service):
    """Phoenix's API for ``service`` on a free localhost port, uvicorn on a thread of its own (the app starts and
    stops the service): yields the port; on leaving, uvicorn drains and the service stops."""
    import threading

    import uvicorn

    from engine.serve.api import make_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(service), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, 60, "the server to start")
        yield port
    finally:
        server.should_exit = True
        thread.join(30)


def tiny_service(tiny_dirs, store, **settings):
    """Phoenix's server (not yet started) on the tiny qwen3 pair with its near draft model, fp32, no start-up
    profile: what the served-path tests run against."""
    from engine.decode.loading import load_pair
    from engine.serve.config import ServeConfig, check_serve
    from engine.serve.service import Service

    d = tiny_dirs["qwen3"]
    cfg = check_serve(ServeConfig(**({"drafter": "model", "max_batch": 4, "profile": False} | settings)))
    return Service(cfg, Decoder(load_pair(d["target"], d["near"], "cpu", "float32")), store)


def import_results(store, paths, **settings) -> list[int]:
    """`python -m engine import` of ``paths`` into ``store`` with ImportConfig ``settings``, its lines unprinted."""
    from engine.imports.config import ImportConfig
    from engine.imports.importer import import_files

    return import_files(store, ImportConfig(**settings), [Path(p) for p in paths], say=lambda _line: None)
