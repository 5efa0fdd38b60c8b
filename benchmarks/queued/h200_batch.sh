#!/bin/bash
# Any GPU: gather_rate.py --floor. H200: then latency_probe.py, gather_rate.py --draw 113 and the full-table
# tbe_breakdown.py with the merge A/B (README.md here). Other GPUs: gather_rate.py --draw 119.
# Usage: bash benchmarks/queued/h200_batch.sh COMMIT
source "$(dirname "$0")/step.sh"
step floor 150 python3 benchmarks/gather_rate.py --floor
if [[ "$(nvidia-smi --query-gpu=name --format=csv,noheader)" == *H200* ]]; then
  step latency 120 python3 benchmarks/latency_probe.py
  step draw113 150 python3 benchmarks/gather_rate.py --draw 113
  step breakdown 200 python3 benchmarks/tbe_breakdown.py --skip-sweep --dtype bf16 --grad-dtype bf16 --merge-ab 1,8 \
    --rounds 3
else
  step draw119 150 python3 benchmarks/gather_rate.py --draw 119
fi
ls -la $OUT
