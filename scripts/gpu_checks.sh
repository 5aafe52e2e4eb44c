#!/usr/bin/env bash
# The GPU rows in one run, for a machine with CUDA (run from the repository root, with the .venv set up and carried):
# the CUDA-only tests (no host-device synchronisation in a training step), then the benchmark tables that
# docs/benchmarks.md records: training steps of ELC-BERT / LTG-BERT / BERT under bf16 autocast with sdpa and with
# flex_attention, and the attention implementations side by side. Output: stdout, and $OUT/gpu_checks.md when OUT is set.
set -uo pipefail
PY=${PY:-.venv/bin/python}
# FlexAttention's compiled kernel in bf16 needed more shared memory than an H100 has with torch 2.11's defaults
KERNEL_OPTIONS=${KERNEL_OPTIONS:-'{"num_stages": 1}'}
{
  echo "# GPU checks"; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo
  $PY -m pytest -q -p no:cacheprovider tests/test_modeling.py -k cuda 2>&1 | tail -3; echo
  $PY scripts/bench_model.py --device cuda --bf16 --rounds 3 --threads 8; echo
  $PY scripts/bench_model.py --device cuda --bf16 --rounds 3 --threads 8 --attn-implementation flex_attention \
    --kernel-options "$KERNEL_OPTIONS"; echo
  $PY scripts/bench_attention.py --device cuda --dtype bfloat16 --batch 32 --length 128 --rounds 3 --threads 8 \
    --kernel-options "$KERNEL_OPTIONS"
} 2>&1 | tee "${OUT:-/tmp}/gpu_checks.md"
