#!/bin/bash
# Any GPU: gather_rate.py --floor. H200: then latency_probe.py, gather_rate.py --draw 113 and the full-table
# tbe_breakdown.py with the merge A/B (README.md here). Other GPUs: gather_rate.py --draw 119. Each step writes under
# $OUT/<step>/ with its log; all tarred at the end. Usage: bash benchmarks/queued/h200_batch.sh COMMIT
set -u
C=${1:?commit}
git rev-parse HEAD; [ "$(git rev-parse HEAD)" = "$C" ] || echo "WARNING: HEAD is not $C"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
export PYTHONPATH=.:benchmarks
step() {  # name, timeout, command...
  local name=$1 t=$2; shift 2; mkdir -p $OUT/$name
  POLYREC_RESULTS_DIR=$OUT/$name timeout $t "$@" > $OUT/$name/log.txt 2>&1; echo "$name rc=$? $(date +%T)"
  tail -3 $OUT/$name/log.txt | cut -c1-400
}
step floor 150 python3 benchmarks/gather_rate.py --floor
if [[ "$GPU" == *H200* ]]; then
  step latency 120 python3 benchmarks/latency_probe.py
  step draw113 150 python3 benchmarks/gather_rate.py --draw 113
  step breakdown 200 python3 benchmarks/tbe_breakdown.py --skip-sweep --dtype bf16 --grad-dtype bf16 --merge-ab 1,8 \
    --rounds 3
else
  step draw119 150 python3 benchmarks/gather_rate.py --draw 119
fi
cd $OUT && tar czf all.tgz */ && ls -la
