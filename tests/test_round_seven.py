"""Round seven's findings (issue 68) that are one command or one call each: every one a test that failed on the code
before, and one clear line after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import PhoenixError

pytestmark = pytest.mark.fast


@pytest.fixture
def registry(tmp_path, monkeypatch):
    import engine.catalog as catalog

    monkeypatch.setattr(catalog, "ADDED", tmp_path / "added.json")
    return tmp_path


def _fake_gguf(path: Path) -> Path:
    path.write_bytes(b"GGUF" + b"\0" * 64)  # the magic is all `is_gguf` reads; a conversion would fail on the rest
    return path


@pytest.mark.parametrize("name", ["../x", "/tmp/phoenix-evil", "Upper", "a/b", ""])
def test_a_bad_name_is_refused_before_anything_is_written(registry, name, monkeypatch):
    import engine.decode.own as own

    monkeypatch.setattr(own, "MODELS_DIR", registry / "models")
    with pytest.raises(PhoenixError, match="--name .*lower-case letters"):
        own.add(str(_fake_gguf(registry / "m.gguf")), name)
    assert not (registry / "models").exists() and not (registry / "x").exists()


def test_a_named_models_folder_is_never_an_add_target(registry):
    from engine.decode.own import add

    with pytest.raises(PhoenixError, match="the folder of 'smollm2'"):
        add(str(_fake_gguf(registry / "m.gguf")), "smollm2-135m-instruct")


def test_an_existing_folder_this_name_did_not_make_is_left_alone(registry, monkeypatch):
    import engine.decode.own as own

    monkeypatch.setattr(own, "MODELS_DIR", registry / "models")
    theirs = registry / "models" / "mine"
    theirs.mkdir(parents=True)
    (theirs / "phoenix_card.json").write_text("{}")
    (theirs / "weights.safetensors").write_text("theirs")
    with pytest.raises(PhoenixError, match="already exists and is not an earlier add"):
        own.add(str(_fake_gguf(registry / "m.gguf")), "mine")
    assert (theirs / "weights.safetensors").read_text() == "theirs"


def test_a_config_with_a_negative_size_is_one_line_naming_the_field(tmp_path):
    from engine.decode.own import check_model_dir

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": -3}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(PhoenixError, match="num_hidden_layers = -3"):
        check_model_dir(tmp_path, "mine")


def test_a_gguf_with_a_bad_header_does_not_ask_to_install_what_is_installed(tmp_path):
    from engine.decode.fetch import convert_gguf

    with pytest.raises(PhoenixError) as caught:
        convert_gguf(_fake_gguf(tmp_path / "bad.gguf"), tmp_path / "out")
    assert "install" not in str(caught.value) and "cut, corrupt" in str(caught.value)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("requests", 0, "--requests must be in 1..10000"),
        ("requests", 100_000_000, "--requests must be in 1..10000"),
        ("replicas", "100000", "--replicas must be in 1..16"),
        ("max_batch", 0, "--max-batch must be in 1..256"),
        ("slo", "ttft:abc", "--slo: 'ttft:abc'"),
        ("rate", "1e308", "--rate must be above 0"),
        ("rate", "50000", "--rate must be at most"),
        ("validate", "2:0", "--validate"),
    ],
)
def test_a_fleet_plan_out_of_bounds_is_one_line_before_any_work(field, value, said):
    from dataclasses import replace

    from engine.engines.config import PlanConfig
    from engine.engines.planning import check_plan

    with pytest.raises(PhoenixError) as caught:
        check_plan(replace(PlanConfig(source="1"), **{field: value}))
    assert said in str(caught.value)


@pytest.mark.parametrize("router", ["![x](http://127.0.0.1:9/x.png)", "round_robin@javascript:alert(1)", "x" * 300])
def test_serve_takes_a_router_only_as_fleet_start_writes_it(router):
    from engine.serve.config import ServeConfig, check_serve

    with pytest.raises(PhoenixError, match="--router must be"):
        check_serve(ServeConfig(router=router))
    assert check_serve(ServeConfig(router="cache_aware@http://127.0.0.1:8300")).router


def test_help_texts_end_where_their_field_does():
    from engine.bench.config import BenchConfig
    from engine.config import field_help

    helps = field_help(BenchConfig)
    assert helps["seed"] == "bandit decisions, shadow sampling, and each prompt's sampling seed"
    assert "--concurrency" not in helps["fast"]


def test_the_weights_hash_is_remembered_outside_the_model_folder(tmp_path, monkeypatch):
    import engine.decode.card as card

    monkeypatch.setattr(card, "CACHE_DIR", tmp_path / "cache")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    first = card.weights_sha256(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["model.safetensors"]  # the folder is as it was
    assert card.weights_sha256(folder) == first and any((tmp_path / "cache").rglob("*.json"))


def test_fleet_start_keeps_its_record_from_the_first_launch_and_cleans_up_when_stopped(tmp_path, monkeypatch):
    """SIGTERM (what timeout and CI send) ends a start as Ctrl-C does: what it started is stopped, and until then
    the record names it, so `fleet stop --port` finds it."""
    import engine.engines.replicas as replicas

    monkeypatch.setattr(replicas, "router_binary", lambda: Path("/bin/true"))
    stopped, seen = [], []

    def launch(name, argv, port, cfg, data_dir, env):
        seen.append(json.loads(replicas.record_file(cfg.port, data_dir).read_text())["processes"][:])
        if name == "replica 1":
            raise KeyboardInterrupt("signal 15")
        return {"name": name, "key": {"fleet": cfg.port, "port": port}, "pid": 1, "command": "", "log": ""}

    monkeypatch.setattr(replicas, "_launch", launch)
    monkeypatch.setattr(replicas.process, "stop", lambda files, *a: stopped.append(files) or True)
    cfg = replicas.FleetConfig(replicas=2, port=18700)
    with pytest.raises(KeyboardInterrupt):
        replicas.start(cfg, tmp_path, say=lambda _: None)
    assert seen[0] == [] and [p["name"] for p in seen[1]] == ["replica 0"]  # written before each launch
    assert len(stopped) == 1 and not replicas.record_file(cfg.port, tmp_path).exists()


def test_serve_with_a_target_and_no_draft_takes_its_best_draft_present_or_drafts_model_free(monkeypatch, tmp_path):
    from engine import catalog
    from engine.serve.config import ServeConfig, check_serve

    here: set[str] = set()
    monkeypatch.setattr(catalog, "present", lambda name, role="target": name in here)
    assert check_serve(ServeConfig(target="smollm2")).draft is None  # nothing of its own here: model-free
    assert check_serve(ServeConfig(target=str(tmp_path))).draft is None  # a user's model has no catalogued draft
    here.add(catalog.SMOLLM2_DRAFT)
    assert check_serve(ServeConfig(target="smollm2")).draft == catalog.SMOLLM2_DRAFT
    here.add(catalog.SMOLLM2_EAGLE3)  # the head measured better on SmolLM2: it goes first
    assert check_serve(ServeConfig(target="smollm2")).draft == catalog.SMOLLM2_EAGLE3
    here.add(catalog.QWEN15_EAGLE3)
    assert check_serve(ServeConfig(target=catalog.QWEN15)).draft == catalog.QWEN15_EAGLE3
    here.add(catalog.QWEN05)  # the 0.5B sibling measured better on the 1.5B
    assert check_serve(ServeConfig(target=catalog.QWEN15)).draft == catalog.QWEN05
    assert check_serve(ServeConfig(target="smollm2", draft="none")).draft == "none"  # what the user names stands
    assert check_serve(ServeConfig()).draft == "embedded"  # the embedded pair keeps its own draft


def test_the_server_serves_bf16_by_default_only_where_the_cpu_multiplies_bf16(monkeypatch):
    from engine import provenance
    from engine.decode.loading import serving_dtype

    amx = "flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16\n"
    zen3 = "flags\t\t: fpu avx2\n"
    assert provenance.native_bf16(amx) and not provenance.native_bf16(zen3)
    monkeypatch.setattr(provenance, "cpuinfo", lambda: amx)
    assert serving_dtype("auto", "cpu") == "bfloat16"
    assert serving_dtype("float32", "cpu") == "float32"  # fp32, exact, stays one flag away
    monkeypatch.setattr(provenance, "cpuinfo", lambda: zen3)
    assert serving_dtype("auto", "cpu") == "float32"  # emulated bf16 is slower than fp32 there


def test_the_warm_up_input_is_made_on_the_device_the_model_is_on():
    """No GPU here: the input's device is read from the model's weights (the check that needs a GPU runs on one)."""
    import torch

    from engine.decode import runner

    seen = []

    class OnMeta(torch.nn.Module):
        config = None

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1, device="meta"))

        def forward(self, input_ids, cache):
            seen.append(input_ids.device.type)

    class Cache:
        def __init__(self, config):
            pass

    import transformers

    original = transformers.DynamicCache
    transformers.DynamicCache = Cache
    try:
        runner.warm(OnMeta(), 2)
    finally:
        transformers.DynamicCache = original
    assert seen and set(seen) == {"meta"}


def test_each_router_gets_a_free_metrics_port_of_its_own(monkeypatch):
    """vllm-router binds its Prometheus exporter to 29000 unless told: a second fleet's router died at start."""
    import engine.engines.replicas as replicas

    monkeypatch.setattr(replicas, "router_binary", lambda: Path("/bin/true"))
    cfg = replicas.FleetConfig(replicas=2, port=18700)
    argv = replicas.router_argv(cfg)
    port = int(argv[argv.index("--prometheus-port") + 1])
    assert port != 29000 and argv[argv.index("--prometheus-host") + 1] == "127.0.0.1"
    assert replicas.router_argv(cfg, 18999)[argv.index("--prometheus-port") + 1] == "18999"


def test_fleet_stop_names_what_had_already_died(tmp_path, monkeypatch):
    """After the router and a replica died, `fleet stop` said only `stopped: replica 1`."""
    import engine.engines.replicas as replicas

    procs = [{"name": n, "key": {"fleet": 18800, "port": 18800 + i}} for i, n in enumerate(["replica 0", "replica 1"])]
    procs.append({"name": "vllm-router", "key": {"fleet": 18800, "port": 18800}})
    replicas.record_file(18800, tmp_path).write_text(json.dumps({"processes": procs}))
    monkeypatch.setattr(replicas, "_files", lambda key, data_dir: key)
    monkeypatch.setattr(replicas.process, "stop", lambda key, *a: key["port"] == 18801)  # only replica 1 still ran
    said = replicas.stop(18800, tmp_path)
    assert said[0] == "replica 1" and "vllm-router (had already stopped)" in said and len(said) == 3
    assert not replicas.record_file(18800, tmp_path).exists()
