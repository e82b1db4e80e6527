"""`generate` (one prompt, printed) and `zoo` (the model pairs: fetch, build, train, export).

Each command imports what it runs when it runs, so building the parser (and `--help`) loads no torch."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from engine.catalog import NAMED, SMOLLM2, added, present
from engine.config import add_options, check_choices, from_args, from_dict, given_values
from engine.decode.config import PairConfig, SuffixConfig
from engine.decode.fetch import FetchConfig, fetch
from engine.decode.sources import SOURCES
from engine.engines.config import ExportConfig
from engine.errors import PhoenixError
from engine.modes import DRAFT_MODEL_DRAFTERS, Drafter, Loop, PromptFormat, check_k
from engine.prompts.sets import check_prompt
from engine.train.config import HEAD_PRESETS, DraftConfig, HeadBuildConfig, ZooConfig


@dataclass
class GenerateConfig(PairConfig):
    drafter: Drafter = (
        "model"  # none | model | ngram | suffix | eagle3 (--draft is then an EAGLE-3 head): what proposes the k tokens
    )
    loop: Loop = "phoenix"  # phoenix (this loop) | hf (transformers' assisted generation: drafter model or ngram)
    k: int = 4  # draft length; 0 is target-only
    max_new_tokens: int = 64  # tokens to generate
    prompt: str = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'  # the text to continue
    json: bool = False  # print exactly one JSON object
    prompt_format: PromptFormat = "raw"  # raw continues the text; chat sends it as the user's turn of the chat template
    suffix: SuffixConfig = field(default_factory=SuffixConfig)  # the suffix drafter's settings

    def validate(self) -> GenerateConfig:
        check_choices(self)
        self.check_pack()
        check_prompt(self.prompt)
        check_k(self.k)
        if self.loop == "hf" and self.drafter not in ("model", "ngram"):
            raise PhoenixError(
                "--loop hf drafts with the draft model or prompt lookup: use --drafter model or ngram",
                field="drafter",
            )
        self.suffix.validate()
        return self


def cmd_generate(args) -> int:
    from engine.decode.decoder import Decoder, stats_dict  # lazy: torch, kept off --help
    from engine.decode.loading import load_pair, prepare  # lazy: torch, kept off --help

    cfg = from_args(GenerateConfig, args).validate()
    draft = cfg.draft if cfg.drafter in DRAFT_MODEL_DRAFTERS else None
    pair = prepare(load_pair(cfg.target, draft, cfg.device, cfg.dtype, cfg.allow_pickle), cfg.pack, cfg.runner)
    dec = Decoder(pair)
    dec.start_run(cfg.suffix)
    ids = dec.encode(cfg.prompt, cfg.prompt_format)
    dec.run(ids, cfg.k, min(cfg.max_new_tokens, 8), cfg.drafter, cfg.loop)  # warm-up, excluded
    stats = dec.run(ids, cfg.k, cfg.max_new_tokens, cfg.drafter, cfg.loop)
    out = stats_dict(stats, dec.text(stats))
    if cfg.json:
        print(json.dumps(out))
        return 0
    print(out["output_text"])
    print("---")
    acc = "n/a" if out["acceptance"] is None else f"{out['acceptance']:.1%}"
    print(
        f"k={cfg.k} drafter={cfg.drafter} loop={cfg.loop} tokens={out['output_tokens']} passes={out['passes']} "
        f"accepted/proposed={out['accepted']}/{out['proposed']} ({acc}) "
        f"latency={out['latency_s']:.3f}s tok/s={out['tokens_per_s']:.1f} "
        f"prefill={out['prefill_s'] or 0:.3f}s draft={out['draft_s']:.3f}s verify={out['verify_s']:.3f}s"
    )
    for row in out["per_position"]:
        rate = row["accepted"] / row["proposed"] if row["proposed"] else 0
        print(f"  position {row['position']}: {row['accepted']}/{row['proposed']} ({rate:.1%})")
    return 0


def cmd_zoo_build(args) -> int:
    from engine.train.zoo import build  # lazy: torch, kept off --help

    print(json.dumps(build(from_args(ZooConfig, args))))
    return 0


def cmd_zoo_distill_draft(args) -> int:
    from engine.train.zoo import distill_draft_on_answers  # lazy: torch, kept off --help

    print(json.dumps(distill_draft_on_answers(from_args(ZooConfig, args))))
    return 0


def cmd_zoo_fetch(args) -> int:
    cfg = from_args(FetchConfig, args)
    result = fetch(args.name, cfg, lambda line: print(line, flush=True))
    print(
        f"{args.name}: {result['status']} at {cfg.out or NAMED[args.name].path} ({result['parameters']:,} "
        f"parameters, {result['license']}, {result['weights']})"
    )
    return 0


def cmd_zoo_add(args) -> int:
    from engine.decode.own import add  # lazy: torch, kept off --help

    done = add(args.path, args.name)
    print(f"{done['name']}: {done['what']}{' (dequantized into ' + done['path'] + ')' if done['converted'] else ''}")
    print(f"use it as --target {done['name']} or --draft {done['name']}")
    return 0


def cmd_zoo_list(args) -> int:
    for name, known in {**NAMED, **added()}.items():
        state = "here" if present(name) else f"not here: {known.get}"
        print(f"{name:28} {state}\n    {known.what}")
    return 0


def cmd_zoo_build_draft(args) -> int:
    from engine.train.draft import build_draft  # lazy: torch, kept off --help

    print(json.dumps(build_draft(from_args(DraftConfig, args))))
    return 0


def cmd_zoo_build_head(args) -> int:
    from engine.train.eagle3_build import build_head  # lazy: torch, kept off --help

    preset = dict(HEAD_PRESETS[args.name])
    hours = preset.pop("hours")
    cfg = from_dict(HeadBuildConfig, {**preset, **given_values(HeadBuildConfig, args)})
    print(
        f"building the EAGLE-3 head for {cfg.target} into {cfg.out}: about {hours:g} h on 2 cores (answers, then "
        f"training{f' for at most {cfg.time_budget_s / 3600:g} h' if cfg.time_budget_s else ''}); a stopped build "
        "keeps its answers, and --resume continues the head",
        flush=True,
    )
    print(json.dumps(build_head(cfg)))
    return 0


def cmd_zoo_export(args) -> int:
    from engine.engines.gguf_export import export  # lazy: torch, kept off --help

    done = export(args.name, from_args(ExportConfig, args))
    print(
        f"{args.name}: {done['kind']} GGUF at {done['path']} ({done['tensors']} tensors, from weights sha256 "
        f"{done['source_sha256'][:12]}); serve it with `llamacpp start --spec-type "
        f"{'draft-eagle3' if done['kind'] == 'eagle3' else 'draft-simple'} --draft-model {done['path']}`"
    )
    return 0


def add_commands(sub) -> None:
    g = sub.add_parser("generate", help="decode one prompt and print the text and stats")
    add_options(g, GenerateConfig)
    g.set_defaults(func=cmd_generate)
    z = sub.add_parser("zoo", help="model pairs: fetch the real pair, train its draft and EAGLE-3 head, export to GGUF")
    zsub = z.add_subparsers(dest="zoo_command", required=True)
    zb = zsub.add_parser("build", help="retrain tokenizer, target and draft from the stdlib")
    add_options(zb, ZooConfig)
    zb.set_defaults(func=cmd_zoo_build)
    zd = zsub.add_parser("distill-draft", help="only the last stage: retrain the draft on the target's answers")
    add_options(zd, ZooConfig)
    zd.set_defaults(func=cmd_zoo_distill_draft)
    zf = zsub.add_parser("fetch", help="download and convert a real model (once; cached in models/)")
    zf.add_argument("name", choices=list(SOURCES), help="the model to fetch")
    add_options(zf, FetchConfig)
    zf.set_defaults(func=cmd_zoo_fetch)
    za = zsub.add_parser("add", help="give your own model folder or GGUF file a name (a GGUF is dequantized once)")
    za.add_argument("path", help="a Hugging Face model folder, an EAGLE-3 head folder or a GGUF file")
    za.add_argument("--name", required=True, help="the name to use with --target / --draft")
    za.set_defaults(func=cmd_zoo_add)
    zl = zsub.add_parser("list", help="every model name: Phoenix's and yours, and whether it is here")
    zl.set_defaults(func=cmd_zoo_list)
    zd2 = zsub.add_parser(
        "build-draft", help="train a small draft of a real target (KL to its next-token distribution)"
    )
    zd2.add_argument("name", choices=[SMOLLM2], help="the target whose draft to build")
    add_options(zd2, DraftConfig)
    zd2.set_defaults(func=cmd_zoo_build_draft)
    zh = zsub.add_parser(
        "build-head", help="train an EAGLE-3 head for a real target on its own answers (vLLM's format)"
    )
    zh.add_argument("name", choices=list(HEAD_PRESETS), help="the target whose head to build")
    add_options(zh, HeadBuildConfig)
    zh.set_defaults(func=cmd_zoo_build_head)
    ze = zsub.add_parser(
        "export", help="write a draft model or an EAGLE-3 head as a GGUF llama.cpp's server drafts with"
    )
    ze.add_argument("name", help="smollm2-draft, smollm2-eagle3 or a model folder")
    ze.add_argument("--to", choices=["gguf"], default="gguf", help="the format (GGUF, for llama.cpp)")
    add_options(ze, ExportConfig)
    ze.set_defaults(func=cmd_zoo_export)
