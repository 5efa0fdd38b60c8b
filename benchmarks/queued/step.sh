# Sourced by the batches here: checks the checkout is the commit given, and defines `step NAME TIMEOUT COMMAND...`,
# which runs COMMAND with its results and log under $OUT/NAME/, prints its exit status and log tail, and tars $OUT into
# all.tgz (the device tool returns few files) so that a batch cut short keeps what ended.
set -u
C=${1:?usage: bash $0 COMMIT}
git rev-parse HEAD; [ "$(git rev-parse HEAD)" = "$C" ] || echo "WARNING: HEAD is not $C"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
export PYTHONPATH=.:benchmarks
step() {
  local name=$1 t=$2; shift 2; mkdir -p $OUT/$name
  POLYREC_RESULTS_DIR=$OUT/$name timeout $t "$@" > $OUT/$name/log.txt 2>&1; echo "$name rc=$? $(date +%T)"
  tail -3 $OUT/$name/log.txt | cut -c1-600; (cd $OUT && tar czf all.tgz */)
}
