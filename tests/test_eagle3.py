"""The EAGLE-3 head: exact drafting through Phoenix's loop, the vLLM/SGLang checkpoint format both ways, and
training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.decode.decoder import Decoder
from engine.decode.eagle3 import Eagle3Head, default_taps, head_config_for, load_head, save_head, vocab_maps
from engine.decode.loading import check_same_tokenizer_files, load_pair
from engine.errors import PhoenixError
from engine.modes import Mode
from engine.train.config import HeadBuildConfig
from engine.train.eagle3 import Sample, expected_length, kept_coverage, pick_vocab

PROMPTS = [
    'def add(a, b):\n    """Return a + b."""\n',
    "import os\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n",
]
KS = [1, 2, 4, 8]
EXPECTED_KEYS = {
    "fc.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.post_attention_layernorm.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
}


def random_head(target, vocab_ids, seed: int = 3, scale: float = 4.0) -> Eagle3Head:
    torch.manual_seed(seed)
    head = Eagle3Head(head_config_for(target.config, len(vocab_ids)))
    d2t, t2d = vocab_maps(torch.tensor(vocab_ids), head.config.vocab_size)
    head.d2t.copy_(d2t)
    head.t2d.copy_(t2d)
    with torch.no_grad():
        for p in head.parameters():
            if p.dim() > 1:
                p.mul_(scale)  # decisive argmaxes: the test must not hinge on float noise
    return head


def target_of(path: str):
    return load_pair(path, None, "cpu", "float32")


@pytest.fixture(scope="module")
def heads(tiny_dirs, tmp_path_factory):
    """Per target: a random head whose draft vocabulary is the target's most frequent greedy tokens, so drafts are
    accepted now and then and every accept/crop path runs."""
    root = tmp_path_factory.mktemp("heads")
    out = {}
    targets = {arch: tiny_dirs[arch]["target"] for arch in ("qwen3", "llama", "mistral")}
    for name, target in targets.items():
        pair = target_of(target)
        dec = Decoder(pair)
        counts: dict[int, int] = {}
        for prompt in PROMPTS:
            for tok in dec.run(dec.encode(prompt), 0, 40).output_ids:
                counts[tok] = counts.get(tok, 0) + 1
        vocab = sorted(sorted(counts, key=lambda t: -counts[t])[:3])
        path = root / name
        save_head(random_head(pair.target, vocab), path, torch.float32)
        out[name] = (target, str(path))
    return out


# each architecture once in the full suite; the working loop (-m fast) keeps llama, the code path is the same
ARCHS = ["llama", pytest.param("qwen3", marks=pytest.mark.e2e), pytest.param("mistral", marks=pytest.mark.e2e)]


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("name", ARCHS)
def test_eagle3_drafting_equals_target_only_for_every_k(heads, name, cache):
    target, head = heads[name]
    pair = load_pair(target, head, "cpu", "float32")
    dec, plain = Decoder(pair, cache=cache), Decoder(pair)
    accepted = 0
    for prompt in PROMPTS:
        ids = dec.encode(prompt)
        reference = plain.run(ids, 0, 40).output_ids
        for k in KS:
            stats = dec.run(ids, k, 40, "eagle3")
            assert stats.output_ids == reference, f"{name} eagle3 k={k} diverged"
            assert stats.passes > 0 and stats.proposed >= stats.accepted
            accepted += stats.accepted
    assert accepted > 0  # the accept path ran, not only rejections


def test_k_changing_between_passes_with_eagle3_still_equals_target_only(heads):
    dec = Decoder(load_pair(*heads["llama"], "cpu", "float32"))
    ids = dec.encode(PROMPTS[1])
    reference = dec.run(ids, 0, 40).output_ids
    schedule = iter([3, 0, 1, 5, 2, 0, 8] * 20)
    stats = dec.run(ids, 4, 40, "eagle3", choose_k=lambda s: next(schedule))
    assert stats.output_ids == reference
    assert 0 in stats.k_per_pass and 5 in stats.k_per_pass


def test_incremental_drafts_equal_the_training_unroll_on_the_same_tokens(heads):
    """The cache, positions and fed-back states at draft time are exactly what training unrolls (step s attends
    to the real prefix plus its own chain)."""
    from engine.train.eagle3 import _ttt_attention

    pair = load_pair(*heads["llama"], "cpu", "float32")
    dec, head, target = Decoder(pair), pair.draft, pair.target
    ids = dec.encode(PROMPTS[0])
    full = ids + dec.run(ids, 0, 20).output_ids
    with torch.no_grad():
        hs = target(input_ids=torch.tensor([full]), output_hidden_states=True).hidden_states
        feats = torch.cat([hs[i][0] for i in head.config.taps], -1)
        for L in (len(ids) + 3, len(full) - 6):
            drafter = dec.drafter("eagle3")
            drafter.observe(feats[: L - 1])
            drafter.reset(full[: L - 1])
            drafted = drafter.propose(full[:L], 4)
            tokens = torch.tensor([full[:L] + drafted])
            a, J = L - 2, L + 2
            f = torch.cat([feats[: L - 1], torch.zeros(J - (L - 1), feats.shape[1])])[None, :J]
            emb, hidden, pos = target.get_input_embeddings()(tokens[:, 1 : J + 1]), head.fc(f), torch.arange(J)[None]
            keys, values, unrolled = [], [], []
            for s in range(4):
                q, k, v = head.qkv(emb, hidden, pos)
                keys.append(k)
                values.append(v)
                pre = head.after_attention(_ttt_attention(q, keys, values), hidden)
                unrolled.append(int(head.to_target_ids(head.logits(pre)[0, a + s].argmax())))
                hidden = torch.cat([torch.zeros_like(pre[:, :1]), pre[:, :-1]], 1)
            assert drafted == unrolled


def test_the_taps_come_from_the_passes_the_target_runs_anyway(heads, monkeypatch):
    pair = load_pair(*heads["qwen3"], "cpu", "float32")
    dec = Decoder(pair)
    calls = []
    original = pair.target.forward
    monkeypatch.setattr(
        pair.target, "forward", lambda *a, **kw: calls.append(kw.get("output_hidden_states")) or original(*a, **kw)
    )
    stats = dec.run(dec.encode(PROMPTS[0]), 4, 30, "eagle3")
    assert len(calls) == stats.passes + 1  # prefill + one verify per pass: no extra target forward
    assert all(calls)


def test_a_saved_head_has_exactly_the_keys_and_config_vllm_reads(tiny_dirs, tmp_path):
    target = target_of(tiny_dirs["llama"]["target"]).target
    kept = [5, 9, 17, 40, 41, 300]
    save_head(random_head(target, kept), tmp_path / "h")
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["draft_vocab_size"] == 6 and cfg["target_hidden_size"] == target.config.hidden_size
    assert cfg["vocab_size"] == target.config.vocab_size
    tensors = load_file(str(tmp_path / "h" / "model.safetensors"))
    assert set(tensors) == EXPECTED_KEYS  # the embedding is the target's: not saved
    assert tensors["d2t"].dtype == torch.int64 and tensors["t2d"].dtype == torch.bool
    assert (torch.arange(6) + tensors["d2t"]).tolist() == kept  # target id = i + d2t[i]
    assert tensors["t2d"].nonzero().flatten().tolist() == kept
    assert tensors["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * target.config.hidden_size
    assert tensors["fc.weight"].shape == (target.config.hidden_size, 3 * target.config.hidden_size)


def test_a_head_round_trips_through_the_standard_format(tiny_dirs, tmp_path):
    target = target_of(tiny_dirs["qwen3"]["target"]).target
    head = random_head(target, list(range(0, 200, 3)))
    save_head(head, tmp_path / "h", torch.float32)
    loaded = load_head(tmp_path / "h", "h", torch.float32)
    for name, tensor in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_a_head_from_another_exporter_loads_unchanged(tiny_dirs, tmp_path):
    """Some exporters name the layer layers.0, ship embed_tokens and leave t2d out (vLLM skips it)."""
    pair = target_of(tiny_dirs["llama"]["target"])
    head = random_head(pair.target, [1, 2, 3, 50])
    save_head(head, tmp_path / "h", torch.float32)
    tensors = {
        k.replace("midlayer.", "layers.0."): v
        for k, v in load_file(str(tmp_path / "h" / "model.safetensors")).items()
        if k != "t2d"
    }
    tensors["embed_tokens.weight"] = pair.target.get_input_embeddings().weight.detach().clone()
    (tmp_path / "h" / "model.safetensors").unlink()
    save_file(tensors, str(tmp_path / "h" / "model.safetensors"))
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    del cfg["eagle_config"]
    (tmp_path / "h" / "config.json").write_text(json.dumps(cfg))
    loaded = load_pair(tiny_dirs["llama"]["target"], str(tmp_path / "h"), "cpu", "float32").draft
    assert torch.equal(loaded.t2d.nonzero().flatten(), torch.tensor([1, 2, 3, 50]))
    assert loaded.config.taps == default_taps(pair.target.config.num_hidden_layers)
    assert torch.equal(loaded.midlayer.mlp.up_proj.weight, head.midlayer.mlp.up_proj.weight)


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("target_hidden_size", 32, "hidden size"),
        ("hidden_size", 32, "hidden size"),
        ("vocab_size", 999, "vocabulary"),
        ("eagle_config", {"eagle_aux_hidden_state_layer_ids": [0, 1, 9]}, "taps"),
    ],
)
def test_a_head_made_for_another_target_is_one_clear_error(tiny_dirs, tmp_path, field, value, words):
    target = target_of(tiny_dirs["llama"]["target"]).target
    save_head(random_head(target, [1, 2]), tmp_path / "h")
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    cfg[field] = value
    (tmp_path / "h" / "config.json").write_text(json.dumps(cfg))
    for check in (
        lambda: load_pair(tiny_dirs["llama"]["target"], str(tmp_path / "h"), "cpu", "float32"),
        lambda: check_same_tokenizer_files(Path(tiny_dirs["llama"]["target"]), tmp_path / "h", "t", "h"),
    ):
        with pytest.raises(PhoenixError) as err:
            check()
        assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "change,words",
    [
        (lambda cfg: cfg | {"rope_scaling": "linear"}, "rope_scaling must be an object, got str"),
        (lambda cfg: cfg | {"eagle_config": "2,15,27"}, "eagle_config must be an object, got str"),
        (lambda cfg: cfg | {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ["a", "b", "c"]}}, "layer numbers"),
        (lambda cfg: [cfg], "holds a list, not an object"),
    ],
)
def test_eagle3_config_fields_of_the_wrong_type_are_one_line(tiny_dirs, tmp_path, change, words):
    """Round four: each of these was a traceback."""
    from engine.decode.eagle3 import load_head

    target = target_of(tiny_dirs["llama"]["target"]).target
    save_head(random_head(target, [1, 2]), tmp_path / "h")
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    (tmp_path / "h" / "config.json").write_text(json.dumps(change(cfg)))
    with pytest.raises(PhoenixError) as err:
        load_head(tmp_path / "h", "--draft", torch.float32)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "drafter,engine,words", [("model", "phoenix", "--drafter eagle3"), ("eagle3", "hf", "eagle3_<k>")]
)
def test_a_head_used_as_a_draft_model_is_one_clear_error(heads, drafter, engine, words):
    dec = Decoder(load_pair(*heads["llama"], "cpu", "float32"))
    with pytest.raises(PhoenixError, match=words.replace("<", ".").replace(">", ".")):
        dec.run(dec.encode(PROMPTS[0]), 2, 8, drafter, engine)


def test_eagle3_without_a_head_names_the_head_to_pass(tiny_dirs):
    dec = Decoder(load_pair(tiny_dirs["llama"]["target"], tiny_dirs["llama"]["draft"], "cpu", "float32"))
    with pytest.raises(PhoenixError, match="smollm2-eagle3"):
        dec.run(dec.encode(PROMPTS[0]), 2, 8, "eagle3")


def test_eagle3_modes_draft_with_the_head_and_need_a_draft():
    mode = Mode.parse("eagle3_4")
    assert (mode.kind, mode.k, mode.drafter("model"), mode.loop) == ("eagle3", 4, "eagle3", "phoenix")
    assert mode.needs_draft_model("ngram") and Mode.parse("model_2").needs_draft_model("eagle3")


def test_the_draft_vocabulary_is_the_most_frequent_answer_tokens_and_reports_coverage():
    tokens = torch.tensor([7, 7, 7, 7, 3, 3, 9, 1, 1, 1])
    sample = Sample(tokens, torch.zeros(9, 6), torch.zeros(9, 2), prompt_len=0)
    ids, info = pick_vocab([sample], 2, 16)
    assert ids.tolist() == [1, 7]  # sorted ids, so d2t offsets are non-negative
    assert info["coverage"][2] == 0.7 and info["answer_tokens"] == 10


def test_a_kept_vocabulary_reports_its_coverage_of_answers_and_of_text_apart():
    answers = Sample(torch.tensor([1, 2, 3, 3]), torch.zeros(3, 6), torch.zeros(3, 2), prompt_len=1)
    text = Sample(torch.tensor([5, 6, 7, 3]), torch.zeros(3, 6), torch.zeros(3, 2), prompt_len=0, greedy=False)
    info = kept_coverage([answers, text], torch.tensor([3, 5]), 10)
    assert info["coverage"] == {2: 0.6667} and info["text_coverage"] == 0.5 and info["text_tokens"] == 4
    # a stage on traffic or text alone answered nothing: no answer coverage, not a coverage of 0
    assert kept_coverage([text], torch.tensor([3, 5]), 10)["coverage"] == {2: None}


def test_the_draft_vocabulary_holds_no_id_the_data_never_saw_and_the_fixed_text_ranks_the_rest():
    answers = Sample(torch.tensor([7, 7, 3, 9]), torch.zeros(3, 6), torch.zeros(3, 2), prompt_len=0)
    text = Sample(torch.tensor([4, 4, 4, 5, 9]), torch.zeros(4, 6), torch.zeros(4, 2), prompt_len=0, greedy=False)
    ids, info = pick_vocab([answers, text], 8, 32)  # 8 asked for, 5 ids seen anywhere: no padding
    assert ids.tolist() == [3, 4, 5, 7, 9] and info["never_seen_left_out"] == 3 and info["distinct_with_text"] == 5
    ids, _ = pick_vocab([answers, text], 3, 32)  # answers first (7; then 9 before 3: the text saw 9), then text
    assert ids.tolist() == [3, 7, 9]
    ids, _ = pick_vocab([answers, text], 4, 32)
    assert ids.tolist() == [3, 4, 7, 9]  # the text's most frequent next
    tied = Sample(torch.tensor([6, 2]), torch.zeros(1, 6), torch.zeros(1, 2), prompt_len=0)
    assert pick_vocab([tied], 1, 16)[0].tolist() == [2]  # a tie goes to the lower id, not to argsort's order


def test_prompt_tokens_do_not_count_toward_the_vocabulary():
    sample = Sample(torch.tensor([5, 5, 5, 5, 2]), torch.zeros(4, 6), torch.zeros(4, 2), prompt_len=4)
    ids, _ = pick_vocab([sample], 1, 8)
    assert ids.tolist() == [2]


def test_training_prompts_never_hold_a_held_out_prompt(monkeypatch):
    from engine.prompts.sets import humaneval, spec_bench, split
    from engine.train import head_data
    from engine.train.eagle3_build import training_prompts

    # a third of the standard library is enough stdlib rows to check; parsing all of it cost 1.5 s of the loop
    texts = head_data.stdlib_texts()
    monkeypatch.setattr(head_data, "stdlib_texts", lambda: texts[: len(texts) // 3])
    rows, data = training_prompts(HeadBuildConfig(stdlib_prompts=40))
    held = split(humaneval())[1] + spec_bench("test", later_turns=True)
    ids, texts = {r.id for r in rows}, [r.text + r.earlier for r in rows]
    assert not ids & {p.id for p in held}
    assert not any(p.text.strip() in t for p in held for t in texts)
    assert data["spec_bench"] == 240 and data["humaneval"] == 114 and data["second_turns"] == 40
    assert data["code_styles"] == 120 and data["stdlib"] == 40


@pytest.mark.train
def test_training_raises_held_out_agreement_and_a_resumed_stage_continues_the_build(tmp_path, monkeypatch):
    from engine.train import eagle3_build
    from engine.train.eagle3_build import build_head

    cfg = HeadBuildConfig(
        target="embedded",
        out=str(tmp_path / "head"),
        humaneval_prompts=12,
        spec_bench_prompts=0,
        second_turns=0,
        code_style_prompts=0,
        stdlib_prompts=6,
        max_new_tokens=32,
        epochs=8,
        draft_vocab_size=256,
        eval_prompts=4,
        gen_batch=6,
        ttt_steps=2,
        answers_dir=str(tmp_path / "answers"),
        state_dir=str(tmp_path / "state"),
        fixed_text_tokens=2000,
    )
    result = build_head(cfg)
    first = result["held_out_top1_after"]["humaneval-test"][0]
    assert first > result["held_out_top1_before"]["humaneval-test"][0] + 0.2
    card = json.loads((tmp_path / "head" / "phoenix_card.json").read_text())
    assert card["stage_seconds"]["training"] > 0 and card["draft_vocab"]["size"] == 256
    assert set(card["held_out"]) == {"humaneval-test", "spec-bench-test", "code-edits (no training data)"}
    predicted = card["held_out"]["humaneval-test"]["expected_length_k3"]  # from the agreement, no forward of its own
    assert predicted["after"] == expected_length(card["held_out"]["humaneval-test"]["after"]) > predicted["before"]
    dec = Decoder(load_pair("embedded", str(tmp_path / "head"), "cpu", "float32"))
    ids = dec.encode(PROMPTS[0])
    assert dec.run(ids, 4, 40, "eagle3").output_ids == dec.run(ids, 0, 40).output_ids

    # stage 2 adds a source: only that one is answered, the rest come from the caches; the optimizer continues
    answered_now: list[int] = []
    real = eagle3_build.answer_with_taps
    monkeypatch.setattr(
        eagle3_build,
        "answer_with_taps",
        lambda t, prompts, *a, **kw: answered_now.append(len(prompts)) or real(t, prompts, *a, **kw),
    )
    published = eagle3_build.weights_sha(tmp_path / "head")
    second = build_head(
        HeadBuildConfig(**{**vars(cfg), "resume": True, "code_style_prompts": 6, "epochs": 2, "lr": 5e-4})
    )
    assert answered_now == [6] and second["stage"] == 2
    card = json.loads((tmp_path / "head" / "phoenix_card.json").read_text())
    assert [st["stage"] for st in card["stages"]] == [1, 2] and card["stages"][1]["optimizer"] == "continued"
    assert card["stages"][1]["resumed_from_sha256"] == published and card["stages"][1]["data"]["code_styles"] == 6
    assert list(card["draft_vocab"]["coverage"]) == ["256"]  # this stage's answers under the vocabulary it kept
    assert card["stages"][1]["held_out"]["humaneval-test"]["before"][0] == pytest.approx(first, abs=0.02)
    assert (tmp_path / "state" / f"head-{published[:16]}" / "model.safetensors").exists()  # the old head, kept
    dec = Decoder(load_pair("embedded", str(tmp_path / "head"), "cpu", "float32"))
    assert dec.run(ids, 4, 40, "eagle3").output_ids == dec.run(ids, 0, 40).output_ids


def test_resuming_where_no_head_was_built_is_one_clear_line(tmp_path):
    from engine.train.eagle3_build import build_head

    cfg = HeadBuildConfig(
        target="embedded",
        out=str(tmp_path / "none"),
        resume=True,
        humaneval_prompts=1,
        spec_bench_prompts=0,
        second_turns=0,
        code_style_prompts=0,
        stdlib_prompts=0,
        eval_prompts=1,
        answers_dir=str(tmp_path / "a"),
        state_dir=str(tmp_path / "s"),
    )
    with pytest.raises(PhoenixError, match="no head at .* to continue"):
        build_head(cfg)


def test_a_held_out_prompt_among_the_training_texts_stops_the_build_before_any_work(monkeypatch):
    from engine.prompts.sets import humaneval, split
    from engine.train import head_data

    leaked = split(humaneval())[1][0].text
    monkeypatch.setattr(head_data, "stdlib_functions", lambda texts: ["def ok():\n    pass\n", "# copy\n" + leaked])
    with pytest.raises(PhoenixError, match="held-out"):
        head_data.training_prompts(HeadBuildConfig(stdlib_prompts=2, code_style_prompts=0))


def test_training_keeps_the_last_prompt_tokens_and_the_whole_answer():
    from engine.train.eagle3 import clip_prompt

    tokens = torch.arange(10)
    sample = Sample(tokens, torch.arange(9).float()[:, None].repeat(1, 6), torch.zeros(9, 2), prompt_len=6)
    clipped = clip_prompt(sample, 2)
    assert clipped.tokens.tolist() == [4, 5, 6, 7, 8, 9] and clipped.prompt_len == 2
    assert clipped.feats[0, 0] == 4  # taps stay aligned with their tokens
    assert clip_prompt(sample, 8) is sample


def test_fixed_text_taps_match_one_forward_per_text_whatever_the_batch(tiny_dirs):
    from engine.train.eagle3 import text_with_taps

    target = target_of(tiny_dirs["llama"]["target"]).target
    texts = [list(range(5, 25)), list(range(40, 47)), list(range(100, 112))]
    samples = text_with_taps(target, texts, batch=3, taps=(0, 1, 2))
    by_len = {len(s.tokens): s for s in samples}
    for ids in texts:
        with torch.no_grad():
            hs = target(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        sample = by_len[len(ids)]
        assert sample.tokens.tolist() == ids and not sample.greedy
        expected = torch.cat([hs[i][0, :-1] for i in (0, 1, 2)], -1).to(torch.bfloat16)
        assert torch.allclose(sample.feats.float(), expected.float(), atol=2e-2, rtol=2e-2)


def test_a_malformed_resume_state_continues_from_the_published_weights_with_one_line(tmp_path, capsys):
    from engine.decode.loading import load_model
    from engine.train.eagle3_build import resumed, weights_sha

    target, _ = load_model("embedded", "target", "cpu", torch.float32)
    capsys.readouterr()  # the loader's progress bar is not the line under test
    taps = default_taps(target.config.num_hidden_layers)
    head = random_head(target, [1, 2, 3, 50])
    head.config.taps = taps
    save_head(head, tmp_path / "head", torch.float32)
    state = tmp_path / "state" / f"head-{weights_sha(tmp_path / 'head')[:16]}.pt"
    state.parent.mkdir()
    state.write_bytes(b"not a torch file")
    cfg = HeadBuildConfig(out=str(tmp_path / "head"), state_dir=str(state.parent), resume=True)
    loaded, vocab_ids, optimizer, stages, sha = resumed(cfg, target, taps)
    assert optimizer is None and stages == [] and sha == weights_sha(tmp_path / "head")
    assert vocab_ids.tolist() == [1, 2, 3, 50]
    assert torch.equal(loaded.fc.weight, head.fc.weight)
    err = capsys.readouterr().err
    assert "unreadable" in err and "continuing from the published weights" in err and len(err.strip().splitlines()) == 1


def test_bf16_training_autocasts_over_fp32_weights_and_learns_as_fp32_does(tiny_dirs):
    """The Qwen head's preset trains under bf16 autocast (4x the fp32 matmul rate on AVX512-BF16): its loss at the
    same weights is fp32's within bf16 rounding, its master weights stay fp32, and both learn the same data."""
    from engine.train.eagle3 import Trainer, train

    target = target_of(tiny_dirs["qwen2"]["target"]).target
    H, vocab = target.config.hidden_size, target.config.vocab_size
    gen = torch.Generator().manual_seed(5)
    samples = []
    for _ in range(6):
        tokens = torch.randint(0, 64, (40,), generator=gen)
        feats = torch.randn(39, 3 * H, generator=gen) * 3
        # the label is a function of the taps (the first one is the state the target's output layer reads)
        samples.append(Sample(tokens, feats.bfloat16(), feats[:, :H].bfloat16(), 4))
    results = {}
    for dtype in ("float32", "bfloat16"):
        torch.manual_seed(0)
        head = Eagle3Head(head_config_for(target.config, 64))
        d2t, t2d = vocab_maps(torch.arange(64), vocab)
        head.load_state_dict({"d2t": d2t, "t2d": t2d}, strict=False)
        cfg = HeadBuildConfig(train_dtype=dtype, ttt_steps=2, epochs=10, batch_tokens=80, lr=1e-2, warmup_steps=2)
        trainer = Trainer(head, target.get_input_embeddings(), target.get_output_embeddings().weight[:64].float(), cfg)
        start = trainer.losses(samples)[0].item()
        result = train(trainer, samples, cfg)
        assert all(p.dtype == torch.float32 for p in head.parameters())
        results[dtype] = (start, result["history"][-1]["loss"], result["history"][0]["loss"])
    assert results["bfloat16"][0] == pytest.approx(results["float32"][0], rel=0.02)
    for start, end, _ in results.values():
        assert end < start * 0.8  # both learn
    assert results["bfloat16"][1] == pytest.approx(results["float32"][1], rel=0.05)


def test_the_expected_acceptance_length_chains_the_agreement_of_each_unroll_step():
    assert expected_length([1.0, 1.0], k=3) == 4.0  # every draft accepted: k drafts and the bonus token
    assert expected_length([0.5, 0.5, 0.5], k=3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_length([0.8, 0.5], k=3) == pytest.approx(1 + 0.8 + 0.4 + 0.2)  # past the unroll: its last step
    assert expected_length([], k=3) == 1.0 and expected_length([0.9], k=0) == 1.0
