#!/bin/bash
# update_floor.py at dims between powers of two (README.md here): dims 40 and 48 on the MLPerf rows (204M, the step's
# 10.2M distinct), then dim 40 dense (10M of 12M rows), then dim 32. Any GPU; ~4 min.
# Usage: bash benchmarks/queued/update_floor_dims.sh COMMIT
source "$(dirname "$0")/step.sh"
FLOOR=(python3 benchmarks/update_floor.py --layouts separate --orders sorted)
step sparse_d40 100 "${FLOOR[@]}" --dim 40
step sparse_d48 100 "${FLOOR[@]}" --dim 48
step dense_d40 80 "${FLOOR[@]}" --dim 40 --rows 12000000 --unique 10000000
step sparse_d32 100 "${FLOOR[@]}" --dim 32
ls -la $OUT
