"""The engine core both doors share (engine.decode.sequence, engine.decode.scheduler): chunked prefills under a
token budget stay exact in fp32, a failing step fails only its own requests, a dead loop aborts what it held and
says why, the lab's single stream and the server's batch of one count every pass alike, and streamed text is
detokenized incrementally to the same text."""

from __future__ import annotations

import threading

import pytest
from test_serve_batch import PROMPTS, N, decode_all, make_decoders, references, scheduler

from engine.decode import scheduler as core
from engine.decode.config import SuffixConfig
from engine.decode.sequence import Request
from engine.serve.detokenize import Detokenizer
from engine.serve.tuner import CostModel, LoadTuner


@pytest.fixture(scope="module")
def decoders(tiny_dirs, tmp_path_factory):
    return make_decoders(tiny_dirs, tmp_path_factory)


# budgets that cut prompts mid-way (the longest prompt is about 25 tokens), one chunk a step or several, and one
# that takes whole prompts several at a time (their first chunks prefilled together in one forward)
@pytest.mark.parametrize(
    "budget,chunk",
    [pytest.param(3, 2, marks=pytest.mark.e2e), (9, 5), (64, 32), pytest.param(1, 1, marks=pytest.mark.e2e)],
)
@pytest.mark.parametrize("drafter", ["model", "ngram", "eagle3", "hybrid", "none"])
def test_chunked_prefills_under_a_token_budget_equal_single_stream_target_only(decoders, drafter, budget, chunk):
    dec = decoders[drafter]
    refs = references(dec)
    sched_kw = {"budget": budget, "long_prefill": chunk}
    reqs, done, _ = decode_all(dec, drafter, 3, seed=budget, **sched_kw)
    assert len(done) == len(reqs)
    for j, r in enumerate(reqs):
        got = done[r.id].stats.output_ids
        assert got == refs[j % len(PROMPTS)][: r.max_new_tokens], f"{drafter} budget {budget} request {j} diverged"
        assert done[r.id].reason in ("stop", "length")


def test_prompt_chunks_run_beside_decoding_rows_within_the_budget(decoders):
    dec = decoders["ngram"]
    sched = scheduler(dec, None, max_batch=4, budget=8, long_prefill=4)
    finished = {}
    first = Request(dec.encode(PROMPTS[0]), N, "ngram", k=2, id="a")
    first.on_done = lambda f: finished.__setitem__(f.request.id, f)
    sched.submit(first)
    sched.step()  # "a" prefills in chunks of 4, nothing decodes yet
    while not sched.rows:
        sched.step()
    late = Request(dec.encode(PROMPTS[1]), N, "ngram", k=2, id="b")  # 20-odd tokens: several chunks
    late.on_done = lambda f: finished.__setitem__(f.request.id, f)
    sched.submit(late)
    sched.drain()
    beside = [s for s in sched.steps if s.prefill_tokens]
    assert beside, "the late prompt's chunks ran in steps that also verified the running row"
    assert all(s.prefill_tokens <= 8 - s.batch * s.width or s.prefill_tokens == 1 for s in beside)
    assert all(s.prefill_tokens <= 4 for s in beside)  # one prompt, at most long_prefill a step
    ref = references(dec)
    assert finished["a"].stats.output_ids == ref[0] and finished["b"].stats.output_ids == ref[1]


def test_a_steps_record_reaches_the_recorder_whole_with_its_prompt_tokens(decoders, monkeypatch):
    """The recorder drains ``steps`` from another thread: a record handed over before the step's prompt chunks ran
    was stored with 0 prompt tokens (most of the served steps' records were)."""
    dec = decoders["ngram"]
    sched = scheduler(dec, None, max_batch=4, budget=8, long_prefill=4)
    sched.submit(Request(dec.encode(PROMPTS[0]), N, "ngram", k=2, id="a"))
    while not sched.rows:
        sched.step()
    sched.submit(Request(dec.encode(PROMPTS[1]), N, "ngram", k=2, id="b"))
    real, seen = sched._prefill, []

    def prefill(budget):
        seen.append(len(sched.steps))  # what the recorder could drain while prompt chunks run
        return real(budget)

    monkeypatch.setattr(sched, "_prefill", prefill)
    before = len(sched.steps)
    sched.step()
    assert seen == [before] and len(sched.steps) == before + 1 and sched.steps[-1].prefill_tokens > 0


def test_a_failing_step_fails_only_its_requests_and_the_loop_goes_on(decoders, monkeypatch):
    dec = decoders["ngram"]
    real, calls = core.verify_batch, []

    def flaky(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("a forward that broke")
        return real(*args, **kw)

    monkeypatch.setattr(core, "verify_batch", flaky)
    sched = scheduler(dec, LoadTuner(4), max_batch=4)
    finished = {}
    for i, p in enumerate(PROMPTS[:2]):
        r = Request(dec.encode(p), N, "ngram", id=f"early{i}")
        r.on_done = lambda f: finished.__setitem__(f.request.id, f)
        sched.submit(r)
    sched.drain()
    assert {finished[f"early{i}"].reason for i in range(2)} == {"error"}
    assert "RuntimeError: a forward that broke" in (finished["early0"].error or "")
    assert finished["early0"].failed and sched.errors == 1 and sched.dead is None
    later = Request(dec.encode(PROMPTS[2]), N, "ngram", id="later")
    later.on_done = lambda f: finished.__setitem__(f.request.id, f)
    sched.submit(later)
    sched.drain()
    assert finished["later"].stats.output_ids == references(dec)[2]


def test_a_loop_that_dies_aborts_what_it_held_says_why_and_refuses_more(decoders, monkeypatch):
    dec = decoders["none"]
    sched = scheduler(dec, None, max_batch=1)
    finished = {}
    for i, p in enumerate(PROMPTS[:3]):
        r = Request(dec.encode(p), N, id=str(i))
        r.on_done = lambda f: finished.__setitem__(f.request.id, f)
        sched.submit(r)
    sched.step()

    def broken():
        raise MemoryError("the machine ran out")

    monkeypatch.setattr(sched, "_release", broken)
    with pytest.raises(MemoryError):
        sched.run(threading.Event())
    assert sched.dead == "MemoryError: the machine ran out"
    assert sorted(finished) == ["0", "1", "2"] and {f.reason for f in finished.values()} == {"aborted"}
    with pytest.raises(RuntimeError, match="the decoding loop has stopped: MemoryError"):
        sched.submit(Request(dec.encode("x"), 2))


@pytest.mark.parametrize("drafter,k", [("model", 3), ("ngram", 4), ("suffix", 5), ("eagle3", 2), ("hybrid", 4)])
def test_the_lab_and_the_server_at_batch_one_decode_and_count_every_pass_alike(decoders, drafter, k):
    """``engine bench`` (spec.generate) and the server's loop at batch 1: the same output and the same per-pass
    counts on the same prompts, because both count through one Sequence."""
    dec = decoders[drafter]
    for p in PROMPTS:
        ids = dec.encode(p)
        dec.start_run(SuffixConfig())
        bench = dec.run(ids, k, N, drafter, timed=False)
        dec.start_run(SuffixConfig())
        sched = scheduler(dec, None, max_batch=1)
        got = []
        req = Request(ids, N, drafter, k=k)
        req.on_done = got.append
        sched.submit(req)
        sched.drain()
        served = got[0].stats
        assert served.output_ids == bench.output_ids
        assert served.k_per_pass == bench.k_per_pass
        assert [(q.proposed, q.accepted) for q in served.positions] == [
            (q.proposed, q.accepted) for q in bench.positions
        ]
        assert (served.passes, served.proposed, served.accepted) == (bench.passes, bench.proposed, bench.accepted)
        assert served.per_source == bench.per_source


def test_streamed_text_is_detokenized_incrementally_to_the_whole_text(decoders):
    dec = decoders["none"]
    tok = dec.pair.tokenizer
    outputs = [dec.run(dec.encode(p), 0, 40, timed=False).output_ids for p in PROMPTS]
    outputs.append(tok("naïve café: 日本語のテキスト 🎉🎉, ok", add_special_tokens=False)["input_ids"])
    for ids in outputs:
        for step in (1, 3):
            text = Detokenizer(tok)
            sent = "".join(text.add(ids[i : i + step]) for i in range(0, len(ids), step))
            whole = tok.decode(ids, skip_special_tokens=True)
            assert sent + text.tail(whole) == whole
            if "\ufffd" not in whole:  # a character split across tokens is never sent as U+FFFD
                assert "\ufffd" not in sent


def test_shadow_checks_run_on_the_loops_thread_when_it_is_idle_and_every_record_is_written(tiny_dirs, tmp_path):
    """A shadow re-decode never shares the model with a step: it runs on the loop's own thread between requests,
    and the request waits for it before it is written, identity and all."""
    from test_serve_api import PROMPTS as SERVED
    from test_serve_api import make_service

    from engine.decode.loading import load_pair

    d = tiny_dirs["qwen3"]
    from engine.decode.decoder import Decoder

    dec = Decoder(load_pair(d["target"], d["near"], "cpu", "float32"))
    service, store = make_service(dec, tmp_path, shadow_rate=1.0)
    threads: list[str] = []
    real = dec.reference

    def watched(*args, **kw):
        threads.append(threading.current_thread().name)
        return real(*args, **kw)

    dec.reference = watched  # type: ignore[method-assign]
    service.start()
    done = threading.Event()
    left = [len(SERVED)]

    def finished(_f):
        left[0] -= 1
        if not left[0]:
            done.set()

    for text in SERVED:
        service.submit(Request(dec.encode(text), 12, "model", k=3, on_done=finished))
    assert done.wait(60)
    service.stop()
    rows = store.requests(service.run_id)
    assert len(rows) == len(SERVED) and all(r.identical is True for r in rows)
    assert threads and set(threads) == {"phoenix-loop"}


def test_the_shadow_check_decodes_each_request_as_it_was_asked_sampled_stopped_or_past_eos(tiny_dirs, tmp_path):
    """The server's identity check is the lab's (engine.decode.decoder.identity on Decoder.reference): a correct
    sampled request, one that ended on a stop string, and one with ignore_eos are identical, never 'diverged' (the
    shadow once re-decoded greedily, with EOS and without stop strings)."""
    from test_serve_api import PROMPTS as SERVED
    from test_serve_api import make_service

    from engine.decode.decoder import Decoder
    from engine.decode.loading import load_pair
    from engine.decode.sampling_params import SamplingParams
    from engine.serve.detokenize import StopStrings

    d = tiny_dirs["qwen3"]
    dec = Decoder(load_pair(d["target"], d["near"], "cpu", "float32"))
    service, store = make_service(dec, tmp_path, shadow_rate=1.0)
    service.start()
    tok = dec.pair.tokenizer
    full = dec.text(dec.run(dec.encode(SERVED[1]), 0, 24, timed=False))
    stop = StopStrings(tok, [full[len(full) // 2 : len(full) // 2 + 2]])
    asks = [
        Request(dec.encode(SERVED[0]), 16, "model", k=3, sampling=SamplingParams(temperature=0.8, seed=7)),
        Request(dec.encode(SERVED[1]), 24, "ngram", k=4, stop=stop),
        Request(dec.encode(SERVED[2]), 40, "model", k=2, ignore_eos=True),
    ]
    done = threading.Event()
    left = [len(asks)]

    def finished(_f):
        left[0] -= 1
        if not left[0]:
            done.set()

    for r in asks:
        r.on_done = finished
        service.submit(r)
    assert done.wait(60)
    service.stop()
    rows = store.requests(service.run_id)
    assert len(rows) == 3 and [r.identical for r in rows] == [True, True, True], [r.diverged_at for r in rows]


def test_a_drafter_chosen_per_step_by_the_tuner_stays_exact_and_counts_each_drafter_apart(decoders, monkeypatch):
    from engine.serve import tuner

    # every drafter may be explored: which ones are "near" the best comes from measured step times, which a busy
    # machine moves (the full suite once left only the head near); the rule itself is the unit tests' below
    monkeypatch.setattr(tuner, "EXPLORE_WITHIN", 0.0)
    dec = decoders["eagle3"]
    assert dec.choices() == ("eagle3", "ngram", "suffix")
    refs = references(dec)
    reqs, done, _ = decode_all(dec, "choice", 3, seed=7, k_choices=(None,))
    for j, r in enumerate(reqs):
        assert done[r.id].stats.output_ids == refs[j % len(PROMPTS)][: r.max_new_tokens], f"request {j} diverged"
    used = {kind for f in done.values() for kind in (f.stats.per_source or {})}
    assert len(used) >= 2, used  # the tuner explored: more than one drafter drafted
    for f in done.values():
        counted = sum(t["passes"] for t in (f.stats.per_source or {}).values())
        assert counted == sum(1 for n in f.stats.k_per_pass if n)


def test_the_tuner_chooses_the_drafter_that_pays_and_explores_the_others():
    from engine.decode.steps import Choice

    tuner = LoadTuner(6, epsilon=0.0)
    for n in range(1, 8):
        tuner.cost.cells[(1, n)] = 0.020 + 0.001 * (n - 1)
    for _ in range(50):
        tuner.observe_pass("ngram", 6, 6, 5, 0.0001)  # prompt lookup: most drafts accepted, nearly free
        tuner.observe_pass("eagle3", 3, 3, 1, 0.006)  # the head: a third accepted, a few ms a token
    pick = tuner.choose_drafter(("eagle3", "ngram", "suffix"), 1)
    assert isinstance(pick, Choice) and pick.drafter == "ngram" and pick.k >= 4 and not pick.explored
    tuner.epsilon = 1.0
    explored = {tuner.choose_drafter(("eagle3", "ngram", "suffix"), 1).drafter for _ in range(50)}
    near = {d for d in ("eagle3", "suffix") if tuner.choose(d, 1).estimate >= 0.9 * pick.estimate}
    assert explored == {"ngram"} | near  # only drafters expected to keep 90% of the best's throughput


def test_no_step_explores_where_exploring_is_expected_to_cost_much():
    """Acceptance does not depend on the batch: a 16-row step that would run 1.6x as wide never explores."""
    cost = CostModel()
    for b, base in ((1, 0.030), (16, 0.053)):
        for n in range(1, 6):
            cost.cells[(b, n)] = base * (1.0 + (0.02 if b == 1 else 0.8) * (n - 1))
    tuner = LoadTuner(4, cost, epsilon=1.0)
    for i in range(50):
        tuner.observe_pass("eagle3", 3, 3, i % 2, 0.001)  # half the first drafts accepted, never a second
    busy = [tuner.choose("eagle3", 16) for _ in range(30)]
    assert all(c.k == 0 and not c.explored for c in busy)
    alone = [tuner.choose("eagle3", 1) for _ in range(30)]
    assert any(c.explored for c in alone)


def test_the_engine_client_streams_each_requests_outputs_across_threads_with_no_callback_on_the_request(decoders):
    """The server's door (engine.decode.client): the core steps on its own thread, each request's outputs reach
    the event loop that submitted it, in order, by id; the request carries no callback into the loop; an aborted
    request ends cancelled; a whole response's stream hears only its end."""
    import asyncio

    from engine.decode.client import EngineClient

    dec = decoders["ngram"]
    sched = scheduler(dec, LoadTuner(4), max_batch=4)
    client = EngineClient(sched)
    stop = threading.Event()
    loop = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    loop.start()

    async def serve():
        streams = [
            client.submit(Request(dec.encode(p), N, "ngram", id=str(i)), tokens=i != 1)
            for i, p in enumerate(PROMPTS[:3])
        ]
        gone = client.submit(Request(dec.encode(PROMPTS[3]) * 8, 200, "ngram", id="gone"), tokens=True)
        client.abort(gone.request)
        got = []
        for s in streams + [gone]:
            outputs = []
            while not outputs or outputs[-1].finished is None:
                out = await s.get(timeout_s=60)
                assert out is not None
                outputs.append(out)
            got.append(outputs)
        return streams, gone, got

    try:
        streams, gone, got = asyncio.run(serve())
    finally:
        stop.set()
        loop.join(60)
    refs = references(dec)
    for i, (s, outputs) in enumerate(zip(streams, got)):
        f = outputs[-1].finished
        assert s.request.on_tokens is None and s.request.on_done is None
        assert f.stats.output_ids == refs[i] and f.request is s.request
        if i == 1:  # a whole response: its end alone
            assert len(outputs) == 1
        else:
            assert len(outputs) > 1 and sum((o.tokens for o in outputs[:-1]), []) == f.stats.output_ids
    assert got[-1][-1].finished.reason == "cancelled"
    assert client._streams == {}  # every ended stream let go


def test_the_server_records_a_request_before_its_stream_hears_the_end(tiny_dirs):
    from engine.decode.client import EngineClient
    from engine.decode.decoder import Decoder
    from engine.decode.handoff import Callbacks
    from engine.decode.loading import load_pair
    from engine.serve.config import ServeConfig, check_serve
    from engine.serve.service import Ended, Service

    d = tiny_dirs["qwen2"]
    service = Service(
        check_serve(ServeConfig(device="cpu", dtype="float32", profile=False)),
        Decoder(load_pair(d["target"], d["near"], "cpu", "float32")),
    )
    kinds = [type(s) for s in service.scheduler.subscribers]
    assert kinds == [Ended, EngineClient, Callbacks]


def test_from_k_0_only_a_one_row_step_explores():
    """While no row drafts, the rows' drafters fall behind; a step exploring from k = 0 pays every row's catch-up,
    which the estimate leaves out (the head at 16 rows: runs #856, #867). A cheap wider forward does not change
    that: at 16 rows the tuner stays at k = 0; at one row it still explores, so acceptance stays measured."""
    cost = CostModel()
    for b, base in ((1, 0.030), (16, 0.040)):
        for n in range(1, 6):
            cost.cells[(b, n)] = base * (1.0 + 0.05 * (n - 1))
    tuner = LoadTuner(4, cost, epsilon=1.0)
    for _ in range(50):
        tuner.observe_pass("eagle3", 3, 3, 0, 0.00015)  # nothing accepted: off is the best at every batch
    assert tuner.throughput("eagle3", 16, 1) >= 0.9 * tuner.throughput("eagle3", 16, 0)  # exploring looks cheap
    busy = [tuner.choose("eagle3", 16) for _ in range(30)]
    assert all(c.k == 0 and not c.explored for c in busy)
    alone = [tuner.choose("eagle3", 1) for _ in range(30)]
    assert all(c.k == 1 and c.explored for c in alone)
