"""The one-launch lane updates of the committed tbe_device_times runs, grouped by how much of their price the bytes
term makes (``update_launch_seconds``'s bytes at the fitted copy fraction over the whole price), at each device's
committed calibration, as ``lane_model_check`` prices them; then the fp32-row cases both devices ran (seeds 27-28):
measured H100 / H200. CPU only, nothing measured:

    PYTHONPATH=.:benchmarks python3 benchmarks/results/h100_update_floor_2026-12-07/bytes_share.py
"""

import glob
import json
import statistics
from pathlib import Path

import lane_model_check as lmc
from merge_model_fit import one_launch_updates
from sort_model_fit import RESULTS, mean_log, rms_log

from polyrec.hardware.catalog import get_device
from polyrec.perfmodel import tbe

H100 = [*lmc.DEFAULT_RUNS, *sorted(Path(p) for p in glob.glob(
    str(RESULTS / "h100_seeds[345]*_2026-12-07" / "tbe_device_times_seed*_nvidia*.json")))]
H200 = sorted(Path(p) for p in glob.glob(str(RESULTS / "tbe_model_check_2026-12-02" / "tbe_device_times*.json")))
BOTH = {"H100": RESULTS / "h100_backward_2026-12-06" / "tbe_device_times_nvidia-h100-80gb-hbm3_2026-12-06.json",
        "H200": RESULTS / "tbe_model_check_2026-12-02" / "tbe_device_times_seeds27_28_nvidia-h200_2026-12-02.json"}


def lanes(paths):
    """(case key, rows dtype, bytes share of the price, priced s, measured s) of each one-launch lane update."""
    out = []
    for path in paths:
        for device, row, case, shape, kw in one_launch_updates(path, lmc.one_lane_launch):
            spec, ceil = get_device(device), lmc.device_ceilings(device)
            moved = tbe.update_bytes(shape.variant, nnz=kw["nnz"], unique=kw["unique"], row_bytes=kw["row_bytes"],
                                     grad_row_bytes=kw["grad_row_bytes"], gran=tbe.GATHER_GRANULARITY[spec.vendor],
                                     state_bytes_per_row=kw["state_bytes_per_row"])
            fraction = tbe.update_copy_fraction(shape, kw["state_bytes_per_row"], spec.warp_size)
            priced = lmc.lane_price_s(shape, device, kw, case["optimizer"])
            share = moved / (fraction * ceil.copy_bandwidth.value) / priced
            out.append(((row["seed"], row["case"]), case["dtype"], share, priced,
                        lmc.kernels_ms(row["kernels"], lmc.LANE_KERNELS) / 1e3))
    return out


def main() -> None:
    for name, paths in (("H100", H100), ("H200", H200)):
        by = {}
        for _, dtype, share, priced, measured in lanes(paths):
            band = "bytes >= 0.7" if share >= 0.7 else "bytes 0.4-0.7" if share >= 0.4 else "bytes < 0.4"
            by.setdefault(f"{band} {dtype}", []).append((priced, measured))
        for key, pairs in sorted(by.items()):
            print(f"{name} {key:>18}: {len(pairs):3d} lanes, mean log error {mean_log(pairs):+.3f}, "
                  f"rms {rms_log(pairs):.3f}")
    runs = {name: {key: (dtype, measured) for key, dtype, _, _, measured in lanes([path])}
            for name, path in BOTH.items()}
    ratios = sorted(runs["H100"][k][1] / runs["H200"][k][1] for k in runs["H100"].keys() & runs["H200"].keys()
                    if runs["H100"][k][0] == "fp32")
    print(f"fp32-row lanes of seeds 27-28 on both: {len(ratios)}, measured H100 / H200 "
          f"{' '.join(f'{r:.2f}' for r in ratios)}")
    lookups = {name: {(r["seed"], r["case"]): lmc.kernels_ms(r["kernels"], ("pooled_forward_kernel",))
                      for r in json.loads(path.read_text())["results"]["rows"]} for name, path in BOTH.items()}
    ratios = sorted(lookups["H100"][k] / lookups["H200"][k] for k in lookups["H100"].keys() & lookups["H200"].keys()
                    if lookups["H200"][k] > 0)
    print(f"pooled-lookup kernels of seeds 27-28 on both: {len(ratios)}, measured H100 / H200, median "
          f"{statistics.median(ratios):.2f}: {' '.join(f'{r:.2f}' for r in ratios)}")


if __name__ == "__main__":
    main()
