"""Every decoder-only architecture serving teams bring runs exactly through every drafter (issue 67): tiny random
models of eleven architectures, each with a near copy of itself as the draft model, greedy in fp32, identical to
target-only in the lab's single stream and in the server's batched step (rows of different drafters, the server's
tuner choosing k). The run says which forward ran and why; a model Phoenix cannot decode is refused in one line."""

from __future__ import annotations

import pytest
from conftest import save_model

# each architecture's tiny config: what makes its math its own is switched on (soft-capping, sliding windows that
# the 100-token requests outgrow, partial rotary, biases, multipliers)
ARCHS = {
    "llama": {},
    "qwen2": {"use_sliding_window": False},
    "qwen3": {},
    "mistral": {"sliding_window": None},
    "gemma2": {"head_dim": 16, "sliding_window": 24, "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
    "gemma3_text": {"head_dim": 16, "sliding_window": 24, "layer_types": ["sliding_attention", "full_attention"]},
    "phi3": {"partial_rotary_factor": 0.5},
    "olmo2": {},
    "gpt_neox": {"rotary_pct": 0.5, "num_key_value_heads": None},
    "starcoder2": {"sliding_window": None, "use_bias": True},
    "granite": {
        "embedding_multiplier": 2.0,
        "residual_multiplier": 0.5,
        "attention_multiplier": 0.2,
        "logits_scaling": 2.0,
    },
}
RUNNER = {"llama", "qwen2", "qwen3", "mistral", "granite", "olmo2", "phi3"}  # what Phoenix's own runner reproduces
SLIDING = {"gemma2", "gemma3_text"}
# every architecture in the full suite; the working loop (-m fast) keeps one of Phoenix's runner and one sliding one
PARAMS = [a if a in ("llama", "gemma2") else pytest.param(a, marks=pytest.mark.e2e) for a in ARCHS]


def _model(arch: str, tokenizer, seed: int):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    eos = tokenizer.eos_token_id
    cfg = AutoConfig.for_model(
        arch,
        **{
            "vocab_size": len(tokenizer),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 512,
            "bos_token_id": eos,
            "eos_token_id": eos,
            "pad_token_id": eos,
            **ARCHS[arch],
        },
    )
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(6.0)  # decisive argmaxes: greedy output is not decided by float noise
            if seed != 1:  # the draft: a near copy, so it accepts some and rejects some
                p.add_(torch.randn(p.shape, generator=gen) * p.std() * 0.3)
    return model


class Decoders(dict):
    """Each architecture's decoder (a target and a near copy of it as the draft), built the first time a test asks
    for it: the working loop builds only the two it runs."""

    def __init__(self, root, tokenizer):
        super().__init__()
        self.root, self.tokenizer = root, tokenizer

    def __missing__(self, arch: str):
        from engine.decode.decoder import Decoder
        from engine.decode.loading import load_pair, prepare

        tok, root = self.tokenizer, self.root
        target = save_model(_model(arch, tok, 1), tok, root / f"{arch}-target")
        draft = save_model(_model(arch, tok, 7), tok, root / f"{arch}-draft")
        self[arch] = Decoder(prepare(load_pair(target, draft, "cpu", "float32")))
        return self[arch]


@pytest.fixture(scope="module")
def decoders(tmp_path_factory, tiny_tokenizer):
    return Decoders(tmp_path_factory.mktemp("archs"), tiny_tokenizer)


def _prompts(decoder) -> list[list[int]]:
    tok = decoder.pair.tokenizer
    return [tok.encode("def f(x):\n    return x + 1\n" * (i + 1))[:40] for i in range(3)]


@pytest.mark.parametrize("arch", PARAMS)
def test_every_architecture_decodes_exactly_through_every_drafter_and_says_which_forward_ran(decoders, arch):
    dec = decoders[arch]
    if arch in RUNNER:
        assert dec.pair.runner == "phoenix"
    else:  # transformers' modeling, and the reason, in what the run stores
        assert dec.pair.runner.startswith("transformers (") and arch in dec.pair.runner
    lengths = []
    for prompt in _prompts(dec):
        reference = dec.run(prompt, 0, 80, "none", timed=False).output_ids
        lengths.append(len(prompt) + len(reference))
        for drafter in ("model", "ngram", "suffix"):
            assert dec.run(prompt, 3, 80, drafter, timed=False).output_ids == reference, drafter
    assert max(lengths) > 2 * 24 and sum(lengths) > 100  # past the sliding windows, and not a few tokens each


@pytest.mark.parametrize("arch", PARAMS)
def test_every_architecture_decodes_exactly_in_the_servers_batched_step(decoders, arch):
    from engine.decode.scheduler import Scheduler
    from engine.decode.sequence import Request
    from engine.serve.tuner import LoadTuner

    dec = decoders[arch]
    prompts = _prompts(dec)
    reference = [dec.run(p, 0, 80, "none", timed=False).output_ids for p in prompts]
    sched = Scheduler(dec.pair.target, dec.row_drafter, dec.eos_id, LoadTuner(4), max_batch=8, max_queue=16)
    finished: dict[tuple[str, int], object] = {}
    for drafter, k in (("model", None), ("ngram", 3), ("suffix", None), ("none", None)):  # None: the tuner's k
        for i, p in enumerate(prompts):
            req = Request(list(p), 80, drafter, k, id=f"{drafter}{i}")
            req.on_done = lambda f, key=(drafter, i): finished.__setitem__(key, f)
            sched.submit(req)
    sched.drain()
    assert len(finished) == 12
    for (drafter, i), f in finished.items():
        assert f.error is None and f.stats.output_ids == reference[i], (drafter, i, f.error)  # type: ignore[attr-defined]
    if arch in SLIDING:  # a sliding-window layer drops columns the batch cache keeps: one row at a time, and said
        assert sched.max_batch == 1 and "sliding-window" in (sched.unbatched or "")
    else:
        assert sched.unbatched is None and max(max(f.batch_sizes) for f in finished.values()) > 1  # type: ignore[attr-defined]


def test_the_server_says_and_stores_that_a_sliding_window_model_decodes_one_row_at_a_time(decoders, caplog):
    from engine.serve.config import ServeConfig, check_serve
    from engine.serve.service import Service

    cfg = check_serve(ServeConfig(device="cpu", dtype="float32", drafter="model", profile=False, max_batch=8))
    with caplog.at_level("WARNING", logger="phoenix.serve"):
        service = Service(cfg, decoders["gemma2"], None)
    assert service.cfg.max_batch == 1 and "rows decode one at a time (--max-batch 8 -> 1)" in caplog.text


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"model_type": "t5", "is_encoder_decoder": True, "architectures": ["T5ForConditionalGeneration"]}, "encoder"),
        ({"model_type": "bert", "architectures": ["BertModel"]}, "names BertModel, not a causal LM"),
        ({"model_type": "no-such-model", "architectures": ["NoSuchForCausalLM"]}, "no causal LM transformers knows"),
    ],
)
def test_a_model_phoenix_cannot_decode_is_refused_in_one_line_before_its_weights_are_read(tmp_path, config, why):
    import json

    from engine.decode.loading import load_pair
    from engine.errors import PhoenixError

    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"not read")  # never opened: the refusal comes first
    with pytest.raises(PhoenixError, match=why) as err:
        load_pair(str(tmp_path), None, "cpu", "float32")
    assert "\n" not in str(err.value) and "decoder-only" in str(err.value)
