"""Shared fixtures: tiny random models of real architectures, saved as HF directories."""

from __future__ import annotations

# isort: off
import engine  # noqa: F401  (sets BLAS and offline env before torch loads)
# isort: on

import os

import pytest

# torch, transformers and the store load inside the fixtures: under `-n 2` the controlling process only hands out
# tests, and importing them there cost two seconds of every fast loop.


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        # Two workers on two cores: a second intra-op thread each only makes them fight.
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _default_gemm_cuts(monkeypatch):
    """Each test starts from the extension's default GEMM cuts: a cut that another test measured (on a host busy
    with the other worker) must not change which GEMM this test's forwards take."""
    import sys

    fast_attention = sys.modules.get("engine.decode.fast_attention")  # not imported yet: nothing measured
    if fast_attention is not None:
        monkeypatch.setattr(fast_attention, "_cuts", {})


def _tiny_config(arch: str, vocab: int, eos: int, hidden: int = 64, layers: int = 2, tied: bool = False):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    cls = {"qwen3": Qwen3Config, "llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config}[arch]
    # Qwen2 (Qwen2.5's architecture): biases on q, k and v, and RoPE at Qwen2.5's base
    extra = {"sliding_window": None} if arch == "mistral" else {}
    if arch == "qwen2":
        extra = {"use_sliding_window": False, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
    return cls(
        **extra,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        max_position_embeddings=512,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        tie_word_embeddings=tied,
    )


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from engine.train.zoo import stdlib_texts, train_tokenizer

    return train_tokenizer(stdlib_texts()[:12], 512)


def make_model(arch: str, tokenizer, seed: int, **kw):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = _tiny_config(arch, len(tokenizer), tokenizer.eos_token_id, **kw)
    model = AutoModelForCausalLM.from_config(cfg)
    # Random init gives near-uniform logits; a larger scale gives decisive argmaxes,
    # so greedy output is not decided by float noise.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.mul_(6.0)
            elif name.endswith(".bias"):  # zeros from the init would let a forward that drops them pass
                p.copy_(torch.randn(p.shape) * 0.5)
    return model.eval()


def save_model(model, tokenizer, path):
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory, tiny_tokenizer):
    """For each architecture: a target, an unrelated draft and a near-copy draft."""
    import torch

    root = tmp_path_factory.mktemp("tiny")
    dirs = {}
    for arch in ("qwen3", "llama", "mistral", "qwen2"):
        target = make_model(arch, tiny_tokenizer, seed=1)
        near = make_model(arch, tiny_tokenizer, seed=1)
        with torch.no_grad():
            gen = torch.Generator().manual_seed(7)
            for p in near.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * p.std() * 0.3)
        dirs[arch] = {
            "target": save_model(target, tiny_tokenizer, root / f"{arch}-target"),
            "draft": save_model(  # a Qwen2 draft ties its embeddings, as Qwen2.5's small ones do; its target does not
                make_model(arch, tiny_tokenizer, seed=2, layers=1, tied=arch == "qwen2"),
                tiny_tokenizer,
                root / f"{arch}-draft",
            ),
            "near": save_model(near, tiny_tokenizer, root / f"{arch}-near"),
        }
    return dirs


@pytest.fixture(scope="session")
def other_vocab_dir(tmp_path_factory):
    """A model whose tokenizer differs from the tiny ones: must be refused as a draft."""
    from engine.train.zoo import stdlib_texts, train_tokenizer

    tok = train_tokenizer(stdlib_texts()[20:26], 300)
    return save_model(make_model("qwen3", tok, seed=3), tok, tmp_path_factory.mktemp("other") / "m")


@pytest.fixture
def prompt_file(tmp_path):
    from helpers import write_prompts

    return write_prompts(tmp_path / "prompts.jsonl")


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'phoenix.db'}"


@pytest.fixture
def store(db_url):
    """A migrated tmp_path database (a copy of the session's template)."""
    from helpers import migrated

    from db.store import Store

    return Store(migrated(db_url))


@pytest.fixture(scope="module")
def decoder(tiny_dirs):
    """The tiny Qwen3 target with its near-copy draft, loaded once per module."""
    from engine.bench.config import BenchConfig
    from engine.bench.run import load_decoder

    d = tiny_dirs["qwen3"]
    return load_decoder(BenchConfig(target=d["target"], draft=d["near"], device="cpu"))


PG_SERVER = __import__("os").environ.get("PHOENIX_TEST_PG")  # a PostgreSQL URL whose user may CREATE DATABASE


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db_url(request, tmp_path):
    """The same test on SQLite and on a fresh PostgreSQL database (.ci/run starts the server)."""
    import os
    import uuid

    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'phoenix.db'}"
        return
    if not PG_SERVER:
        if os.environ.get("PHOENIX_REQUIRE_PG"):
            pytest.fail("PHOENIX_REQUIRE_PG is set but PHOENIX_TEST_PG is not: the PostgreSQL server did not start")
        pytest.skip("PostgreSQL tests need PHOENIX_TEST_PG=postgresql+psycopg://user:pw@host/db (.ci/run sets it)")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"phoenix_t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(PG_SERVER).set(database=name).render_as_string(hide_password=False)
    finally:
        _drop_database(admin, name)
        admin.dispose()


def _drop_database(admin, name: str) -> None:
    """Drop a test database, ending sessions a test left open (FORCE). FORCE must also terminate an autovacuum
    worker that happens to be in it, which a role without pg_signal_backend may not (CI saw that once): then a
    plain DROP, which stops autovacuum by itself."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    with admin.connect() as conn:
        try:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        except DBAPIError:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))


@pytest.fixture
def any_store(any_db_url):
    from helpers import migrated

    from db.store import Store

    store = Store(migrated(any_db_url))
    yield store
    store.engine.dispose()  # PostgreSQL cannot drop a database with open connections


HEAVY = ("train", "subprocess", "browser", "services", "extras", "real", "bench", "compile", "e2e", "pages")


def _scan_components_once() -> None:
    """AppTest rescans every installed distribution for Streamlit v2 component manifests on each run (0.2 s, most
    of a page render here). Phoenix ships no such component, and the set of installed packages does not change
    during a test session, so one scan serves them all."""
    import functools

    from streamlit.components.v2 import manifest_scanner

    manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)


_scan_components_once()


def pytest_collection_modifyitems(config, items):
    """`pytest -m fast` is the working loop: every test that carries none of the heavy markers."""
    for item in items:
        if not any(item.get_closest_marker(name) for name in HEAVY):
            item.add_marker(pytest.mark.fast)


@pytest.fixture
def app_db(tmp_path, monkeypatch):
    """A recorded database the dashboard reads (PHOENIX_DB), as every dashboard test file needs one."""
    from helpers import build_db

    url = f"sqlite:///{tmp_path / 'app.db'}"
    store = build_db(url)
    monkeypatch.setenv("PHOENIX_DB", url)
    monkeypatch.delenv("PHOENIX_SENTRY_WEB", raising=False)
    return store
