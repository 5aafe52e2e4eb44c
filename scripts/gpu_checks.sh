#!/usr/bin/env bash
# The GPU rows in one run, for a machine with CUDA (run from the repository root, with the .venv set up and carried):
# the CUDA-only tests (no host-device synchronisation in a training step), the kernels and operators of one training
# step (scripts/profile_step.py), then the benchmark tables that docs/benchmarks.md records: training steps of
# ELC-BERT / LTG-BERT / BERT under bf16 autocast with sdpa (against BASELINE, another checkout's `elc_bert` folder's
# parent, when set) and with flex_attention at the kernel options the model chooses. Output: stdout, and
# $OUT/gpu_checks.md, $OUT/kernels.md when OUT is set.
set -uo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp}
{
  echo "# GPU checks"; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"; echo
  $PY -m pytest -q -p no:cacheprovider tests/test_modeling.py -k cuda 2>&1 | tail -3; echo
  $PY scripts/profile_step.py --device cuda --bf16 --batch 32 --kernels > "$OUT/kernels.md" 2>&1
  sed -n '/aten operators/,$p' "$OUT/kernels.md"; echo
  $PY scripts/bench_model.py --device cuda --bf16 --rounds 3 --threads 8 ${BASELINE:+--baseline-src "$BASELINE"}; echo
  timeout "${FLEX_TIMEOUT:-240}" $PY scripts/bench_model.py --device cuda --bf16 --rounds 3 --threads 8 \
    --attn-implementation flex_attention
} 2>&1 | tee "$OUT/gpu_checks.md"
