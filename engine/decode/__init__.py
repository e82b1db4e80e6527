"""Decoding, and the engine core both doors share: one request's state (`sequence`: waiting, prefilling, running,
finished with a reason; it counts every pass and calls the drafter in one order), the hot path (`spec`: prefill,
verify, accept; `generate` is one Sequence on a single-row cache), the batched step (`batch`: rows of one cache,
verified in one forward; `mixed`: prompts' chunks inside that forward; `intake`: admission, prefix lookup and
chunks; `scheduler`: continuous batching under a token budget with chunked prefills, each pass planned, run and
applied (`schedule` → `execute` → `update`, each hand-off a named type in `handoff`), used by the server and by
`bench --concurrency` through one door, the engine `client`; `steps`: its plain step records and the tuner it
consults; `prefix`: the prefix cache), the drafters behind one typed base (`drafters`: draft model, n-gram; `suffix`
trees; `eagle3`: the EAGLE-3 head, its checkpoint and its drafter; the `hybrid` of the suffix trees and the head;
`choice`, a drafter the tuner picks per step), Phoenix's own flattened forward for the Llama family and kin:
Granite, OLMo2, Phi3 (`runner`, its families' math in `family`, its flattened tokens in `flat`) over linear layers
prepacked where measured faster (`packed`), with a bf16 decode step's attention, norm, RoPE and linear layers of up
to sixteen tokens in Phoenix's AVX-512 BF16 extension, built for the CPU on first use, SDPA and oneDNN where it
cannot run (`fast_attention`, `kernels/`), static caches, `--compile` and `--freeze` (`compiled`), assisted
generation (`hf_assisted`), model loading and its pair checks (`loading`), each model's card (`card`), fetching from
PyPI's wheels (`fetch`, its pinned `sources`) and the user's own folders and GGUF files (`own`), and one request's
`Decoder`. The settings (`config`: the pair, the suffix trees, the hybrid, the token budget), the `sources` and a
request's `sampling_params` import no torch.

Imports nothing from db, bench, observe, cli or app (tests/test_architecture.py holds it to that).
"""
