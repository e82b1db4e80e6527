"""Continuous batching with batched verification: every row's greedy output equals single-stream target-only output
(fp32, CPU), whatever joins or leaves, whatever each row's k and drafter; and the tuner's choices."""

from __future__ import annotations

import random

import pytest
import torch

from engine.decode.batch import BatchCache, accept_batch, verify_batch
from engine.decode.decoder import Decoder
from engine.decode.eagle3 import save_head
from engine.decode.loading import load_pair
from engine.decode.scheduler import Scheduler
from engine.decode.sequence import QueueFull, Request
from engine.serve.tuner import Acceptance, CostModel, LoadTuner

PROMPTS = [
    'def add(a, b):\n    """Return a + b."""\n',
    "import os\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n",
    "for i in range(10):\n    print(i)\nfor i in range(10):\n    print(i)\n",
    "x",
    "def f(x):\n    return x * x\n\n\ndef g(y):\n    return f(y) + f(y)\n",
]
N = 24


@pytest.fixture(scope="module")
def decoders(tiny_dirs, tmp_path_factory):
    return make_decoders(tiny_dirs, tmp_path_factory)


def make_decoders(tiny_dirs, tmp_path_factory):
    """The tiny Qwen3 target with its agreeing draft (model, n-gram, suffix), and with a random EAGLE-3 head whose
    vocabulary is the target's frequent tokens, so drafts are accepted now and then and every crop path runs."""
    from test_eagle3 import random_head

    d = tiny_dirs["qwen3"]
    near = Decoder(load_pair(d["target"], d["near"], "cpu", "float32"))
    counts: dict[int, int] = {}
    for p in PROMPTS:
        for tok in near.run(near.encode(p), 0, 40).output_ids:
            counts[tok] = counts.get(tok, 0) + 1
    path = tmp_path_factory.mktemp("head") / "h"
    save_head(random_head(near.pair.target, sorted(sorted(counts, key=lambda t: -counts[t])[:3])), path, torch.float32)
    head = Decoder(load_pair(d["target"], str(path), "cpu", "float32"))
    return {"model": near, "ngram": near, "suffix": near, "none": near, "eagle3": head, "hybrid": head}


def scheduler(dec: Decoder, tuner=None, **kw) -> Scheduler:
    return Scheduler(dec.pair.target, dec.row_drafter, dec.eos_id, tuner, **kw)


def references(dec: Decoder, n: int = N) -> list[list[int]]:
    return [dec.run(dec.encode(p), 0, n, timed=False).output_ids for p in PROMPTS]


def decode_all(dec, drafter: str, max_batch: int, seed: int, k_choices=(None, 0, 1, 3, 6), **kw):
    """Every prompt twice with its own token budget and k (None: the tuner's), half of them joining after two
    steps; returns (requests, finished by id, steps run). ``kw``: the scheduler's token budget and chunk."""
    rnd = random.Random(seed)
    sched = scheduler(dec, LoadTuner(6, epsilon=0.3, seed=seed), max_batch=max_batch, **kw)
    done: dict[str, object] = {}
    reqs = []
    for j, p in enumerate(PROMPTS * 2):
        r = Request(dec.encode(p), rnd.choice([3, 11, N]), drafter, k=rnd.choice(k_choices), id=str(j))
        r.on_done = lambda f, j=j: done.__setitem__(str(j), f)
        reqs.append(r)
    for r in reqs[:4]:
        sched.submit(r)
    steps = 0
    while sched.step():
        steps += 1
        if steps == 2:
            for r in reqs[4:]:
                sched.submit(r)
    return reqs, done, steps


# batch 3 (rows joining a running batch, padding, holes) in the working loop; 1 and 8 in the full suite
@pytest.mark.parametrize(
    "max_batch", [pytest.param(1, marks=pytest.mark.e2e), 3, pytest.param(8, marks=pytest.mark.e2e)]
)
@pytest.mark.parametrize("drafter", ["model", "ngram", "suffix", "eagle3", "hybrid", "none"])
def test_every_row_equals_single_stream_target_only_at_any_batch_and_k(decoders, drafter, max_batch):
    dec = decoders[drafter]
    refs = references(dec)
    reqs, done, _ = decode_all(dec, drafter, max_batch, seed=max_batch)
    assert len(done) == len(reqs)
    for j, r in enumerate(reqs):
        got = done[r.id].stats.output_ids
        assert got == refs[j % len(PROMPTS)][: r.max_new_tokens], f"{drafter} batch {max_batch} request {j} diverged"
    if drafter != "none":
        assert sum(f.stats.proposed for f in done.values()) > 0
    if drafter in ("model", "ngram"):  # the agreeing draft and the repeated prompt: accepts and rejects both ran
        assert 0 < sum(f.stats.accepted for f in done.values()) < sum(f.stats.proposed for f in done.values())
    if drafter == "hybrid":  # every drafting pass is counted under the source that drafted it
        for f in done.values():
            counted = sum(t["passes"] for t in (f.stats.per_source or {}).values())
            assert counted == sum(1 for n in f.stats.k_per_pass if n)
    if max_batch > 1:
        assert max(max(f.batch_sizes, default=0) for f in done.values()) > 1  # rows really shared forwards


def test_rejected_drafts_are_masked_where_they_are_never_zeroed(decoders):
    from transformers import DynamicCache

    from engine.decode.spec import prefill

    dec = decoders["model"]
    target = dec.pair.target
    ids = [dec.encode(p) for p in PROMPTS[:3]]
    agree = dec.run(ids[1], 0, 5, timed=False).output_ids[1:5]  # row 1 drafts what the target will say
    batch = BatchCache.empty(target.device)
    pending = []
    with torch.inference_mode():
        for prompt in ids:
            cache = DynamicCache(config=target.config)
            pending.append(prefill(target, cache, prompt)[0])
            batch.add_row(cache, len(prompt))
        width = batch.width
        drafted = [[1, 2, 3], agree, []]  # row 0: three rejected ids; row 1: four accepted; row 2: none (k = 0)
        predicted, feats = verify_batch(target, batch, [[p] + d for p, d in zip(pending, drafted)])
        outcomes = accept_batch(batch, drafted, predicted, feats)
    assert [o.accepted for o in outcomes[1:]] == [4, 0]
    rejected = 3 - outcomes[0].accepted
    assert batch.lengths == [len(ids[0]) + 1 + outcomes[0].accepted, len(ids[1]) + 5, len(ids[2]) + 1]
    assert batch.width == width + 5  # row 1 keeps every column it wrote
    assert batch.valid[0, width + 4 - rejected : width + 4].sum() == 0
    keys = batch.cache.layers[0].keys
    assert keys[0, :, width + 4 - rejected : width + 4].abs().sum() > 0  # still there, only masked
    assert not batch.valid[2, width + 1 :].any()  # the narrower row's padding is masked too


def test_columns_no_row_attends_to_are_cropped_so_a_lone_row_is_single_stream(decoders):
    from transformers import DynamicCache

    from engine.decode.spec import prefill

    dec = decoders["model"]
    target = dec.pair.target
    ids = dec.encode(PROMPTS[0])
    batch = BatchCache.empty(target.device)
    with torch.inference_mode():
        cache = DynamicCache(config=target.config)
        pending = prefill(target, cache, ids)[0]
        batch.add_row(cache, len(ids))
        predicted, feats = verify_batch(target, batch, [[pending, 1, 2, 3]])
        out = accept_batch(batch, [[1, 2, 3]], predicted, feats)[0]
    assert batch.width == len(ids) + 1 + out.accepted == batch.cache.get_seq_length() and bool(batch.valid.all())


def test_a_cancelled_request_leaves_the_batch_at_the_next_step(decoders):
    dec = decoders["ngram"]
    sched = scheduler(dec, LoadTuner(4), max_batch=4)
    done = {}
    reqs = [Request(dec.encode(p), N, "ngram", id=str(i)) for i, p in enumerate(PROMPTS[:3])]
    for r in reqs:
        r.on_done = lambda f: done.__setitem__(f.request.id, f)
        sched.submit(r)
    sched.step()
    assert sched.load == (3, 0)
    reqs[1].cancelled = True
    sched.step()
    assert done["1"].cancelled and len(sched.rows) == 2 and sched.batch.rows == 2
    while sched.step():
        pass
    ref = references(dec)
    assert done["0"].stats.output_ids == ref[0] and done["2"].stats.output_ids == ref[2]


def test_a_full_queue_refuses_instead_of_growing(decoders):
    dec = decoders["none"]
    sched = scheduler(dec, LoadTuner(4), max_batch=1, max_queue=2)
    for p in PROMPTS[:2]:
        sched.submit(Request(dec.encode(p), 4))
    with pytest.raises(QueueFull, match="--max-queue 2"):
        sched.submit(Request(dec.encode("x"), 4))


def test_one_pass_teaches_every_smaller_k():
    acc = Acceptance()
    acc.observe(asked=4, proposed=4, accepted=2, seconds=0.004)
    assert acc.asked == [1, 1, 1, 1] and acc.accepted == [1, 1, 0, 0]
    assert acc.expected_accepted(2) > acc.expected_accepted(1) > 0


def test_speculation_turns_off_where_a_wider_forward_costs_more_than_it_adds_and_back_on_when_load_falls():
    cost = CostModel()
    for n in range(1, 6):
        cost.cells[(1, n)] = 0.010 + 0.0005 * (n - 1)  # one row: a wider forward costs almost nothing more
        cost.cells[(16, n)] = 0.030 * n  # sixteen rows: every extra token a row costs a full forward
    tuner = LoadTuner(4, cost, epsilon=0.0)
    for _ in range(50):
        tuner.observe_pass("ngram", 4, 4, 1, 0.0001)  # one token in four accepted, drafting nearly free
    assert tuner.choose("ngram", 1).k > 0
    busy = tuner.choose("ngram", 16)
    assert busy.k == 0 and busy.estimate == busy.estimate_off
    assert tuner.choose("ngram", 1).k > 0  # the load fell: speculation is back


def test_a_pass_at_k_is_priced_from_the_passes_at_k_a_fixed_part_and_one_per_position():
    """A row's drafting costs a fixed part (its drafter's catch-up, the call) and a part per position: priced at k
    from the passes at k, between and beyond from a line through the ks measured, not k times a mean per token."""
    acc = Acceptance()
    for _ in range(5):
        acc.observe(asked=1, proposed=1, accepted=1, seconds=0.0020)
        acc.observe(asked=3, proposed=3, accepted=1, seconds=0.0035)
    assert acc.draft_seconds(1) == pytest.approx(0.0020) and acc.draft_seconds(3) == pytest.approx(0.0035)
    assert acc.draft_seconds(2) == pytest.approx(0.00275) and acc.draft_seconds(4) == pytest.approx(0.00425)
    assert acc.draft_seconds(0) == 0.0
    alone = Acceptance()
    for _ in range(2):  # under DRAFT_PASSES passes: the mean per token, as before any k had its own
        alone.observe(asked=1, proposed=1, accepted=1, seconds=0.004)
    assert alone.draft_seconds(2) == pytest.approx(0.008)


def test_at_16_rows_a_k_whose_drafting_has_a_fixed_part_is_not_chosen_on_the_mean_per_token():
    """The head at 16 rows (run #880): k = 3 passes at small batches made the mean per token low, a k = 1 pass costs
    far more than a third of a k = 3 pass, and priced per token k = 1 looked 1.06x of off where it made 0.86."""
    cost = CostModel()
    for n in range(1, 6):
        cost.cells[(1, n)] = 0.020 + 0.001 * (n - 1)
        cost.cells[(16, n)] = 0.042 + 0.007 * (n - 1)
    tuner = LoadTuner(4, cost, epsilon=0.0)
    for i in range(40):
        tuner.observe_pass("eagle3", 3, 3, 1, 0.0030)  # 1 ms a token at k = 3
        tuner.observe_pass("eagle3", 1, 1, int(i % 3 != 0), 0.0019)  # 1.9 ms at k = 1: most of it the fixed part
    assert tuner.choose("eagle3", 1).k > 0  # alone the head still pays
    assert tuner.choose("eagle3", 16).k == 0
    acc = tuner.of("eagle3")
    per_token = 16 * (1 + acc.expected_accepted(1)) / (cost.seconds(16, 2) + 16 * acc.draft_s_per_token())
    assert per_token > 1.05 * tuner.throughput("eagle3", 16, 0)  # what the old pricing would have chosen


def test_a_width_measured_no_more_moves_with_its_batchs_one_token_cell():
    """The server's first forwards were slow (run #909): widths the tuner then stopped choosing kept their early
    means. Each cell is read moved by as much as its batch's one-token cell has moved since it was measured."""
    cost = CostModel()
    for _ in range(15):
        cost.observe(1, 1, 0.0235)
    for _ in range(15):
        cost.observe(1, 2, 0.0337)
    assert cost.seconds(1, 2) == pytest.approx(0.0337)
    for _ in range(15):
        cost.observe(1, 1, 0.0167)  # the machine settled; width 2 not run since
    assert cost.seconds(1, 1) == pytest.approx(0.0167)
    assert cost.seconds(1, 2) == pytest.approx(0.0337 * 0.0167 / 0.0235)
    assert cost.as_rows()[1]["seconds"] == pytest.approx(0.0337)  # the record keeps what was measured
    profiled = CostModel({(1, 1): 0.01, (1, 2): 0.012})  # cells given, never observed: read as they are
    assert profiled.seconds(1, 2) == pytest.approx(0.012)


def test_at_one_row_a_tuner_that_concluded_off_drafts_again_every_reprobe_steps():
    """One poor request (the load client's warm-up, run #909) left the tuner at k = 0 at one row for every request
    after it; a one-row probe every REPROBE_STEPS steps at k = 0 measures the drafter again. Under load, never."""
    from engine.serve.tuner import REPROBE_STEPS

    cost = CostModel({(1, n): 0.017 * (1.0 + 0.6 * (n - 1)) for n in range(1, 6)})
    cost.cells.update({(16, n): 0.042 * (1.0 + 0.5 * (n - 1)) for n in range(1, 6)})
    tuner = LoadTuner(4, cost, epsilon=0.0)
    for _ in range(70):
        tuner.observe_pass("eagle3", 1, 1, 0, 0.0025)  # nothing accepted: off is the best
    alone = [tuner.choose("eagle3", 1) for _ in range(3 * REPROBE_STEPS)]
    probes = [i for i, c in enumerate(alone) if c.probe]
    assert probes == [REPROBE_STEPS - 1, 2 * REPROBE_STEPS - 1, 3 * REPROBE_STEPS - 1]
    assert all(c.k == 1 and c.explored for c in alone if c.probe)
    assert all(c.k == 0 and not c.explored for c in alone if not c.probe)
    assert not any(tuner.choose("eagle3", 16).probe for _ in range(3 * REPROBE_STEPS))


def test_the_cost_model_interpolates_between_measured_cells_and_refines_online():
    cost = CostModel({(1, 1): 0.01, (1, 5): 0.02, (4, 1): 0.02, (4, 5): 0.06})
    assert cost.seconds(1, 3) == pytest.approx(0.015)
    assert cost.seconds(2, 1) == pytest.approx(0.01 + (0.02 - 0.01) / 3)
    assert cost.seconds(8, 1) > cost.seconds(4, 1)
    cost.observe(1, 1, 0.03)
    assert 0.01 < cost.seconds(1, 1) < 0.03


def test_rows_drafting_with_one_eagle3_head_share_its_forwards_and_propose_what_each_would_alone(decoders):
    from transformers import DynamicCache

    from engine.decode.eagle3.drafter import propose_batch
    from engine.decode.spec import prefill

    dec = decoders["eagle3"]
    ks = [4, 1, 6, 0, 3]

    def rows():
        drafters, contexts = [], []
        for p in PROMPTS:  # prompts of 1 to 20-odd tokens: caches of different lengths
            ids = dec.encode(p)
            d = dec.row_drafter("eagle3")
            first, feats = prefill(dec.pair.target, DynamicCache(config=dec.pair.target.config), ids, d.taps)
            d.observe(feats)
            d.reset(ids)
            drafters.append(d)
            contexts.append(ids + [first])
        return drafters, contexts

    with torch.inference_mode():
        alone, contexts = rows()
        expected = [d.propose(c, k) if k else [] for d, c, k in zip(alone, contexts, ks)]
        together, contexts = rows()
        got = propose_batch(together, contexts, ks)
    assert got == expected and [len(g) for g in got] == ks
    assert [d.cache.length for d in together] == [d.cache.length for d in alone]  # the same state for the next pass


def test_leave_moves_fill_each_freed_place_with_a_row_from_beyond():
    from engine.decode.batch import leave_moves

    assert leave_moves([0, 2, 3]) == ([(3, 1)], [0, 3, 2])
    assert leave_moves([1, 2]) == ([(2, 0)], [2, 1])
    assert leave_moves([0, 1]) == ([], [0, 1])
    assert leave_moves([4]) == ([(4, 0)], [4])


def test_rows_join_into_a_spare_row_and_leave_by_one_move_every_row_keeping_its_columns():
    """A join writes the new row into the buffer's spare row and a leave moves a row from beyond into the freed
    place: the batch's buffer is not reallocated (no copy of every row), and each row keeps its own keys."""
    from transformers import LlamaConfig

    from engine.decode.batch import roomy_cache

    config = LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2)

    def row(length: int, fill: float):
        cache = roomy_cache(config)
        for i in range(2):
            keys = torch.full((1, 2, length, 8), fill)
            cache.update(keys, -keys, i)
        return cache

    batch = BatchCache.empty(torch.device("cpu"))
    for j, length in enumerate([5, 3, 7]):  # the buffer's rows: 1, 2, then 4
        batch.add_row(row(length, float(j + 1)), length)
    layer = batch.cache.layers[1]
    buffer = layer._k.data_ptr()
    batch.add_row(row(2, 5.0), 2)  # into the spare row
    assert layer._k.data_ptr() == buffer and batch.rows == 4 and batch.width == 7
    order = batch.keep_rows([0, 2, 3])  # row 1 leaves; row 3 takes its place
    assert order == [0, 3, 2] and layer._k.data_ptr() == buffer
    assert batch.lengths == [5, 2, 7]
    for b, (fill, length) in enumerate([(1.0, 5), (5.0, 2), (3.0, 7)]):
        assert batch.valid[b].tolist() == [True] * length + [False] * (7 - length)
        for layer in batch.cache.layers:
            assert torch.equal(layer.keys[b, :, :length], torch.full((2, length, 8), fill))
            assert torch.equal(layer.values[b, :, :length], torch.full((2, length, 8), -fill))
            assert not layer.keys[b, :, length:].any()  # masked columns are zeros: finite, never read
