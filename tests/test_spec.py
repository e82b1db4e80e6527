"""The speculative loop: exact equality with target-only output, and its accounting."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from engine.decode.decoder import Decoder
from engine.decode.drafters import Drafter, ModelDrafter
from engine.decode.loading import load_pair
from engine.decode.spec import generate

PROMPTS = [
    'def add(a, b):\n    """Return a + b."""\n',
    "import os\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n",
]
KS = [0, 1, 2, 4, 8]


class _Decoders(dict):
    """Loads each named pair on first use."""

    def __init__(self, tiny_dirs):
        super().__init__()
        self.tiny_dirs = tiny_dirs
        self.references: dict = {}

    def __missing__(self, name):
        if name == "embedded":
            pair = load_pair("embedded", "embedded", "cpu", "float32")
        else:
            arch, _, near = name.partition("-")
            d = self.tiny_dirs[arch]
            pair = load_pair(d["target"], d["near" if near else "draft"], "cpu", "float32")
        self[name] = Decoder(pair)
        return self[name]

    def reference(self, name: str, prompt: str, n: int) -> list[int]:
        """Target-only output, decoded once per (pair, prompt, length) and shared by the tests."""
        key = (name, prompt, n)
        if key not in self.references:
            dec = self[name]
            self.references[key] = dec.run(dec.encode(prompt), 0, n).output_ids
        return self.references[key]


@pytest.fixture(scope="module")
def decoders(tiny_dirs):
    return _Decoders(tiny_dirs)


# Every pair with the draft model; the model-free drafters never touch the draft, so once per distinct target.
# The embedded pair (5 layers x 512, the demo's) costs as much as the tiny models together: its cases run in the
# full suite (e2e), the tiny Qwen3, Llama and Mistral pairs in the working loop too.
EMBEDDED = pytest.param("embedded", marks=pytest.mark.e2e, id="embedded")
# The draft model's agreeing ("-near") drafts on Llama and Mistral repeat Qwen3's code path: full suite only.
FULL_ONLY = {"embedded", "llama-near", "mistral-near"}
EXACTNESS = [
    pytest.param(
        d, n, marks=[pytest.mark.e2e] if n in FULL_ONLY and (d == "model" or n == "embedded") else [], id=f"{d}-{n}"
    )
    for d, names in (
        ("model", ("embedded", "qwen3", "qwen3-near", "llama", "llama-near", "mistral-near")),
        ("ngram", ("embedded", "qwen3", "llama", "mistral-near")),
        ("suffix", ("embedded", "qwen3", "llama", "mistral-near")),
    )
    for n in names
]


@pytest.mark.parametrize("drafter,name", EXACTNESS)
def test_speculative_output_equals_target_only_for_every_k(decoders, name, drafter):
    dec = decoders[name]
    for prompt in PROMPTS:
        ids = dec.encode(prompt)
        reference = decoders.reference(name, prompt, 40)
        assert len(reference) > 0
        for k in KS[1:]:  # k=0 is the reference's own call: comparing it with itself could not fail
            stats = dec.run(ids, k, 40, drafter)
            assert stats.output_ids == reference, f"{name} {drafter} k={k} diverged"
            assert stats.passes > 0 and stats.proposed >= stats.accepted


@pytest.mark.parametrize("name", [EMBEDDED, "qwen3-near", "llama-near"])
@pytest.mark.parametrize("drafter", ["model", "ngram", "suffix"])
def test_k_changing_between_passes_still_equals_target_only(decoders, name, drafter):
    """Per-pass policies switch k every pass, to 0 and back: the draft cache must catch up exactly."""
    dec = decoders[name]
    schedule = [3, 0, 8, 1, 0, 0, 5, 2, 16, 4]
    for prompt in PROMPTS:
        ids = dec.encode(prompt)
        reference = decoders.reference(name, prompt, 40)
        ks = itertools.cycle(schedule)  # a controller sees only the last pass; this one follows its script
        stats = dec.run(ids, 3, 40, drafter, choose_k=lambda last, ks=ks: next(ks))
        assert stats.output_ids == reference
        assert 0 in stats.k_per_pass  # the schedule really was followed (n-gram drafts only what it finds)
        assert drafter in ("ngram", "suffix") or max(stats.k_per_pass) > 4
        assert sum(stats.per_position_proposed[:1]) == sum(1 for k in stats.k_per_pass if k)


@pytest.mark.parametrize("name", [EMBEDDED, "qwen3-near"])
def test_the_hf_engine_matches_target_only_and_counts_acceptance(decoders, name):
    dec = decoders[name]
    ids = dec.encode(PROMPTS[0])
    reference = dec.run(ids, 0, 30).output_ids
    gc = dec.pair.draft.generation_config
    before = (gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold)
    stats = dec.run(ids, 4, 30, "model", loop="hf")
    after = (gc.num_assistant_tokens, gc.num_assistant_tokens_schedule, gc.assistant_confidence_threshold)
    assert after == before  # the draft's generation_config is left as it was found
    assert stats.prefill_s is None and stats.ttft_s is None  # not exposed by generate(): unknown, never NaN
    assert stats.output_ids == reference
    assert stats.passes > 0 and 0 < stats.proposed
    assert sum(stats.per_position_proposed) == stats.proposed
    assert stats.per_position_accepted[0] >= stats.per_position_accepted[-1]


def test_an_untimed_request_decodes_the_same_tokens_and_reads_no_clock(decoders):
    dec = decoders["qwen3-near"]
    ids = dec.encode(PROMPTS[0])
    timed, untimed = dec.run(ids, 4, 30, "model"), dec.run(ids, 4, 30, "model", timed=False)
    assert untimed.output_ids == timed.output_ids and untimed.k_per_pass == timed.k_per_pass
    assert timed.latency_s > 0 and timed.verify_s > 0
    assert (untimed.latency_s, untimed.draft_s, untimed.verify_s, untimed.prefill_s) == (0.0, 0.0, 0.0, 0.0)


def test_a_timed_requests_parts_add_up_to_its_latency(decoders):
    dec = decoders["qwen3-near"]
    s = dec.run(dec.encode(PROMPTS[0]), 4, 30, "model")
    parts = s.prefill_s + s.draft_prefill_s + s.draft_s + s.verify_s
    assert 0 < parts <= s.latency_s and parts > 0.8 * s.latency_s  # the rest is the loop's bookkeeping


def test_identical_draft_accepts_everything_so_cache_stays_in_sync(tiny_dirs):
    d = tiny_dirs["qwen3"]
    pair = load_pair(d["target"], d["target"], "cpu", "float32")
    dec = Decoder(pair)
    ids = dec.encode(PROMPTS[1])
    stats = dec.run(ids, 4, 41, "model")
    # draft == target: every drafted token must be accepted on every pass, which
    # only holds if the draft cache catches up after each full accept
    assert stats.proposed > 0 and stats.accepted == stats.proposed
    # 1 token from prefill, then 4 accepted + 1 bonus per pass
    assert stats.passes == -(-(stats.output_tokens - 1) // 5)


class CheckingDrafter(ModelDrafter):
    """A model drafter that checks each draft against a cache-free recomputation."""

    def propose(self, seq, k):
        out = super().propose(seq, k)
        expect, x = [], list(seq)
        for _ in range(k):
            with torch.no_grad():
                nxt = int(self.model(input_ids=torch.tensor([x])).logits[0, -1].argmax())
            expect.append(nxt)
            x.append(nxt)
        assert out == expect, "draft cache out of sync with the accepted sequence"
        return out


@pytest.mark.parametrize("arch", ["qwen3", "llama", "mistral"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_draft_cache_stays_in_sync_after_partial_and_full_accepts(tiny_dirs, arch, k):
    d = tiny_dirs[arch]
    pair = load_pair(d["target"], d["near"], "cpu", "float32")
    dec = Decoder(pair)
    ids = dec.encode(PROMPTS[0])
    with torch.inference_mode():
        stats = generate(pair.target, CheckingDrafter(pair.draft), ids, k, 40, dec.eos_id)
    full = sum(1 for n in stats.k_per_pass if n)  # passes that drafted
    assert 0 < stats.accepted < stats.proposed, "need a mix of partial and full accepts"
    assert full > 0


class ScriptedDrafter(Drafter):
    """Proposes the reference continuation, corrupting chosen positions per pass."""

    name = "scripted"  # all a drafter without state writes: a name and propose

    def __init__(self, reference, prompt_len, corrupt):
        self.reference, self.prompt_len, self.corrupt, self.pass_no = reference, prompt_len, corrupt, 0

    def propose(self, seq, k):
        done = len(seq) - self.prompt_len
        out = list(self.reference[done : done + k])
        bad = self.corrupt.get(self.pass_no)
        if bad is not None:
            out[bad] = (out[bad] + 1) % 512
        self.pass_no += 1
        return out


def test_per_position_accounting_matches_a_hand_checked_case(tiny_dirs):
    d = tiny_dirs["qwen3"]
    pair = load_pair(d["target"], None, "cpu", "float32")
    dec = Decoder(pair)
    ids = dec.encode(PROMPTS[0])
    ref = dec.run(ids, 0, 12).output_ids
    assert len(ref) == 12 and dec.eos_id not in ref
    drafter = ScriptedDrafter(ref, len(ids), corrupt={0: 2, 2: 0})
    with torch.inference_mode():
        stats = generate(pair.target, drafter, ids, 3, 12, dec.eos_id)
    # pass 0: 3 proposed, 3rd corrupted -> 2 accepted (+1 correction): 1+3 = 4 tokens
    # pass 1: 3 proposed, all accepted (+ bonus): 8 tokens
    # pass 2: 3 proposed, 1st corrupted -> 0 accepted (+ correction): 9 tokens
    # pass 3: budget leaves room for 2 drafts, both accepted (+ bonus): 12 tokens
    assert stats.output_ids == ref
    assert stats.k_per_pass == [3, 3, 3, 2]
    assert stats.per_position_proposed == [4, 4, 3]
    assert stats.per_position_accepted == [3, 3, 1]
    assert (stats.proposed, stats.accepted, stats.passes) == (11, 7, 4)


@pytest.fixture(scope="module")
def padded_pair(tiny_dirs, tmp_path_factory):
    """The tiny Qwen3 pair with output layers padded to different sizes, one tokenizer (as Qwen2.5-7B / -0.5B)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("padded")
    d = tiny_dirs["qwen3"]
    tok = AutoTokenizer.from_pretrained(d["target"])
    for role, src, extra in (("target", d["target"], 8), ("draft", d["near"], 64)):
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
        model.resize_token_embeddings(len(tok) + extra, mean_resizing=False)
        with torch.no_grad():
            head = model.get_output_embeddings().weight
            head[len(tok) :] = 0.0
            if role == "draft":  # rows past the target's would win every argmax: proposing one would crash the target
                head[len(tok) + 8 :] = 50.0 * head[: len(tok)].abs().max()
        model.save_pretrained(root / role)
        tok.save_pretrained(root / role)
    return str(root / "target"), str(root / "draft"), len(tok)


@pytest.mark.parametrize("drafter", ["model", "ngram", "suffix"])
def test_a_pair_with_differently_padded_output_layers_is_accepted_and_exact(padded_pair, drafter):
    target, draft, n_tokens = padded_pair
    pair = load_pair(target, draft, "cpu", "float32")
    assert pair.shared_vocab == n_tokens + 8
    assert pair.target.get_output_embeddings().weight.shape[0] != pair.draft.get_output_embeddings().weight.shape[0]
    dec = Decoder(pair)
    for prompt in PROMPTS:
        ids = dec.encode(prompt)
        reference = dec.run(ids, 0, 30).output_ids
        for k in (1, 4):
            stats = dec.run(ids, k, 30, drafter)
            assert stats.output_ids == reference
            if drafter == "model":
                assert stats.accepted > 0  # the draft proposed real tokens, not its padding


def test_a_draft_that_lacks_rows_for_real_tokens_is_refused(tiny_dirs, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.errors import PhoenixError

    d = tiny_dirs["qwen3"]
    tok = AutoTokenizer.from_pretrained(d["near"])
    model = AutoModelForCausalLM.from_pretrained(d["near"], dtype=torch.float32)
    model.resize_token_embeddings(len(tok) - 10)
    model.save_pretrained(tmp_path / "short")
    tok.save_pretrained(tmp_path / "short")
    with pytest.raises(PhoenixError, match=r"has \d+ rows but the tokenizer has \d+ tokens"):
        load_pair(d["target"], str(tmp_path / "short"), "cpu", "float32")
    # judged the same way before queueing, from config.json alone: submit and the form refuse it too
    from engine.decode.loading import check_same_tokenizer_files

    with pytest.raises(PhoenixError, match=r"has \d+ rows but the tokenizer has \d+ tokens"):
        check_same_tokenizer_files(Path(d["target"]), tmp_path / "short", "target", "short")


@pytest.mark.parametrize(
    "wanted,template,expected",
    [("auto", False, "raw"), ("auto", True, "chat"), ("raw", True, "raw"), ("chat", True, "chat")],
)
def test_prompt_format_follows_the_targets_chat_template(decoders, wanted, template, expected):
    dec = decoders["qwen3-near"]
    tok = dec.pair.tokenizer
    tok.chat_template = (
        "{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}<|assistant|>" if template else None
    )
    try:
        assert dec.prompt_format(wanted) == expected
        ids = dec.encode("def f(x):", wanted)
        text = tok.decode(ids)
        assert text.endswith("<|assistant|>") == (expected == "chat") and "def f(x):" in text
    finally:
        tok.chat_template = None


def test_chat_format_without_a_template_is_one_clear_error(decoders):
    from engine.errors import PhoenixError

    with pytest.raises(PhoenixError, match="has no chat template; use raw"):
        decoders["qwen3-near"].encode("def f(x):", "chat")


REAL = "smollm2"


@pytest.mark.real  # loads the 135M-parameter target
@pytest.mark.skipif(
    not __import__("engine.catalog", fromlist=["present"]).present(REAL),
    reason="the real pair is not fetched here (python -m engine zoo fetch smollm2); CI does not need it",
)
@pytest.mark.parametrize("drafter", ["model", "ngram", "suffix"])
def test_the_real_pair_decodes_exactly_in_fp32(drafter):
    from engine.catalog import SMOLLM2_DRAFT, present
    from engine.prompts.sets import load

    if drafter == "model" and not present(SMOLLM2_DRAFT):
        pytest.skip("the SmolLM2 draft is not built here (python -m engine zoo build-draft smollm2)")
    dec = Decoder(load_pair(REAL, SMOLLM2_DRAFT if drafter == "model" else None, "cpu", "float32"))
    for prompt in load("humaneval-test", 2):
        ids = dec.encode(prompt.text, "chat")
        reference = dec.run(ids, 0, 24).output_ids
        assert dec.run(ids, 4, 24, drafter).output_ids == reference


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_prefill_is_timed_apart_and_verify_holds_decode_passes_only(decoders, monkeypatch, drafter):
    """A fake clock that charges 10 s for each forward over several tokens with no cache yet (a prefill) and 1 s
    for every other forward: verify_s must be exactly one second per pass, and the prefills sit apart."""
    from engine.decode import spec

    clock = [0.0]
    real_forward = spec.forward

    def charged(model, cache, ids, keep, taps=(), pick=None):
        clock[0] += 10.0 if cache.get_seq_length() == 0 else 1.0
        return real_forward(model, cache, ids, keep, taps, pick)

    monkeypatch.setattr(spec, "forward", charged)
    monkeypatch.setattr(spec.time, "perf_counter", lambda: clock[0])
    dec = decoders["qwen3-near"]
    stats = dec.run(dec.encode(PROMPTS[0]), 4, 24, drafter)
    assert stats.prefill_s == stats.ttft_s == 10.0
    assert stats.verify_s == float(stats.passes)  # decode passes only, 1 s each: no prefill inside
    assert stats.draft_s == stats.draft_prefill_s == 0.0  # the clock only moves in target forwards
    assert stats.latency_s == 10.0 + stats.passes
