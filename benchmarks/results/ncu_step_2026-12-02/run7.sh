set -u
export PYTHONPATH=$PWD TRITON_CACHE_DIR=/tmp/tc7 POLYREC_CACHE_DIR=/tmp/pc7
mkdir -p $OUT/ncu
python3 .carry/ncu_step.py 2 > /dev/null 2>&1   # warm Triton's cache
# kernels of one training step after 3 warm ones (the profiled launches are the 4th step's, by count)
timeout 250 ncu --clock-control none --section SpeedOfLight --section Occupancy -f -o $OUT/ncu/step \
   --launch-skip 350 --launch-count 110 python3 .carry/ncu_step.py 8 > $OUT/ncu/step.log 2>&1
echo "ncu rc=$?"; tail -3 $OUT/ncu/step.log
ncu -i $OUT/ncu/step.ncu-rep --page details --csv > $OUT/ncu/step.details.csv 2>&1
python3 - $OUT/ncu/step.details.csv <<'PY'
import csv, sys, collections
rows = list(csv.DictReader(open(sys.argv[1])))
by = collections.OrderedDict()
for r in rows:
    k = (r["ID"], r["Kernel Name"][:60])
    by.setdefault(k, {})[r["Metric Name"]] = r["Metric Value"] + ("" if r["Metric Unit"] in ("%", "") else " " + r["Metric Unit"])
print(f"{'id':>4} {'kernel':60} {'duration':>12} {'dram%':>6} {'mem%':>6} {'sm%':>6} {'occ%':>6}")
for (i, name), m in by.items():
    print(f"{i:>4} {name:60} {m.get('Duration', ''):>12} {m.get('DRAM Throughput', ''):>6} {m.get('Memory Throughput', ''):>6} {m.get('Compute (SM) Throughput', ''):>6} {m.get('Achieved Occupancy', ''):>6}")
PY
