"""The settings of each training command (the draft model, the EAGLE-3 head, the embedded pair, a LoRA
distillation): plain dataclasses that import no torch, so `--help` and validation run before anything loads."""

from __future__ import annotations

from dataclasses import dataclass

from engine.catalog import NAMED, QWEN15, QWEN15_EAGLE3, SMOLLM2, SMOLLM2_DRAFT, SMOLLM2_EAGLE3
from engine.errors import PhoenixError
from engine.paths import DATA_DIR, EMBEDDED_DIR, MODELS_DIR


@dataclass
class DraftConfig:
    target: str = SMOLLM2  # the model the draft learns to predict
    out: str = str(NAMED[SMOLLM2_DRAFT].path)  # where the draft goes
    seed: int = 1234  # initialisation and batch order
    hidden: int = 320  # narrow: the 49k-row output layer costs hidden x vocab per drafted token
    layers: int = 2  # transformer blocks
    ffn: int = 960  # MLP width
    heads: int = 5  # attention heads of 64 dims
    kv_heads: int = 1  # grouped-query attention keeps the draft's KV cache small
    seq_len: int = 256  # training window in tokens
    steps: int = 400  # optimizer steps of KL distillation (0 with --init-from: skip to the answers stage)
    batch: int = 4  # windows per step
    lr: float = 2e-3  # peak learning rate (warm-up, cosine decay)
    warmup_steps: int = 20  # linear warm-up steps
    init_from: str = ""  # start from this draft's weights instead of a fresh initialisation
    answer_prompts: int = 208  # chat prompts the target answers (HumanEval train first, then stdlib functions)
    answer_tokens: int = 128  # greedy tokens per answer
    answer_batch: int = 16  # answers generated together (left-padded)
    seq_steps: int = 250  # optimizer steps on the answers (0 skips the stage)
    seq_batch: int = 8  # answers per step
    seq_lr: float = 1e-3  # peak learning rate on the answers
    teacher_dtype: str = "bfloat16"  # the target's forward while teaching: bf16 is about 2x faster on AVX512-BF16
    save_dtype: str = "float16"  # weights on disk; loaded in the run's dtype

    def validate(self) -> DraftConfig:
        """Every number checked before the target loads, each with the flag to fix."""
        checks = [
            (self.steps >= (0 if self.init_from else 1), "--steps must be >= 1 (0 only with --init-from)"),
            (self.seq_steps >= 0 and self.seq_batch >= 1, "--seq-steps must be >= 0 and --seq-batch >= 1"),
            (
                self.answer_prompts >= 0 and self.answer_tokens >= 1 and self.answer_batch >= 1,
                "--answer-prompts must be >= 0, --answer-tokens and --answer-batch >= 1",
            ),
            (self.seq_lr > 0, "--seq-lr must be > 0"),
            (self.batch >= 1, "--batch must be >= 1"),
            (self.layers >= 1, "--layers must be >= 1"),
            (self.seq_len >= 8, "--seq-len must be >= 8"),
            (self.heads >= 1 and self.hidden % self.heads == 0, "--hidden must be a multiple of --heads"),
            (self.kv_heads >= 1 and self.heads % self.kv_heads == 0, "--heads must be a multiple of --kv-heads"),
            (self.lr > 0, "--lr must be > 0"),
            (
                0 <= self.warmup_steps < max(self.steps, self.seq_steps, 1),
                "--warmup-steps must be below the step counts",
            ),
            (
                self.save_dtype in ("float16", "bfloat16", "float32"),
                "--save-dtype must be float16, bfloat16 or float32",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise PhoenixError(message)
        return self


@dataclass
class HeadBuildConfig:
    target: str = "smollm2"  # the target the head drafts for (a name, directory or cached id)
    out: str = str(MODELS_DIR / "smollm2-eagle3")  # where the head folder is written
    draft_vocab_size: int = (
        4096  # output rows: the most frequent answer tokens (FR-Spec); 4096 covered 98.9% on SmolLM2
    )
    intermediate_size: int = 0  # the head's MLP width (0: the target's, as vLLM's and SpecForge's heads)
    humaneval_prompts: int = 114  # from HumanEval's train split (114 = all of it)
    spec_bench_prompts: int = 240  # from Spec-Bench's train half (240 = all of it)
    second_turns: int = 40  # MT-bench second turns of that half, after the target's own first answer (40 = all)
    code_style_prompts: int = 120  # stdlib functions asked about in chat: explain, annotate, test, rewrite
    stdlib_prompts: int = 60  # windows of standard-library code, continued as raw text
    max_prompt_tokens: int = 1024  # longer prompts keep their last tokens (Spec-Bench's longest run to ~1,000)
    max_new_tokens: int = 128  # answer length per prompt
    gen_batch: int = 24  # prompts answered together
    train_prompt_tokens: int = 1024  # prompt tokens kept as context in training: a head drafts after long contexts
    # too, so it must attend over them in training (the first build kept 64)
    fixed_text_tokens: int = 200_000  # teacher-forced fixed text (EAGLE-1's data): one cheap forward per batch
    text_window: int = 256  # tokens per fixed-text window (the Python docs and stdlib code)
    text: str = ""  # your own text to teacher-force the target over, comma-separated: files, folders (their .py, .md,
    # .txt and .jsonl files) or JSONL with a "text" field per line; it comes first in --fixed-text-tokens
    from_runs: str = ""  # runs whose recorded prompts and outputs (the target's own text) the head learns from:
    # "12,15" or "12:0.8" (run 12's first 80% of requests; the rest can measure it); with --resume, a fine-tune
    db: str = ""  # the database --from-runs reads (default: PHOENIX_DB, else data/phoenix.db)
    ttt_steps: int = 4  # training-time-test unroll (EAGLE-3 uses 7; 4 fits a CPU budget)
    step_decay: float = 0.8  # loss weight of unroll step s is step_decay**s, as EAGLE-3
    epochs: int = 5  # passes over the answers and the fixed text
    batch_tokens: int = 1536  # tokens per optimizer step: small, since a CPU budget buys few steps
    lr: float = 2e-3  # peak AdamW learning rate (cosine decay after warm-up)
    warmup_steps: int = 20
    time_budget_s: float = 0.0  # stop training after it ran this many seconds (its main thread's CPU time, so a paused
    # build does not spend it; 0: run every epoch)
    eval_prompts: int = 6  # held-out prompts per held-out source whose answers measure top-1 agreement
    eval_every: int = 40  # optimizer steps between held-out checks (the go/no-go curve in the model card)
    seed: int = 1234
    answers_dir: str = str(DATA_DIR / "head-answers")  # the target's answers with their taps, kept for the next build
    dtype: str = "float32"  # the target's dtype while answering
    train_dtype: str = "float32"  # float32 | bfloat16: the head's matmuls while training (bfloat16: autocast over fp32
    # master weights and AdamW state; 4x the fp32 matmul rate on an AVX512-BF16 CPU); soft labels stay fp32
    save_dtype: str = "float16"  # the head on disk
    resume: bool = False  # continue the head at --out: its weights, optimizer state and stages, on this stage's data
    state_dir: str = str(DATA_DIR / "head-state")  # fp32 weights and optimizer state per head, for --resume
    pack: str = "auto"  # auto | on | off: the target's linear layers prepacked while it answers (engine.decode.packed)


# What `zoo build-head NAME` builds when a flag is not given: the dataclass defaults are SmolLM2's. A 1.78B target
# answers about 13x slower than SmolLM2 on 2 cores, so its head sees fewer prompts (none beyond 512 tokens) and less
# fixed text, and trains under a time budget; `--resume` adds stages on more data. ``hours`` is stated up front.
HEAD_PRESETS: dict[str, dict] = {
    SMOLLM2: {"out": str(NAMED[SMOLLM2_EAGLE3].path), "hours": 1.0},
    QWEN15: {
        "target": QWEN15,
        "out": str(NAMED[QWEN15_EAGLE3].path),
        "draft_vocab_size": 8192,  # the target's answers used 3,714 distinct tokens; 4,096 covered all of them
        "spec_bench_prompts": 60,
        "second_turns": 0,
        "code_style_prompts": 80,
        "stdlib_prompts": 40,
        "max_prompt_tokens": 512,
        "train_prompt_tokens": 512,
        "fixed_text_tokens": 40_000,
        "gen_batch": 20,
        "epochs": 3,
        "batch_tokens": 2048,
        "eval_every": 50,
        "eval_prompts": 4,
        "dtype": "bfloat16",  # the head drafts for the bf16 target, so it learns the bf16 target's states
        "train_dtype": "bfloat16",
        "time_budget_s": 3 * 3600.0,
        # stated up front: training took 1,638 s for the 3 epochs; ~37.6k answer tokens in bf16 batches of 20 at the
        # 25 tok/s the server batches 8 rows at on a Zen 4 (runs #276-#279) is about 25 min; fp32 answers took ~7 h
        "hours": 1.5,
    },
}


@dataclass
class ZooConfig:
    out: str = str(EMBEDDED_DIR)  # where target/ and draft/ are written
    seed: int = 1234  # every random choice below derives from it
    vocab_size: int = 4096  # byte-level BPE; small so the LM head stays cheap
    seq_len: int = 128  # training window in tokens
    # target: ~18M parameters, ~21 ms a token on 2 cores against ~2.7 ms for the
    # one-layer draft; wide and shallow because it learns faster per CPU-second
    target_hidden: int = 512
    target_layers: int = 5
    target_ffn: int = 1536
    target_heads: int = 8
    target_kv_heads: int = 4
    target_steps: int = 1000  # ~2.2 s a step on 2 cores: ~40 min; 300 steps left a target that only wrote newlines
    target_batch: int = 8
    target_lr: float = 3e-3
    # draft: one layer, distilled from the target
    draft_hidden: int = 128
    draft_layers: int = 1
    draft_ffn: int = 384
    draft_heads: int = 4
    draft_kv_heads: int = 2
    draft_steps: int = 240
    draft_batch: int = 16
    draft_lr: float = 3e-3
    # sequence-level distillation: the draft learns the target's own greedy
    # continuations of training prompts (HumanEval train split + stdlib windows)
    seq_prompts: int = 200
    seq_new_tokens: int = 96
    seq_steps: int = 300
    seq_batch: int = 8
    seq_lr: float = 2e-3
    warmup_steps: int = 30
    save_dtype: str = "float16"  # keeps the committed pair under ~40 MB; loaded as fp32


@dataclass
class DistillConfig:
    target: str = "embedded"  # teacher: 'embedded', a model directory or a cached HF id
    draft: str = "embedded"  # the draft to distil (the student)
    prompts: str = "humaneval-train"  # humaneval-train or a JSONL file; the held-out test split is refused
    limit: int | None = None  # first N training prompts
    max_new_tokens: int = 256  # teacher answer length
    epochs: int = 1  # passes over the teacher answers
    lora_r: int = 16  # LoRA rank
    lora_alpha: int = 32  # LoRA scale numerator (scale = alpha / r)
    lora_dropout: float = 0.0  # dropout on the LoRA input
    target_modules: str = "all-linear"  # peft's shorthand: every linear layer but the output head
    lr: float = 2e-4  # peak learning rate (linear warm-up and decay)
    batch_size: int = 8  # answers per optimizer step
    checkpoint_every: int = 10  # optimizer steps between resumable checkpoints
    seed: int = 42  # LoRA init, batch order and the eval runs
    out: str = ""  # output model directory (default models/<draft>-distilled; the dashboard lists it)
    save_dtype: str = "float16"  # float16 | bfloat16 | float32 for the merged weights
    device: str = "cpu"  # cpu | cuda
    allow_pickle: bool = False  # allow pickle (.bin) weights; only for files you trust
    eval: bool = False  # benchmark the held-out prompts with the original and the distilled draft, side by side
    eval_prompts: str = "humaneval-test"  # the held-out set --eval benchmarks
    eval_limit: int = 50  # first N of them (the test split has 50)
    eval_max_new_tokens: int = 96  # tokens per evaluation request
    eval_ks: str = "2,4,6,8"  # model_<k> modes compared before and after
