#!/bin/bash
# update_floor.py at dims between powers of two (README.md here): dims 40 and 48 on the MLPerf rows (204M, the step's
# 10.2M distinct), then dim 40 dense (10M of 12M rows), then dim 32. Any GPU; ~4 min. Each step writes under
# $OUT/<step>/ with its log and is tarred into $OUT/all.tgz as it ends.
# Usage: bash benchmarks/queued/update_floor_dims.sh COMMIT
set -u
C=${1:?commit}
git rev-parse HEAD; [ "$(git rev-parse HEAD)" = "$C" ] || echo "WARNING: HEAD is not $C"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
export PYTHONPATH=.:benchmarks
step() {  # name, timeout, update_floor.py options...
  local name=$1 t=$2; shift 2; mkdir -p $OUT/$name
  POLYREC_RESULTS_DIR=$OUT/$name timeout $t python3 benchmarks/update_floor.py --layouts separate --orders sorted "$@" \
    > $OUT/$name/log.txt 2>&1; echo "$name rc=$? $(date +%T)"
  tail -1 $OUT/$name/log.txt | cut -c1-600; (cd $OUT && tar czf all.tgz */)
}
step sparse_d40 100 --dim 40
step sparse_d48 100 --dim 48
step dense_d40 80 --dim 40 --rows 12000000 --unique 10000000
step sparse_d32 100 --dim 32
ls -la $OUT
