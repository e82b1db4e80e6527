"""--fast: the path a run takes is the fastest one benchmarks.limits measured on the same CPU, chosen before the
pair loads and stored with the run; a file from another CPU, a cut-short file or no file at all chooses nothing
and says why."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from helpers import bench_cfg

from engine.bench import fast
from engine.bench.config import validate
from engine.bench.setup import create_run

MACHINE = {"cpu": "Test CPU (family 1, model 2)", "cpu_flags": ["avx2", "avx512_bf16"], "torch": "2.13.0+cpu"}


def _entry(step_ms: float, widths: dict[int, float], compiled: bool | None = None) -> dict:
    entry = {"step_s": {"median": step_ms / 1e3}, "verify_over_step": {str(n): v for n, v in widths.items()}}
    if compiled is not None:
        entry["compile"] = {"compiled": compiled}
    return entry


def _write(directory, stamp: str, machine: dict, dtypes: list[dict]) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"limits-{stamp}.json").write_text(json.dumps({"provenance": machine, "dtypes": dtypes}))


FLAT = {1: 1.0, 2: 1.0, 3: 1.05, 4: 1.1, 5: 1.1}
STEEP = {1: 1.0, 2: 1.2, 3: 1.6, 4: 1.7, 5: 1.8}


@pytest.fixture
def results(tmp_path):
    directory = tmp_path / "results"
    _write(
        directory,
        "20261201T000000",
        MACHINE,
        [
            # fp32: eager has the cheaper single step, frozen the cheaper verify: over k = 4 frozen wins
            {"dtype": "float32", "eager": _entry(30, STEEP), "frozen": _entry(32, FLAT, compiled=True)},
            {"dtype": "bfloat16", "eager": _entry(40, STEEP), "frozen": _entry(20, FLAT, compiled=True)},
        ],
    )
    # a newer file from another CPU, and a newer one cut short: neither speaks for this machine
    other = [{"dtype": "float32", "eager": _entry(1, FLAT)}]
    _write(directory, "20261202T000000", {**MACHINE, "cpu": "Other CPU"}, other)
    (directory / "limits-20261203T000000.json").write_text('{"provenance": ')
    return directory


def test_exact_takes_the_fastest_path_in_the_runs_dtype_over_the_widths_it_verifies(tiny_dirs, prompt_file, results):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_4"], fast="exact")
    record = fast.resolve(cfg, results, MACHINE)
    assert record["chose"] == {"dtype": "float32", "path": "frozen"} and record["from"] == "limits-20261201T000000.json"
    assert (cfg.dtype, cfg.cache, cfg.compile, cfg.freeze) == ("float32", "static", True, True)
    assert record["mean_forward_ms"] == {"float32 eager": pytest.approx(43.8), "float32 frozen": pytest.approx(33.6)}


def test_a_target_only_run_weighs_only_the_single_step(tiny_dirs, prompt_file, results):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target"], fast="exact")
    assert fast.resolve(cfg, results, MACHINE)["chose"] == {"dtype": "float32", "path": "eager"}
    assert (cfg.cache, cfg.compile, cfg.freeze) == ("dynamic", False, False)


def test_auto_may_take_bf16_and_says_outputs_are_checked_in_that_dtype(tiny_dirs, prompt_file, results):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_4"], fast="auto")
    record = fast.resolve(cfg, results, MACHINE)
    assert record["chose"] == {"dtype": "bfloat16", "path": "frozen"} and cfg.dtype == "bfloat16"
    assert "same dtype" in fast.line(record)
    again = fast.resolve(cfg, results, MACHINE)
    assert again["chose"] == record["chose"]  # idempotent: a queued run resolved twice takes one path


def test_a_path_whose_compile_failed_is_never_chosen(tiny_dirs, prompt_file, tmp_path):
    directory = tmp_path / "r"
    _write(
        directory,
        "20261201T000000",
        MACHINE,
        [{"dtype": "float32", "eager": _entry(30, STEEP), "frozen": {"compile": {"compiled": False}}}],
    )
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_4"], fast="exact")
    assert fast.resolve(cfg, directory, MACHINE)["chose"]["path"] == "eager"


def test_no_measurement_on_this_cpu_keeps_the_runs_path_and_names_the_command(tiny_dirs, prompt_file, results):
    cfg = bench_cfg(tiny_dirs, prompt_file, fast="auto", cache="static")
    record = fast.resolve(cfg, results, {**MACHINE, "cpu_flags": ["avx2"]})
    assert record["chose"] is None and fast.MEASURE in record["why"] and "Test CPU" in record["why"]
    assert (cfg.dtype, cfg.cache, cfg.compile) == ("auto", "static", False)
    assert fast.line(record).startswith("--fast auto: kept the run's path")


def test_off_chooses_nothing_and_a_gpu_run_keeps_its_path(tiny_dirs, prompt_file, results):
    assert fast.resolve(bench_cfg(tiny_dirs, prompt_file), results, MACHINE) is None
    cfg = bench_cfg(tiny_dirs, prompt_file, fast="auto", device="cuda")
    assert fast.resolve(cfg, results, MACHINE)["chose"] is None and cfg.dtype == "auto"


def test_a_run_stores_the_path_it_chose_and_the_file_it_chose_from(store, tiny_dirs, prompt_file, monkeypatch, results):
    monkeypatch.setattr(fast, "LIMITS_DIR", results)
    monkeypatch.setattr(fast, "here", lambda: MACHINE)
    cfg = validate(bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_4"], fast="auto"))
    info = store.get_run(create_run(store, cfg, status="queued").id)
    assert info.config["fast"]["chose"] == {"dtype": "bfloat16", "path": "frozen"}
    assert info.config["bench"]["dtype"] == "bfloat16" and info.config["bench"]["freeze"] is True
    assert info.config["bench"]["fast"] == "auto"


def test_freeze_implies_compile_and_names_the_path():
    from engine.bench.config import BenchConfig

    cfg = validate(BenchConfig(modes=["target", "ngram_4"], freeze=True))
    assert cfg.compile and fast.path_of(cfg) == "frozen"
    assert fast.path_of(SimpleNamespace(compile=False, freeze=False, cache="static")) == "static"
    assert fast.path_of(SimpleNamespace(compile=True, freeze=False, cache="static")) == "compiled"


@pytest.mark.parametrize(
    "dtypes",
    [
        "not a list",
        [{"dtype": "float32", "eager": "not an entry"}],
        [{"dtype": "float32", "eager": {"step_s": 3, "verify_over_step": []}}],
        [{"dtype": 7, "eager": _entry(30, FLAT)}],
    ],
)
def test_a_limits_file_of_another_shape_chooses_nothing_and_says_so(tiny_dirs, prompt_file, tmp_path, dtypes):
    directory = tmp_path / "shapes"
    _write(directory, "20261201T000000", MACHINE, dtypes)  # type: ignore[arg-type]
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_4"], fast="auto")
    record = fast.resolve(cfg, directory, MACHINE)
    assert record["chose"] is None and "measured no path" in record["why"]


def test_a_negative_or_absurd_time_is_never_the_fastest_path(tiny_dirs, prompt_file, tmp_path):
    directory = tmp_path / "bad"
    _write(
        directory,
        "20261201T000000",
        MACHINE,
        [{"dtype": "float32", "eager": _entry(30, FLAT), "frozen": _entry(-5, FLAT), "static": _entry(1e9, FLAT)}],
    )
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_4"], fast="exact")
    assert fast.resolve(cfg, directory, MACHINE)["chose"] == {"dtype": "float32", "path": "eager"}
