"""The server's rows pay for their drafter only when it drafts (issue 66): a draft model's prompt pass waits for
the first pass that drafts, so a request the tuner keeps at k = 0 never runs the draft model at all (on Qwen's
0.5B draft that prefill cost the tuner 10-19% of speculation off at 4-16 requests, runs #311-#313); and the
EAGLE-3 head's prompt pass goes in the bucket sizes warmed before the server is ready."""

from __future__ import annotations

import pytest


class Off:
    """A tuner that always chooses speculation off, and learns nothing."""

    def choose(self, drafter, batch):
        from engine.decode.steps import Choice

        return Choice(0, False, 1.0, 1.0)

    def choose_drafter(self, drafters, batch):
        from engine.decode.steps import Choice

        return Choice(0, False, 1.0, 1.0, drafters[0])

    def observe_forward(self, batch, tokens, seconds):
        pass

    def observe_pass(self, drafter, asked, proposed, accepted, draft_s):
        pass

    def break_even(self, drafter, batch, k):
        return float("-inf")  # as LoadTuner without --hold-rows: no row is ever held off by its own acceptance

    def expected_accepted(self, drafter, k):
        return 0.0


def _served(dec, requests, tuner):
    from engine.decode.scheduler import Scheduler

    sched = Scheduler(dec.pair.target, dec.row_drafter, dec.eos_id, tuner, max_batch=4, max_queue=8)
    done = {}
    for req in requests:
        req.on_done = lambda f, key=req.id: done.__setitem__(key, f)
        sched.submit(req)
    sched.drain()
    return done


def test_a_row_kept_at_k_0_never_runs_its_draft_model_and_one_that_drafts_primes_it_once(tiny_dirs, monkeypatch):
    from engine.decode.decoder import Decoder
    from engine.decode.drafters import ModelDrafter
    from engine.decode.loading import load_pair, prepare
    from engine.decode.sequence import Request

    d = tiny_dirs["qwen3"]
    dec = Decoder(prepare(load_pair(d["target"], d["near"], "cpu", "float32")))
    prompts = [dec.encode(t) for t in ("def add(a, b):", "class Stack:\n    def push(self, x):", "import os\n")]
    reference = [dec.run(p, 0, 30, timed=False).output_ids for p in prompts]
    primed: list[int] = []
    reset = ModelDrafter.reset
    monkeypatch.setattr(ModelDrafter, "reset", lambda self, ids: (primed.append(len(ids)), reset(self, ids))[1])

    done = _served(dec, [Request(list(p), 30, "model", None, id=str(i)) for i, p in enumerate(prompts)], Off())
    assert primed == []  # the tuner never drafted: the draft model never saw a prompt
    for i, f in done.items():
        assert f.stats.output_ids == reference[int(i)] and f.stats.draft_prefill_s < 1e-3 and f.stats.proposed == 0

    done = _served(dec, [Request(list(p), 30, "model", 3, id=str(i)) for i, p in enumerate(prompts)], Off())
    assert sorted(primed) == sorted(len(p) for p in prompts)  # a fixed k drafts: each row primed once, its prompt
    for i, f in done.items():
        assert f.stats.output_ids == reference[int(i)] and f.stats.draft_prefill_s > 0 and f.stats.proposed > 0


def test_the_heads_prompt_pass_goes_in_pieces_of_the_warmed_sizes():
    from engine.decode.eagle3.drafter import MAX_PIECE, pieces
    from engine.decode.runner import bucket

    assert pieces(157) == [144, 12, 1] and pieces(8) == [8] and pieces(1) == [1]
    warmed = {bucket(n) for n in range(1, MAX_PIECE + 1)}  # what engine.decode.eagle3.drafter.warm runs
    for n in range(1, 3 * MAX_PIECE):
        got = pieces(n)
        assert sum(got) == n and set(got) <= warmed and got == sorted(got, reverse=True)


@pytest.mark.parametrize("length", [9, 30, 61])
def test_a_prompt_of_several_pieces_drafts_with_the_head_exactly(tiny_dirs, tmp_path, length):
    import torch
    from test_eagle3 import random_head

    from engine.decode.decoder import Decoder
    from engine.decode.eagle3 import save_head
    from engine.decode.eagle3.drafter import pieces, warm
    from engine.decode.loading import load_pair

    d = tiny_dirs["llama"]
    target = load_pair(d["target"], None, "cpu", "float32").target
    save_head(random_head(target, list(range(0, 300, 2))), tmp_path / "head", torch.float32)
    dec = Decoder(load_pair(d["target"], str(tmp_path / "head"), "cpu", "float32"))
    assert len(pieces(length - 1)) > 1 or length == 9
    assert set(warm(dec._eagle3)) >= set(pieces(length - 1))
    ids = (dec.encode("def f(x):\n    return x * 2\n") * 20)[:length]
    reference = dec.run(ids, 0, 30, timed=False).output_ids
    with torch.inference_mode():
        assert dec.run(ids, 3, 30, "eagle3", timed=False).output_ids == reference


def test_a_row_that_joined_at_k_0_primes_later_only_with_enough_tokens_left_to_repay_it(tiny_dirs):
    from engine.decode.drafters import NgramDrafter
    from engine.decode.sequence import Sequence

    class Deferred(NgramDrafter):
        deferrable = True

    short = Sequence(list(range(40)), 30, None, Deferred(), defer=True)
    short.start(1)
    assert short.cap(3) == 3  # its first pass may draft (and prime)
    short.stats.output_ids += [2, 3]  # two passes later, unprimed: 28 tokens left against a context of 42
    assert short.cap(3) == 0
    long = Sequence(list(range(40)), 500, None, Deferred(), defer=True)
    long.start(1)
    long.stats.output_ids += [2, 3]
    assert long.cap(3) == 3  # 497 left: a late prompt pass pays for itself
    long.prime()
    short.prime()
    assert short.cap(3) == 3  # primed: no catch-up to repay


class AloneOnly(Off):
    """A tuner that drafts (k = 3) only for a row alone in its batch."""

    def choose(self, drafter, batch):
        from engine.decode.steps import Choice

        return Choice(3, False, 2.0, 1.0) if batch == 1 else Choice(0, False, 1.0, 1.0)


def _watched(tiny_dirs, monkeypatch):
    """The tiny qwen3 pair's decoder, a prompt, and the prompt lengths its draft model is primed on (filled as the
    rows prime)."""
    from engine.decode.decoder import Decoder
    from engine.decode.drafters import ModelDrafter
    from engine.decode.loading import load_pair, prepare

    d = tiny_dirs["qwen3"]
    dec = Decoder(prepare(load_pair(d["target"], d["near"], "cpu", "float32")))
    primed: list[int] = []
    reset = ModelDrafter.reset
    monkeypatch.setattr(ModelDrafter, "reset", lambda self, ids: (primed.append(len(ids)), reset(self, ids))[1])
    return dec, dec.encode("def add(a, b):\n    return a + b\n"), primed


def test_the_first_row_of_a_burst_does_not_prime_its_draft_for_the_steps_before_the_rest_join(tiny_dirs, monkeypatch):
    from engine.decode.scheduler import Scheduler
    from engine.decode.sequence import Request

    dec, prompt, primed = _watched(tiny_dirs, monkeypatch)
    reference = dec.run(prompt, 0, 20, timed=False).output_ids

    def serve(n: int) -> list:
        # a budget of one prompt a step: the first row decodes alone while the others still prefill
        sched = Scheduler(dec.pair.target, dec.row_drafter, dec.eos_id, AloneOnly(), 4, 8, budget=len(prompt) + 1)
        done: list = []
        for i in range(n):
            req = Request(list(prompt), 20, "model", None, id=str(i))
            req.on_done = done.append
            sched.submit(req)
        sched.drain()
        return done

    done = serve(3)
    assert primed == [] and all(f.stats.output_ids == reference for f in done)  # the batch was about to be 3
    done = serve(1)
    assert primed == [len(prompt)] and done[0].stats.output_ids == reference and done[0].stats.proposed > 0


class ExploresFromOff(Off):
    """A tuner whose best is speculation off and that explores one position deeper on every step."""

    def choose(self, drafter, batch):
        from engine.decode.steps import Choice

        return Choice(1, True, 0.9, 1.0)


def test_exploring_past_k_0_never_pays_a_rows_first_prompt_pass(tiny_dirs, monkeypatch):
    """Exploring from k = 0 measures acceptance; a row that never drafted would first pay its drafter's pass over
    its whole context (an EAGLE-3 head's catch-up at 8 rows made such steps 51 ms against 24, and the tuner
    0.91-0.93 of speculation off: runs #716, #727). Such a row stays at k = 0 and primes nothing."""
    from engine.decode.sequence import Request

    dec, prompt, primed = _watched(tiny_dirs, monkeypatch)
    reference = dec.run(prompt, 0, 12, timed=False).output_ids
    done = _served(dec, [Request(list(prompt), 12, "model", None, id=str(i)) for i in range(3)], ExploresFromOff())
    assert primed == [] and all(f.stats.output_ids == reference and f.stats.proposed == 0 for f in done.values())


class NarrowWin(Off):
    """A tuner that drafts (k = 2) where it expects 1.07x of speculation off: a lead inside a noisy cost cell."""

    def choose(self, drafter, batch):
        from engine.decode.steps import Choice

        return Choice(2, False, 1.07, 1.0)


def test_a_row_starts_drafting_only_where_the_tuner_expects_a_clear_win(tiny_dirs, monkeypatch):
    """Starting to draft costs a row its drafter's pass over its context, and its drafter then keeps in step at
    every pass: under PRIME_ABOVE (at 8 rows, estimates 1.01-1.07 of off did this, runs #736-#752) a row that never
    drafted stays at k = 0; a clear lead starts it."""
    from engine.decode.sequence import Request
    from engine.decode.steps import PRIME_ABOVE

    assert 1.07 < PRIME_ABOVE < 2.0
    dec, prompt, primed = _watched(tiny_dirs, monkeypatch)
    done = _served(dec, [Request(list(prompt), 12, "model", None, id="0")], NarrowWin())
    assert primed == [] and done["0"].stats.proposed == 0
    done = _served(dec, [Request(list(prompt), 12, "model", None, id="1")], AloneOnly())
    assert primed == [len(prompt)] and done["1"].stats.proposed > 0


class Probes(Off):
    """A tuner whose best is speculation off and whose every one-row step is a probe (REPROBE_STEPS)."""

    def choose(self, drafter, batch):
        from engine.decode.steps import Choice

        return Choice(1, True, 0.9, 1.0, probe=batch == 1)


def test_a_one_row_probe_drafts_even_a_row_not_yet_primed(tiny_dirs, monkeypatch):
    """A probe is how a tuner that concluded "off" at one row measures its drafter again: an exploring step from
    k = 0 never primes a row (above), a probe does, at the row's first pass, and the output stays exact."""
    from engine.decode.sequence import Request

    dec, prompt, primed = _watched(tiny_dirs, monkeypatch)
    reference = dec.run(prompt, 0, 12, timed=False).output_ids
    done = _served(dec, [Request(list(prompt), 12, "model", None, id="0")], Probes())
    assert primed == [len(prompt)] and done["0"].stats.output_ids == reference and done["0"].stats.proposed > 0
