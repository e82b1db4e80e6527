"""Round six's findings (issue 58) that are one request or one command each: every one a test that failed on the code
before, and one clear line after."""

from __future__ import annotations

import pytest
from test_serve_api import decoder, make_service  # noqa: F401  (decoder: a fixture)


@pytest.fixture
def client(decoder, tmp_path):  # noqa: F811
    from fastapi.testclient import TestClient

    from engine.serve.api import make_app

    service, _ = make_service(decoder, tmp_path, max_batch=2)
    with TestClient(make_app(service)) as c:
        yield c


@pytest.mark.parametrize(
    "field,value",
    [
        ("stop_token_ids", 0),
        ("stop_token_ids", ""),
        ("stop_token_ids", {}),
        ("stop_token_ids", False),
        ("n", True),
        ("best_of", True),
        ("echo", 0),
        ("use_beam_search", 0),
        ("presence_penalty", False),
        ("frequency_penalty", False),
        ("repetition_penalty", True),
    ],
)
def test_a_value_of_the_wrong_type_is_a_400_never_read_as_the_neutral_one(client, field, value):
    r = client.post("/v1/completions", json={"prompt": "def f(x):", "max_tokens": 2, field: value})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_the_neutral_values_of_the_right_type_still_pass(client):
    body = {
        "prompt": "def f(x):",
        "max_tokens": 2,
        "n": 1,
        "echo": False,
        "presence_penalty": 0.0,
        "stop_token_ids": [],
    }
    assert client.post("/v1/completions", json=body).status_code == 200


def test_max_completion_tokens_is_named_when_it_is_the_bad_one(client):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "max_completion_tokens": 0}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_completion_tokens"
    assert "max_completion_tokens must be" in r.json()["error"]["message"]


def test_a_chat_prompt_past_the_context_without_max_tokens_says_the_prompt_is_too_long(client, decoder):  # noqa: F811
    ctx = decoder.pair.target.config.max_position_embeddings
    long = "x " * (ctx + 300)
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": long}]})
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and "fills the model's context" in message and "max_tokens" not in message
    assert r.json()["error"]["param"] == "messages"


@pytest.mark.parametrize(
    "settings,says",
    [
        ({"max_new_tokens": 0}, "--max-new-tokens must be in 1..65536"),
        ({"max_new_tokens": -3}, "--max-new-tokens must be in 1..65536"),
        ({"request_rate": "2", "burstiness": 0.0}, r"--burstiness must be in \(0, 100\]"),
        ({"concurrency": "1,1"}, "--concurrency names a level twice"),
        ({"goodput": ","}, "--goodput: ',' names no SLO"),
        ({"max_concurrency": 4}, "--max-concurrency caps the requests in flight at a --request-rate"),
    ],
)
def test_a_load_setting_that_would_run_nothing_right_is_one_line_before_any_run(settings, says):
    from engine.engines.config import LoadConfig
    from engine.engines.load import variants_of
    from engine.errors import PhoenixError

    with pytest.raises(PhoenixError, match=says):
        variants_of(LoadConfig(**settings))


@pytest.mark.parametrize("usage", [{"completion_tokens": "NaN"}, {"completion_tokens": -1}, {"prompt_tokens": 1.5}])
def test_an_answer_whose_usage_is_not_counts_is_a_failed_row_not_a_traceback(usage):
    from engine.engines.rows import row_of
    from engine.prompts.sets import Prompt

    answer = {"text": "x", "latency_s": 0.5, "ttft_s": 0.1, "usage": {"prompt_tokens": 3, **usage}}
    row = row_of(1, 0, "phoenix-none_c1", Prompt("p", "q"), answer)
    assert row.error and "not counts" in row.error and row.output_tokens == 0 and row.tokens_per_s == 0.0


def test_vllm_refuses_a_draft_model_as_a_head_and_a_head_as_a_draft_model_before_it_starts(tmp_path):
    import json

    from engine.engines import vllm
    from engine.errors import PhoenixError

    head, draft = tmp_path / "head", tmp_path / "draft"
    for folder, arch in ((head, "LlamaForCausalLMEagle3"), (draft, "LlamaForCausalLM")):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"architectures": [arch]}))
    with pytest.raises(PhoenixError, match="--method eagle3 drafts with an EAGLE-3 head; --draft .* is a draft model"):
        vllm.speculative_config(vllm.VllmConfig(method="eagle3", draft=str(draft)))
    with pytest.raises(PhoenixError, match="--method draft_model drafts with a model; --draft .* is an EAGLE-3 head"):
        vllm.speculative_config(vllm.VllmConfig(method="draft_model", draft=str(head)))
    assert vllm.speculative_config(vllm.VllmConfig(method="eagle3", draft=str(head)))["model"] == str(head)


def test_a_port_another_program_holds_is_one_line_before_vllm_is_launched(tmp_path, monkeypatch):
    import socket

    from engine.engines import process, vllm
    from engine.errors import PhoenixError

    monkeypatch.setattr(vllm, "installed", lambda venv=None: True)
    monkeypatch.setattr(vllm, "command", lambda cfg: (["true"], {}))
    launched = []
    monkeypatch.setattr(process, "launch", lambda *a, **k: launched.append(a) or {})
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(PhoenixError, match=f"port {port} is taken by another program; vLLM was not started"):
            vllm.start(vllm.VllmConfig(port=port), tmp_path)
    assert launched == []


def test_a_cache_folder_that_cannot_be_made_is_one_line_for_vllms_install(monkeypatch, tmp_path):
    from engine.engines import vllm
    from engine.errors import PhoenixError

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(PhoenixError, match="cannot make .* set PHOENIX_CACHE to a writable folder"):
        vllm.install(venv=blocker / "x" / "vllm-0.32.0", say=lambda _: None)


def test_an_unknown_flag_points_at_the_commands_own_help(capsys):
    from helpers import run_cli

    for argv, command in ((["bench", "--bogus"], "bench"), (["zoo", "fetch", "smollm2", "--nope"], "zoo fetch")):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and err.strip().endswith(f"see `python -m engine {command} --help`"), err


def test_a_tokenizer_file_that_is_not_a_gguf_is_one_line_for_zoo_export(tmp_path):
    from engine.engines.gguf_export import tokenizer_fields
    from engine.errors import PhoenixError

    fake = tmp_path / "tok.gguf"
    fake.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(PhoenixError, match="is not a GGUF file"):
        tokenizer_fields(str(fake), tmp_path)


def test_an_eagle_config_that_is_a_string_is_one_line(tiny_dirs, tmp_path):
    import json
    import shutil

    from test_eagle3 import random_head

    from engine.decode.eagle3 import save_head
    from engine.decode.loading import load_pair
    from engine.errors import PhoenixError

    target = tiny_dirs["llama"]["target"]
    save_head(random_head(load_pair(target, None, "cpu", "float32").target, [1, 2, 3]), tmp_path / "h")
    config = json.loads((tmp_path / "h" / "config.json").read_text())
    (tmp_path / "h" / "config.json").write_text(json.dumps({**config, "eagle_config": "x"}))
    with pytest.raises(PhoenixError, match="eagle_config must be an object"):
        load_pair(target, str(tmp_path / "h"), "cpu", "float32")
    shutil.rmtree(tmp_path / "h")


def test_a_client_that_leaves_mid_upload_is_no_server_error(decoder, tmp_path, caplog):  # noqa: F811
    import logging
    import socket

    from helpers import http_server, wait_for

    service, _ = make_service(decoder, tmp_path)
    with http_server(service) as port, caplog.at_level(logging.INFO, logger="phoenix.serve"):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 5000\r\n\r\n{\"prompt\": ")  # fmt: skip
        wait_for(lambda: any("went away" in r.getMessage() for r in caplog.records), 20, "the disconnect to be seen")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "500" in r.getMessage()]


# --- the walk's findings (the dashboard), each through AppTest ------------------------------------------------


def served_run(store, status: str = "running", shadow_rate: float = 0.0, **config):
    """A run as Phoenix's server or another engine writes it: no bench config."""
    return store.create_run(
        "served", {"phoenix_serve": {"shadow_rate": shadow_rate}, **config}, "smollm2", None, 0, status=status
    )


def test_short_command_shortens_every_path_inside_vllms_json_so_each_variant_reads_apart():
    from engine.analysis.load import short_command

    def vllm(k: int) -> str:
        spec = f'{{"method":"eagle3","num_speculative_tokens":{k},"model":"/work/main/models/smollm2-eagle3"}}'
        return f"/venv/bin/python -m vllm.entrypoints.openai.api_server --model /m/smollm2 --speculative-config {spec}"

    one, four = short_command(vllm(1)), short_command(vllm(4))
    assert one != four and '"model":"smollm2-eagle3"}' in one and "/work" not in one
    assert short_command("/x/bin/llama-server -m /d/gguf/a.gguf --port 8090") == "llama-server -m a.gguf --port 8090"


def test_the_cancel_notice_says_what_a_cancel_did():
    from app.run_notes import cancel_notice

    assert "cancel asked" in cancel_notice(4, "running") and "Run #4: running;" not in cancel_notice(4, "running")
    assert cancel_notice(4, "cancelled") == "Run #4 cancelled before it started."


@pytest.mark.pages
def test_the_picker_names_the_open_runs_status_now_not_the_cached_lists(app_db):
    from apptest import open_page

    run = served_run(app_db, status="queued")
    open_page("run", run=run.id)  # the list of runs is now cached with [queued]
    app_db.set_status(run.id, "running")
    at = open_page("run", run=run.id)
    label = at.selectbox(key="pick_run")
    assert "[running]" in label.format_func(run.id) and "[queued]" not in label.format_func(run.id)


@pytest.mark.pages
def test_a_served_run_without_shadow_checks_never_promises_them(app_db):
    from apptest import open_page

    run = served_run(app_db, status="running", shadow_rate=0.0)
    infos = [i.value for i in open_page("run", run=run.id).info]
    assert not any("re-decoded target-only as the run goes" in t for t in infos)
    assert any("checks none" in t for t in infos)


@pytest.mark.pages
def test_an_engine_that_reports_totals_only_draws_no_empty_time_chart_and_no_contradiction(app_db):
    """llama.cpp's answers: drafted and accepted totals, no positions, no time split."""
    from apptest import open_page
    from helpers import request_record

    run = served_run(app_db, status="done")
    app_db.add_requests(
        [
            request_record(
                run.id, i, mode="llamacpp-ngram-simple_c1", proposed=9, accepted=5, draft_s=0.0, verify_s=0.0
            )
            for i in range(3)
        ]
    )
    at = open_page("run", run=run.id)
    captions = [c.value for c in at.caption]
    assert not any(c == "No drafted tokens in this run." for c in captions)
    assert any("totals per request, not per position" in c for c in captions)
    assert any(c.startswith("No time split") for c in captions)


@pytest.mark.pages
def test_policies_opens_on_the_newest_run_that_has_a_bandit(app_db):
    from apptest import open_page

    served_run(app_db, status="done")  # newest, and no bandit in it
    at = open_page("policies")
    assert at.query_params["run"] in ("2", ["2"])  # build_db's newest bandit run, not the served one


def test_the_form_refuses_chat_for_a_target_without_a_chat_template():
    from app.actions import field_checks
    from engine.bench.config import BenchConfig

    cfg = BenchConfig(target="embedded", draft="embedded", prompt_format="chat", modes=["target", "model_2"])
    assert "has no chat template" in field_checks(cfg, "0,2")["prompt_format"]
    assert "prompt_format" not in field_checks(BenchConfig(target="embedded", draft="embedded"), "0,2")
