"""One example per command group, shown under its ``--help`` (and in docs/cli.md): what a newcomer would type."""

from __future__ import annotations

import argparse

EXAMPLES = {
    "generate": "python -m engine generate --prompt 'def add(a, b):' --k 4",
    "zoo": "python -m engine zoo fetch smollm2",
    "bench": "python -m engine bench --target smollm2 --draft smollm2-eagle3 --drafter eagle3 --modes target,eagle3_3,"
    "ngram_8 --limit 20",
    "runs": "python -m engine runs --tag baseline",
    "show": "python -m engine show 12",
    "report": "python -m engine report 12 --by column --format md",
    "export": "python -m engine export 12 --format csv --out run12.csv",
    "db": "python -m engine db upgrade",
    "submit": "python -m engine submit --modes target,ngram_8 --limit 5",
    "worker": "python -m engine worker --max-idle 600",
    "resume": "python -m engine resume 12",
    "cancel": "python -m engine cancel 12",
    "distill": "python -m engine distill --target smollm2 --draft smollm2-draft",
    "import": "python -m engine import results/*.json --engine vllm --variant eagle3-k3 --hardware '8x H100'",
    "lm-eval": "python -m engine lm-eval --url http://127.0.0.1:8000 --drafters none,model,ngram --k 3 --limit 20",
    "engines": "python -m engine engines load --url http://127.0.0.1:8000 --variants none,auto --concurrency 1,4",
    "vllm": "python -m engine vllm start --method eagle3 --k 3",
    "llamacpp": "python -m engine llamacpp start --model smollm2 --spec-type ngram-simple",
    "serve": "python -m engine serve --target smollm2 --draft smollm2-eagle3 --drafter eagle3 --max-batch 16\n"
    "  curl -s localhost:8000/v1/completions -H 'Content-Type: application/json' "
    '-d \'{"prompt": "def add(a, b):", "max_tokens": 32}\'',
    "fleet": "python -m engine fleet start --replicas 2 --router cache_aware --target smollm2 --draft none "
    "--drafter ngram\n  # measured as a user's client would: engines load --url http://127.0.0.1:8100\n"
    "  python -m engine fleet stop --port 8100",
    "regressions": "python -m engine regressions --db sqlite:///benchmarks/results.db --exit-code",
    "docs": "python -m engine docs --check",
    "tag": "python -m engine tag 12 baseline",
    "untag": "python -m engine untag 12 baseline",
    "note": "python -m engine note 12 --text 'quiet machine, second sitting'",
    "archive": "python -m engine archive 12",
    "unarchive": "python -m engine unarchive 12",
    "delete": "python -m engine delete 12",
    "baseline": "python -m engine baseline 12",
}


def describe(sub: argparse._SubParsersAction) -> None:
    """Every command group: its help line as its description, and its example under its options."""
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, parser in sub.choices.items():
        parser.description = parser.description or helps.get(name)
        if name in EXAMPLES:
            parser.epilog = f"example:\n  {EXAMPLES[name]}"
            parser.formatter_class = argparse.RawDescriptionHelpFormatter
