"""Published figures generated from their runs (engine.export.published): README's and the findings' blocks agree
with benchmarks/results.db, a figure typed over is caught, and a goal is met only where its interval clears it."""

from __future__ import annotations

import shutil

import pytest

from engine.cli.options import open_store
from engine.export import published
from engine.paths import RESULTS_DB, ROOT

pytestmark = pytest.mark.e2e  # opens the committed database


@pytest.fixture(scope="module")
def store():
    return open_store(f"sqlite:///{RESULTS_DB}", create_if_empty=False)


def test_every_published_block_agrees_with_its_run(store):
    assert published.generate(store, check=True, say=lambda _: None) == 0


def test_a_figure_typed_over_inside_a_block_fails_the_check_and_names_it(store, tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    text = readme.read_text()
    start = text.index("<!-- generated: fit 189 -->")
    end = text.index("<!-- /generated -->", start)
    readme.write_text(text[:start] + "<!-- generated: fit 189 -->a = 0.84 per position at c = 0.22" + text[end:])
    said: list[str] = []
    assert published.generate(store, paths=[readme], check=True, say=said.append) == 1
    assert any("fit 189" in line for line in said)
    assert published.generate(store, paths=[readme], say=said.append) == 0  # writing puts the run's figure back
    assert "a = 0.888 per position at c = 0.252" in readme.read_text()


def test_a_goal_is_met_only_where_its_interval_clears_it(store):
    fig = published.Figures(store)
    assert "point estimate only" in published.goal(fig, "189 model_5 2.0")  # 2.05x, interval 1.75-2.23
    assert published.goal(fig, "189 model_3 1.3").startswith("**met** (")  # 1.89x, interval above 1.3
    assert published.goal(fig, "261 eagle3_3 2.0").startswith("**missed**")


def test_the_break_even_check_reports_the_fp32_miss_the_hand_figures_hid(store):
    text = published.fit_check(published.Figures(store), "190")
    assert "2.10x predicted, 1.81x measured (16%)" in text and "not within 10%" in text


def test_a_block_citing_a_run_the_store_lacks_is_one_line(store):
    from engine.errors import PhoenixError

    with pytest.raises(PhoenixError, match="does not hold"):
        published.render("<!-- generated: fit 99999 --><!-- /generated -->", published.Figures(store))


def test_the_terms_of_a_withdrawn_comparison_say_why_it_was_unequal(store):
    text = published.terms(published.Figures(store), "263-279")
    assert "Not on equal terms" in text and "vLLM's default (one core reserved" in text and "Q4_K_M" in text


def test_the_tuner_against_its_own_off_is_judged_by_its_blocks_interval(store):
    text = published.tuner(published.Figures(store), "284-288")  # the SmolLM2 cold sitting, pass A
    rows = [line for line in text.splitlines() if line.startswith("| c=")]
    assert len(rows) == 5 and all(("met" in r) or ("missed" in r) or ("noise" in r) or ("cannot" in r) for r in rows)
    assert "| c=16 |" in text and "one block: no interval" in rows[-1]  # 16 prompts at c = 16: a single block
    with pytest.raises(Exception, match="no level with the tuner"):
        published.tuner(published.Figures(store), "289-293")  # vLLM's runs: no tuner there


def test_the_fleet_plan_is_judged_only_at_saturated_out_of_sample_levels(store):
    from engine.export.published_fleet import fleet_plan

    text = fleet_plan(published.Figures(store), "349-351,354-356 343")
    rows = [line for line in text.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert len(rows) == 12 and all(r.endswith("|") for r in rows)
    assert all("| no |" in r for r in rows if r.startswith("| 1 | 1 |") or r.startswith("| 2 | 1 |"))  # 1/s: no queue
    assert all("| yes |" in r for r in rows if r.split("|")[2].strip() == "4")
    assert "8 rows of level and variant" in text and "**not met**" in text  # TTFT under a queue, reported
    old = fleet_plan(published.Figures(store), "227-229,233-235")  # the source served the 1-replica fleet
    assert "(in sample)" in old and "2 rows of level and variant" in old


def test_two_settings_in_alternating_rounds_get_a_verdict_only_where_every_round_agrees(store):
    from engine.export.published_ab import rounds

    text = rounds(published.Figures(store), "none 363-365,378-380 366-368,372-374 plain tcmalloc")
    assert text.count("tcmalloc faster") == 3 and "#363 #378 #366 #372" in text
    same = rounds(published.Figures(store), "none 363-365,378-380 363-365,378-380 plain again")
    assert same.count("mixed: no verdict") == 3  # a setting against itself is never faster


def test_a_first_sweep_is_judged_against_the_second_by_the_interval_of_their_ratio(store):
    from engine.errors import PhoenixError
    from engine.export.published_ab import first_sweep

    fig = published.Figures(store)
    text = first_sweep(fig, "857-861 868-872")  # SmolLM2 on the Xeon: two servers' sweeps, the tuner and off
    rows = [line for line in text.splitlines() if line.startswith("| c=")]
    assert len(rows) == 10 and [r.split("|")[1].strip() for r in rows[::2]] == ["c=1", "c=2", "c=4", "c=8", "c=16"]
    assert all(any(v in r for v in ("| met |", "| missed |", "| inside its noise |", "| cannot tell |")) for r in rows)
    same = first_sweep(fig, "857-861 857-861")  # a sweep against itself: ratio 1 at every level, inside 5%
    assert all("1.00x (1.00-1.00) | met |" in r or "| cannot tell |" in r for r in same.splitlines() if "| c=" in r)
    with pytest.raises(PhoenixError, match="each level once"):
        first_sweep(fig, "857-861 868-871")


def test_a_generated_mode_table_gives_per_position_acceptance_in_vllms_meaning(store):
    # suffix trees draft a varying length: over the passes that drafted at all, deeper positions fall (vLLM's
    # figure, and what findings typed by hand); over the passes that drafted that deep they would not
    text = published.BLOCKS["modes"](published.Figures(store), "168 suffix_16 positions=4")
    assert "of drafting passes" in text and text.strip().endswith("| 0.39 0.19 0.09 0.06 |")


def test_a_levels_table_gives_each_setting_against_off_and_marks_a_dead_setting_failed(store):
    fig = published.Figures(store)
    text = published.BLOCKS["levels"](fig, "271-274")  # llama.cpp on Qwen: its EAGLE-3 server died on every request
    rows = [line for line in text.splitlines() if line.startswith("| c=")]
    assert len(rows) == 4 and all("| failed |" in r for r in rows)  # never a 0 tok/s line
    assert rows[0].startswith("| c=1 (run #271) | 17.2 | failed | 16.6 (0.97) |")
    tuned = published.BLOCKS["levels"](fig, "180-181")  # the tuner against the best of every other setting
    assert "eagle3-auto / best other setting" in tuned and tuned.strip().splitlines()[-1].endswith("| 1.04 | 0.97 |")
    with pytest.raises(Exception, match="several engines"):
        published.BLOCKS["levels"](fig, "203-212")


def test_best_settings_name_each_servers_weights_and_take_phoenixs_from_its_server_run(store):
    fig = published.Figures(store)
    text = published.BLOCKS["best-setting"](fig, "Phoenix=275-279 vLLM=263-270 llama.cpp=271-274")
    assert "Phoenix (bfloat16)" in text and "llama.cpp (Q4_K_M)" in text  # a 4-bit GGUF is not bf16
    assert "| 8 | none 25.1 | none 18.1 | none 31.5 | 1.39 | 0.80 |" in text
    assert "weights not recorded" in published.BLOCKS["best-setting"](fig, "Phoenix=276-279 vLLM=263-270")


def test_a_servers_history_reads_each_sweep_from_its_runs(store):
    text = published.BLOCKS["history"](published.Figures(store), "eagle3-k3 before=110-114 after=161-165")
    assert "| before (#110-#114) | after (#161-#165) |" in text
    assert "| 16 | 169.1 / 144.4; 1413 ms | 239.9 / 197.5; 687 ms |" in text


def test_a_lab_section_table_reads_every_cell_from_its_run_and_names_a_bandit_by_its_policy(store):
    fig = published.Figures(store)
    text = published.BLOCKS["lab-runs"](fig, "189,190,191 model_5,bandit")
    assert "| draft model | `model_5` | 2.05x (1.75-2.23), 4.51, 7/10 |  |  |" in text  # a mode a run lacks: empty
    assert "| epsilon-greedy over (drafter, k) | `bandit` |" in text and "**" not in text  # no best without a test
    with pytest.raises(Exception, match="none of runs"):
        published.BLOCKS["lab-runs"](fig, "189,190 eagle3_3")


def test_settings_at_fixed_rates_are_read_by_latency_and_goodput_with_their_slo(store):
    text = published.BLOCKS["rates"](published.Figures(store), "122-125")
    assert "| 0.5 (#122) | 2.85 / 43 | 1.91 / 28 |" in text and "tok/s" not in text  # never throughput at a rate
    assert "| unbounded (all at once) (#125) |" in text and "TTFT ≤ 2000 ms, TPOT ≤ 200 ms" in text


def test_engines_at_fixed_rates_are_compared_by_latency_with_an_interval_over_requests(store):
    fig = published.Figures(store)
    text = published.BLOCKS["rates-sitting"](fig, "516-518,525-527")  # the EPYC's fourth sitting: one pass each
    one = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    assert "tok/s" not in text  # never throughput at a rate
    assert "eagle3-k3 0.99 (13, 1.04, 0%)" in one and "eagle3-auto 2.00 (27, 1.00, 0%)" in one  # each engine's fastest
    assert "| vllm 2.02x (1.67-2.51) | vllm best |" in one  # the slower's E2EL p50 over the faster's, bootstrapped
    pooled = published.BLOCKS["rates-sitting"](fig, "974-976,978-983,985-987")  # the Xeon's: two passes each
    assert "#974 #978 #981 #985" in pooled and pooled.count("2 passes") == 12  # 2 engines x 2 settings x 3 rates
    with pytest.raises(Exception, match="rates-sitting"):
        published.sitting(fig, "516-518,525-527")  # a rate's verdict is latency: the refusal names the block


def test_the_tuner_is_judged_against_the_best_of_off_and_every_fixed_k_in_its_blocks(store):
    text = published.BLOCKS["tuner-best"](published.Figures(store), "989-993")
    rows = [line for line in text.splitlines() if line.startswith("| c=")]
    assert len(rows) == 5 and all("none " in r and "eagle3-k1 " in r and "eagle3-k3 " in r for r in rows)
    assert rows[0].split(" | ")[2] == "eagle3-k3" and rows[4].split(" | ")[2] == "none"  # the best differs by load
    assert all(r.split(" | ")[5] in ("met", "missed", "inside its noise") for r in rows)
    with pytest.raises(Exception, match="no level with the tuner beside off and a fixed setting"):
        published.BLOCKS["tuner-best"](published.Figures(store), "959-963")  # off and the tuner only


def test_the_tuner_at_fixed_rates_is_judged_by_latency_against_the_best_of_the_rest(store):
    text = published.BLOCKS["tuner-rates"](published.Figures(store), "978-980,989")  # 989: a level, passed over
    rows = [line for line in text.splitlines() if line.startswith(("| 1 ", "| 2 ", "| 4 "))]
    assert len(rows) == 3 and "tok/s" not in text  # a rate's verdict is latency
    assert all(r.split(" | ")[2] == "none" and r.split(" | ")[5] in ("met", "missed", "inside its noise") for r in rows)
    pooled = published.BLOCKS["tuner-rates"](published.Figures(store), "1043-1045,1047-1049")  # two orders, pooled
    two = next(line for line in pooled.splitlines() if line.startswith("| 2 "))
    assert "#1044" in two and "#1048" in two and "none 2.83, eagle3-k1 3.04" in two and "| missed |" in two
    with pytest.raises(Exception, match="no request rate with the tuner"):
        published.BLOCKS["tuner-rates"](published.Figures(store), "989-993")


def test_only_the_rates_block_takes_request_rates_and_it_takes_nothing_else(store):
    fig = published.Figures(store)
    for name in ("levels", "tuner"):
        with pytest.raises(Exception, match="rate"):
            published.BLOCKS[name](fig, "525-527")  # Phoenix's tuner at 1, 2 and 4 requests/s
    with pytest.raises(Exception, match="rates block reads request rates only"):
        published.BLOCKS["rates"](fig, "501-505")


def test_a_pass_cost_table_reads_llamacpps_own_counts_and_refuses_a_mode_that_drafted_nothing(store):
    fig = published.Figures(store)
    text = published.BLOCKS["pass-cost"](fig, "64:llamacpp-draft-eagle3-k2_c1 68:llamacpp-ngram-simple-n4-m4_c1")
    assert "| llamacpp-draft-eagle3-k2_c1 (#64) | 2 | 1.89 | 2.35 | 0.80x | 0.80x (0.71-0.92) | 0.76 |" in text
    assert "| llamacpp-ngram-simple-n4-m4_c1 (#68) | 4 | 1.43 | 1.35 | 1.06x |" in text
    with pytest.raises(Exception, match="drafted nothing"):
        published.BLOCKS["pass-cost"](fig, "64:llamacpp-none_c1")


def test_a_drafts_positions_in_two_engines_are_paired_on_the_prompts_both_answered_in_one_definition(store):
    fig = published.Figures(store)
    text = published.BLOCKS["position-pairs"](fig, "78:eagle3_3=83:vllm-eagle3-k3_c1 80:eagle3_3=116:vllm-eagle3-k3_c1")
    assert "| EAGLE-3 head, k = 3 | bfloat16 | 20 of humaneval-test x20 | 0.623, 0.327, 0.197 (#78) |" in text
    assert "| 24 of spec-bench-test x4 per column | 0.295, 0.115, 0.031 (#80) |" in text  # #80's 4 second turns out


def test_the_prefix_cache_table_reads_each_server_runs_cache_and_refuses_a_pair_the_wrong_way_round(store):
    fig = published.Figures(store)
    text = published.BLOCKS["prefix-cache"](fig, "182:183=175:176")
    assert "| bfloat16, none | 66 ms | 308 ms | 0.21 | 11/14 | #183, #176 |" in text
    with pytest.raises(Exception, match="must cache prefixes"):
        published.BLOCKS["prefix-cache"](fig, "175:176=182:183")


def test_a_named_variant_takes_the_tuners_column_and_one_the_runs_lack_is_refused(store):
    fig = published.Figures(store)
    text = published.BLOCKS["levels"](fig, "117-121 tuned=eagle3-table")
    assert "eagle3-table / best other setting |" in text and "| 4.00 | 0.91 | 0.83 |" in text
    with pytest.raises(Exception, match="no setting eagle3-k9"):
        published.BLOCKS["levels"](fig, "117-121 tuned=eagle3-k9")


def test_the_oracle_and_column_tables_read_the_run_and_name_a_winner_only_where_an_interval_says_so(store):
    fig = published.Figures(store)
    text = published.BLOCKS["oracle"](fig, "74 hybrid_16,suffix_16 vs=suffix_16")
    assert "| hybrid_16 | 2.04x (1.86-2.82) | 1.11x (1.04-1.15) | 2.80 | 0.993 (0.887-1.000) | 9 |" in text
    assert "| the oracle | 2.31x |" in text
    text = published.BLOCKS["columns"](fig, "75 hybrid_16 vs=suffix_16,ngram_8,eagle3_3")
    assert "| Translation | 1.67x (1.49-2.37) | 0.93x (0.88-1.02) |" in text  # 0.93x, yet its interval holds 1
    assert "| faster than eagle3_3 |" in text and "slower than" not in text


def test_one_inline_figure_is_read_from_its_run_on_the_requests_named_and_judged_by_the_one_rule(store):
    fig = published.Figures(store)
    value = published.BLOCKS["value"]
    assert value(fig, "75 eagle3_3 position0 on=77") == "0.275"  # the 28 requests run #77 also answered
    assert value(fig, "72 eagle3_4 per-pass goal=2.3") == "2.10: missed"
    assert value(fig, "74 hybrid_16 x=suffix_16 goal=1.10") == "1.11x (1.04-1.13): met by the point estimate only"
    with pytest.raises(Exception, match="KIND"):
        value(fig, "74 hybrid_16 speed")


def test_the_step_floor_table_and_its_goals_are_the_benchmark_files_own(store, tmp_path):
    fig = published.Figures(store)
    file = "benchmarks/results/limits-20261202T034025.json"
    text = published.BLOCKS["limits"](fig, file)
    assert "| bfloat16 | frozen | **24.7** | 3.16 | 0.88 | 0.98 | 1.11 | 2.04 | 3.98 | 87 |" in text
    assert "V(5) ≤ 1.15: 1.07, met" in published.BLOCKS["limits-goals"](fig, file)
    with pytest.raises(Exception, match="not a file in this repository"):
        published.BLOCKS["limits"](fig, "../../etc/passwd")


def test_a_fleet_measured_twice_is_set_side_by_side_and_unpaired_runs_are_refused(store):
    fig = published.Figures(store)
    text = published.BLOCKS["fleet-repeat"](fig, "554-556,563-565=558-560,568-570")
    assert "| 1 | 4 | none | 90.2 / 108.8 (17%) |" in text
    with pytest.raises(Exception, match="as many runs"):
        published.BLOCKS["fleet-repeat"](fig, "554-556=558-559")
    with pytest.raises(Exception, match="not one rate measured twice"):
        published.BLOCKS["fleet-repeat"](fig, "554=559")


def test_a_heads_stage_table_and_vocabulary_come_from_its_card(tmp_path):
    """docs/engine.md's stage table and coverage sentence are read from the head's card, so a changed card changes
    them (and the docs check then fails until they are rewritten); a folder without a card is one line."""
    import json

    from engine.errors import PhoenixError
    from engine.export.published_head import head_stages, head_vocab

    card = {
        "stages": [
            {"stage": 1, "steps": 9, "stopped": "epochs done", "seconds": {"answers": 60, "training": 120},
             "held_out": {"a": {"before": [0.0, 0.0], "after": [0.5, 0.25]}}},
            {"stage": 2, "finished": "2026-12-06T01:00:00+00:00", "steps": 4, "stopped": "time budget",
             "seconds": {"fixed_text": 30}, "held_out": {"a": {"before": [0.5], "after": [0.625]}, "b": {}}},
        ],
        "draft_vocab": {"size": 8, "answer_tokens": 1000, "distinct": 6, "coverage": {"8": 0.95}},
    }  # fmt: skip
    (tmp_path / "phoenix_card.json").write_text(json.dumps(card))
    table = head_stages(None, str(tmp_path)).strip().splitlines()
    assert table[2] == "| 1 | not recorded | 9 (epochs done) | 1.0 / 0.0 / 2.0 | a | 0.000 / 0.000 | 0.500 / 0.250 |"
    assert table[3].startswith("| 2 | 2026-12-06 | 4 (time budget) | 0.0 / 0.5 / 0.0 | a | 0.500 | 0.625 |")
    assert table[4] == "| | | | | b | not recorded | not recorded |"
    assert head_vocab(None, str(tmp_path)) == (
        "the last stage's 1,000 answer tokens use 6 distinct ids; the head's 8 rows cover 95.0% of those tokens"
    )
    with pytest.raises(PhoenixError, match="no card"):
        head_stages(None, str(tmp_path / "missing"))


def test_a_servers_step_cost_by_batch_comes_from_its_own_pure_steps(tmp_path):
    """Only steps of one token a row with no prompt chunk beside them are a batch's step cost; a run that is not a
    Phoenix server run has no steps to read and is refused in one line."""
    from helpers import migrated

    from db.store import Store
    from engine.measure import StepRecord

    store = Store(migrated(f"sqlite:///{tmp_path / 's.db'}"))
    server = store.create_run("phoenix serve", {"phoenix_serve": {}}, "smollm2", None, 0).id
    other = store.create_run("a lab run", {}, "smollm2", None, 0).id

    def step(i, batch, seconds, width=1, prefill=0):
        return StepRecord(i, float(i), batch, width, "none", None, None, None, None, 0.0, seconds, 0, 0, batch, prefill)

    rows = [step(1, 1, 0.010), step(2, 1, 0.012), step(3, 1, 0.500, prefill=300), step(4, 16, 0.030)]
    store.add_serve_steps(server, rows + [step(5, 16, 0.090, width=4), step(6, 16, 0.032)])
    fig = published.Figures(store)
    table = published.BLOCKS["step-cost"](fig, str(server))
    assert f"| #{server} | 11.0 (2) | not served | not served | not served | 31.0 (2) | 2.82x |" in table
    with pytest.raises(Exception, match="not a Phoenix server run"):
        published.BLOCKS["step-cost"](fig, str(other))
