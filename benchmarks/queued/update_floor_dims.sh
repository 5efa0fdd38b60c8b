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
for d in 40 48; do
  mkdir -p $OUT/sparse_d$d
  POLYREC_RESULTS_DIR=$OUT/sparse_d$d timeout 100 python3 benchmarks/update_floor.py --dim $d --layouts separate \
    --orders sorted > $OUT/sparse_d$d/log.txt 2>&1; echo "sparse d$d rc=$?"
  tail -1 $OUT/sparse_d$d/log.txt | cut -c1-600; (cd $OUT && tar czf all.tgz */)
done
for d in 40; do
  mkdir -p $OUT/dense_d$d
  POLYREC_RESULTS_DIR=$OUT/dense_d$d timeout 80 python3 benchmarks/update_floor.py --dim $d --rows 12000000 \
    --unique 10000000 --layouts separate --orders sorted > $OUT/dense_d$d/log.txt 2>&1; echo "dense d$d rc=$?"
  tail -1 $OUT/dense_d$d/log.txt | cut -c1-600; (cd $OUT && tar czf all.tgz */)
done
d=32; mkdir -p $OUT/sparse_d$d
POLYREC_RESULTS_DIR=$OUT/sparse_d$d timeout 100 python3 benchmarks/update_floor.py --dim $d --layouts separate \
  --orders sorted > $OUT/sparse_d$d/log.txt 2>&1; echo "sparse d$d rc=$?"; tail -1 $OUT/sparse_d$d/log.txt | cut -c1-600
cd $OUT && tar czf all.tgz */ && ls -la
