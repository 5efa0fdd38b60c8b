set -u
export PYTHONPATH=$PWD:$PWD/benchmarks POLYREC_CACHE_DIR=/tmp/pc1 TRITON_CACHE_DIR=/tmp/tc1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"; $NCU --version | tail -1
mkdir -p $OUT/ncu
python3 .scratch/ncu_lane.py --steps 1 --dtype fp32 --grad bf16 >/dev/null 2>&1  # warm Triton's cache
SECS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis"
for cfg in "bf16 bf16" "fp32 fp32"; do
  set -- $cfg; tag=lane_${1}_grad${2}
  timeout 200 $NCU --clock-control none $SECS -k regex:lane_update_kernel -s 2 -c 1 -f -o $OUT/ncu/$tag \
     python3 .scratch/ncu_lane.py --dtype $1 --grad $2 > $OUT/ncu/$tag.log 2>&1
  echo "== $tag rc=$? $(tail -1 $OUT/ncu/$tag.log | cut -c1-200)"
  $NCU -i $OUT/ncu/$tag.ncu-rep --page details --csv > $OUT/ncu/$tag.details.csv 2>&1
  $NCU -i $OUT/ncu/$tag.ncu-rep --page raw --csv > $OUT/ncu/$tag.raw.csv 2>&1
  python3 - $OUT/ncu/$tag.details.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keep = ("Duration", "DRAM Throughput", "Memory Throughput", "L2 Hit Rate", "L1/TEX Hit Rate", "Achieved Occupancy",
        "Theoretical Occupancy", "Registers Per Thread", "Issue Slots Busy", "Eligible Warps Per Scheduler",
        "No Eligible", "Active Warps Per Scheduler", "Warp Cycles Per Issued Instruction", "Executed Ipc Active",
        "Mem Busy", "Max Bandwidth", "Block Limit Registers", "Grid Size", "Block Size", "Waves Per SM")
for r in rows:
    if r.get("Metric Name") in keep:
        print(f"  {r['Section Name'][:22]:22} {r['Metric Name']:38} {r['Metric Value']:>14} {r['Metric Unit']}")
PY
  python3 - $OUT/ncu/$tag.raw.csv <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, units, vals = rows[0], rows[1], rows[2]
st = [(float(v.replace(",", "")), h) for h, v in zip(head, vals)
      if h.startswith("smsp__average_warp_latency_issue_stalled_") and h.endswith(".ratio") and v]
if not st:
    st = [(float(v.replace(",", "")), h) for h, v in zip(head, vals) if "issue_stalled" in h and v and h.endswith("ratio")]
for v, h in sorted(st, reverse=True)[:8]:
    print(f"  stall {h.split('stalled_')[-1]:50} {v:8.2f}")
for h, v in zip(head, vals):
    if h in ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum",
             "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_write.sum"):
        print(f"  {h:55} {v} {units[head.index(h)]}")
PY
done
ls -la $OUT/ncu
