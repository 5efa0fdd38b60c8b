"""Compact ``ncu --page details --csv`` of run7.sh's report to step_kernels.csv: one row per profiled kernel."""
import csv, collections, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = collections.OrderedDict()
for r in rows:
    by.setdefault((int(r["ID"]), r["Kernel Name"]), {})[r["Metric Name"]] = (r["Metric Value"], r["Metric Unit"])
keep = ["Duration", "DRAM Throughput", "Memory Throughput", "Compute (SM) Throughput", "Achieved Occupancy",
        "Theoretical Occupancy"]
with open("step_kernels.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["id", "kernel", "duration_us", "dram_pct", "memory_pct", "sm_pct", "achieved_occupancy_pct",
                "theoretical_occupancy_pct"])
    for (i, name), m in by.items():
        v, u = m["Duration"]
        us = float(v.replace(",", "")) * {"us": 1, "ms": 1000, "ns": 0.001}[u]
        w.writerow([i, name[:150], f"{us:.2f}"] + [m.get(k, ("", ""))[0] for k in keep[1:]])
