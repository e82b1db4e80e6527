"""The vLLM backend against a local stand-in server (see tests/fixtures/vllm/PROVENANCE.md)."""

from __future__ import annotations

import re

import pytest
from fake_vllm import FakeVllm

from engine.engines.config import SweepConfig, WatchConfig
from engine.engines.counters import level_notes, parse_metrics
from engine.engines.record import sweep, watch
from engine.errors import PhoenixError


@pytest.fixture
def server():
    s = FakeVllm()
    yield s
    s.stop()


def test_the_metrics_parser_reads_vllms_counters_and_ignores_the_rest(server):
    for _ in range(3):
        server.complete({"max_tokens": 20, "prompt": "a b"})
    c = parse_metrics(server.render())
    assert (c.drafts, c.draft_tokens, c.generation_tokens) == (30, 120, 60)
    assert c.per_pos == {0: 27, 1: 21, 2: 18, 3: 12}  # int(10 * 0.9), int(10 * 0.75), ... per request
    s = c.summary()
    assert s["acceptance"] == pytest.approx(78 / 120)
    assert s["mean_acceptance_length"] == pytest.approx(1 + 78 / 30)
    assert s["per_position"] == pytest.approx([0.9, 0.7, 0.6, 0.4])


def test_a_concurrency_sweep_records_every_request_and_the_counters_of_each_level(store, server, prompt_file):
    levels = []
    run_id = sweep(
        store,
        SweepConfig(
            url=server.url, model=server.model, prompts=prompt_file, limit=4, max_new_tokens=16, concurrency="1,4"
        ),
        on_level=levels.append,
    )
    info = store.get_run(run_id)
    assert info.status == "done" and info.progress_done == 8
    rows = store.requests(run_id)
    assert sorted({r.mode for r in rows}) == ["vllm_c1", "vllm_c4"]
    assert all(r.output_tokens == 16 and r.latency_s > 0 for r in rows)
    stored = info.config["vllm_levels"]
    assert [lv["concurrency"] for lv in stored] == [1, 4] and stored == levels
    c1 = stored[0]
    assert c1["drafts"] == 4 * 8 and c1["draft_tokens"] == 4 * 8 * 4  # 4 requests x 8 drafts x k=4
    assert c1["per_position"] == pytest.approx([7 / 8, 6 / 8, 4 / 8, 3 / 8])  # int(8*.9)=7, int(8*.75)=6, ...
    assert c1["throughput_tokens_per_s"] > 0


def test_a_level_cut_short_by_a_dying_server_keeps_the_requests_it_answered(store, server, prompt_file):
    """The server answers the first level's 4 and 2 of the second's, then fails everything, /metrics too: the
    second level never gets its counters, and its 2 answers (and the failures after them) are rows all the same."""
    server.dies_after = 6
    cfg = SweepConfig(
        url=server.url, model=server.model, prompts=prompt_file, limit=4, max_new_tokens=16, concurrency="1,2"
    )  # (a level named twice, "1,1", is refused now: it ran the level twice as two levels of one sweep)
    with pytest.raises(PhoenixError):
        sweep(store, cfg)
    (run,) = store.list_runs()
    rows = store.requests(run.id)
    second = [r for r in rows if r.seq >= 4]
    assert len(rows) == 8 and run.status == "failed" and run.progress_done == 8
    assert sum(r.error is None for r in second) == 2 and all(r.output_tokens == 16 for r in second if not r.error)
    assert run.config["cut_level"] == {"concurrency": 2, "recorded": 4, "of": 4}
    assert {r.k for r in second} == {len(run.config["vllm_levels"][0]["per_position"])}


def test_watch_records_counter_deltas_as_intervals_with_their_per_position_counts(store, server):
    calls = iter(range(100))

    def fake_sleep(_s):
        for _ in range(next(calls) + 1):
            server.complete({"max_tokens": 20, "prompt": "x"})

    run_id = watch(store, WatchConfig(url=server.url, interval_s=0.01, samples=2), sleep=fake_sleep)
    assert store.requests(run_id) == []  # intervals are not requests: no request figure counts them
    rows = store.intervals(run_id)
    assert [r.seq for r in rows] == [0, 1] and store.get_run(run_id).progress_done == 2
    assert [r.drafts for r in rows] == [10, 20] and [r.draft_tokens for r in rows] == [40, 80]
    assert rows[1].per_position == [18, 14, 12, 8]


@pytest.mark.parametrize(
    "cfg,match",
    [
        (SweepConfig(url="http://127.0.0.1:1", model="m"), "cannot reach the server at"),
        (SweepConfig(model=""), "--model is required"),
        (SweepConfig(model="m", concurrency="1,zero"), "comma-separated whole numbers"),
    ],
)
def test_bad_sweep_input_is_one_clear_line_and_writes_nothing(store, cfg, match):
    with pytest.raises(PhoenixError, match=match):
        sweep(store, cfg)
    assert store.list_runs() == []


def test_a_wrong_model_name_fails_the_run_with_the_servers_answer(store, server, prompt_file):
    with pytest.raises(PhoenixError, match="HTTP 404"):
        sweep(store, SweepConfig(url=server.url, model="other", prompts=prompt_file, limit=2, concurrency="1"))
    assert store.list_runs()[0].status == "failed"


def test_a_failed_request_is_recorded_with_the_servers_answer_and_its_level_carries_on(store, prompt_file):
    s = FakeVllm(max_model_len=20)  # "def f0(x): return x + 0" is 6 words: 6 + 16 fits; the long prompt does not
    long_prompts = prompt_file.replace("prompts.jsonl", "long.jsonl")
    with open(prompt_file) as src, open(long_prompts, "w") as dst:
        dst.write(src.read() + '{"id": "long", "prompt": "' + "word " * 30 + '"}\n')
    try:
        levels = []
        run_id = sweep(
            store,
            SweepConfig(url=s.url, model=s.model, prompts=long_prompts, limit=5, max_new_tokens=12, concurrency="1,4"),
            on_level=levels.append,
        )
    finally:
        s.stop()
    assert store.get_run(run_id).status == "done" and [lv["failed"] for lv in levels] == [1, 1]
    rows = store.requests(run_id)
    assert len(rows) == 10 and sum(r.output_tokens == 12 for r in rows) == 8
    failed = [r for r in rows if r.error]
    assert [r.prompt_id for r in failed] == ["long", "long"] and all("HTTP 400" in r.error for r in failed)


@pytest.mark.parametrize("spec, prefix, seen", [(True, "", True), (True, "ray_", True), (False, "", False)])
def test_counters_are_read_with_the_ray_prefix_and_their_absence_is_said(spec, prefix, seen):
    s = FakeVllm(spec=spec, prefix=prefix)
    try:
        s.complete({"max_tokens": 20, "prompt": "a"})
        summary = parse_metrics(s.render()).summary()
    finally:
        s.stop()
    assert summary["spec_decode_counters"] is seen
    assert (summary["drafts"] == 10) is seen
    assert any("no spec-decode counters" in n for n in level_notes(summary)) is not seen


def test_a_counter_that_goes_down_is_a_restart_and_the_increase_starts_from_zero():
    s = FakeVllm()
    try:
        for _ in range(3):
            s.complete({"max_tokens": 20, "prompt": "a"})
        before = parse_metrics(s.render())
        s.restart()
        s.complete({"max_tokens": 20, "prompt": "a"})
        delta = parse_metrics(s.render()).minus(before)
    finally:
        s.stop()
    assert delta.reset and delta.drafts == 10 and delta.summary()["counters_reset"]


def test_every_greedy_sampling_field_is_sent_and_recorded_and_a_v1_url_works(store, server, prompt_file):
    from engine.engines.client import GREEDY

    run_id = sweep(
        store,
        SweepConfig(
            url=server.url + "/v1/", model=server.model, prompts=prompt_file, limit=2, max_new_tokens=8, concurrency="1"
        ),
    )
    assert all({k: b[k] for k in GREEDY} == GREEDY for b in server.bodies) and len(server.bodies) == 2
    assert GREEDY["repetition_penalty"] == 1.0 and GREEDY["temperature"] == 0.0
    assert store.get_run(run_id).config["sampling"] == GREEDY


def test_a_missing_llama_server_is_one_line_naming_the_install_command(monkeypatch):
    from engine.engines import llamacpp
    from engine.errors import PhoenixError

    monkeypatch.setattr(llamacpp.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(llamacpp, "built_binary", lambda: None)
    with pytest.raises(PhoenixError, match=re.escape(llamacpp.INSTALL)):
        llamacpp.binary()


def _body(prefix: str) -> str:
    p = prefix + "spec_decode_"
    return (
        f"# TYPE {p}num_drafts_total counter\n{p}num_drafts_total 4\n"
        f"# TYPE {p}num_draft_tokens_total counter\n{p}num_draft_tokens_total 16\n"
        f"# TYPE {p}num_accepted_tokens_total counter\n{p}num_accepted_tokens_total 6\n"
        f"# TYPE {p}num_accepted_tokens_per_pos_total counter\n"
        + "".join(f'{p}num_accepted_tokens_per_pos_total{{position="{i}"}} {v}\n' for i, v in enumerate([3, 2, 1, 0]))
    )


@pytest.mark.parametrize("prefix, engine", [("vllm:", "vllm"), ("ray_vllm:", "vllm"), ("llamacpp:", "llamacpp")])
def test_one_parser_reads_every_engines_counters_with_vllms_meanings(prefix, engine):
    s = parse_metrics(_body(prefix)).summary()
    assert (s["engine"], s["drafts"], s["draft_tokens"], s["accepted"]) == (engine, 4, 16, 6)
    assert s["acceptance"] == 6 / 16 and s["mean_acceptance_length"] == 1 + 6 / 4
    assert s["per_position"] == [0.75, 0.5, 0.25, 0.0] and s["acceptance_from"] == "counters"


def test_sglangs_acceptance_gauges_are_read_as_gauges_and_said_to_be():
    body = (
        '# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{model_name="m"} 0.6\n'
        '# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="m"} 2.8\n'
        '# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total{model_name="m"} 100\n'
    )
    before, after = parse_metrics(body), parse_metrics(body.replace(" 100", " 160").replace("0.6", "0.7"))
    s = after.minus(before).summary()
    assert (s["engine"], s["acceptance"], s["mean_acceptance_length"], s["generation_tokens"]) == (
        "sglang",
        0.7,
        2.8,
        60,
    )
    assert s["per_position"] == [] and any("gauges" in n for n in level_notes(s))


@pytest.mark.parametrize("command", ["engines", "vllm"])
def test_engines_and_its_old_name_vllm_take_the_same_commands(command):
    from engine.cli import build_parser

    args = build_parser().parse_args([command, "sweep", "--url", "http://h:1", "--model", "m", "--engine", "llamacpp"])
    assert (args.url, args.engine) == ("http://h:1", "llamacpp") and args.func.__name__ == "cmd_vllm_sweep"


def test_a_watch_run_shows_its_intervals_on_the_run_page(store, server, monkeypatch):
    from apptest import open_page

    calls = iter(range(100))

    def fake_sleep(_s):
        for _ in range(next(calls) + 1):
            server.complete({"max_tokens": 20, "prompt": "x"})

    run_id = watch(store, WatchConfig(url=server.url, interval_s=0.01, samples=3), sleep=fake_sleep)
    monkeypatch.setenv("PHOENIX_DB", store.url)
    at = open_page("run", run=run_id)
    table = next(d.value for d in at.dataframe if "interval" in d.value.columns)
    assert table["interval"].tolist() == [0, 1, 2] and table["drafts"].tolist() == [10, 20, 30]
    intervals = store.intervals(run_id)
    total = sum(i.accepted for i in intervals) / sum(i.draft_tokens for i in intervals)
    assert [m.value for m in at.metric if m.label == "acceptance"] == [f"{total:.1%}"]
