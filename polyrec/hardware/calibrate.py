"""Calibration: measure the ceilings of the present GPU and prefer them over datasheet numbers.

``polyrec hw calibrate`` measures, in well under 60 s: device-to-device copy bandwidth (bytes read
plus written), L2 read bandwidth (a Triton probe re-reading half of L2), the rate of a large
matmul per dtype on random data, and back-to-back kernel launch latency. The numbers go to
``<cache>/polyrec/calibration/<device>.json`` (``$POLYREC_CACHE_DIR``, else ``$XDG_CACHE_HOME``, else
``~/.cache``). ``ceilings(spec)`` returns them where present, else the datasheet's, and every value
says which it is.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from polyrec.files import atomic_write_text
from polyrec.hardware.types import MATMUL_DTYPES, Ceiling, Ceilings, DeviceSpec

#: Launch latency assumed when none was measured: seconds between back-to-back launches of an empty
#: kernel. ~4-6 us is typical of CUDA and HIP (e.g. arXiv 2306.00478 measured launch overheads of a
#: few microseconds on A100 and MI250X); the calibration replaces it.
DEFAULT_LAUNCH_LATENCY_S = 5e-6
#: L2 bandwidth assumed when none was measured, as a multiple of HBM bandwidth. Hopper's L2 is about
#: 2.5x its HBM (Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of Bandwidth", 2023); the
#: calibration replaces it.
DEFAULT_L2_OVER_HBM = 2.5
#: Matmul size for the rate measurement: large enough to fill every SM/CU of any catalog device.
MATMUL_SIZE = 8192
#: Copy size for HBM bandwidth: 2 GiB per buffer, many times any L2 / Infinity Cache (256 MB).
COPY_BYTES = 2 << 30
#: Steady-state timing of the copy (``steady_ms``): seconds of back-to-back calls first, blocks timed, calls
#: per block. Each call timed alone after a synchronisation (``median_ms``, 3 warm-up calls, 10 timed) put
#: an H200's copy at 4.08-4.20 TB/s with up to a 3.8% spread between repeats in one process; back to back
#: 4.24-4.28 TB/s within 0.2-0.5% (benchmarks/results/calibrate_spread_2026-12-01, three machines), as the
#: benchmarks' own copies run (tbe.py 4.27, gather_rate 4.25-4.27 TB/s); three ``hw calibrate`` runs on
#: one H200 since: 4.250 / 4.251 / 4.252 TB/s.
STEADY_WARM_S, STEADY_BLOCKS, STEADY_CALLS = 0.25, 5, 10
#: L2 probe shape: programs per SM/CU (enough to hide latency) and passes over the buffer (so one
#: launch runs ~1 ms, far above the launch gap).
L2_PROBE_WAVES = 4
L2_PROBE_REPS = 256
_TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}
#: On ROCm, torch takes ``allow_tf32`` for hipBLASLt's XF32 only where this variable is "1" (read at each
#: GEMM: pytorch/pytorch pull request 139869, "[AMD] Turn on TF32 for aten::mm"); without it a "tf32" rate
#: would be the fp32 one.
HIPBLASLT_TF32_VARIABLE = "HIPBLASLT_ALLOW_TF32"


def cache_dir() -> Path:
    # os.path rather than Path.home(): the selectors read the ceilings thousands of times per plan
    base = (os.environ.get("POLYREC_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
            or os.path.join(os.path.expanduser("~"), ".cache"))
    return Path(base, "polyrec", "calibration")


def calibration_path(device: str) -> Path:
    return cache_dir() / f"{device.lower()}.json"


def load_calibration(device: str) -> dict[str, Any] | None:
    """The stored calibration of a device, or None; a file that is not a JSON object is an error naming it."""
    path = calibration_path(device)
    if not path.exists():
        return None
    try:
        measured = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"calibration file {path} is not valid JSON ({err}); run `polyrec hw calibrate` "
                         "again or delete it") from err
    if not isinstance(measured, dict):
        raise ValueError(f"calibration file {path} must hold a JSON object, got {type(measured).__name__}; "
                         "run `polyrec hw calibrate` again or delete it")
    return measured


def save_calibration(device: str, measured: dict[str, Any]) -> Path:
    """Store a calibration atomically (``polyrec.files``)."""
    path = calibration_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(measured, indent=1))
    return path


def finite_number(value: Any) -> bool:
    """Whether a value read from a calibration file is a finite int or float (not a bool, NaN or infinity)."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


#: Measured over datasheet ceilings a calibration file may hold: a device measures at most its datasheet
#: peak (an H200 measured 0.78x bf16, 0.88x copy: benchmarks/results/calibrate_nvidia-h200_2026-11-29.json),
#: and a thousandth of it is a broken measurement or file; values outside overflowed the models (1e300
#: FLOP/s) or priced every kernel at infinity (1e-300).
PLAUSIBLE_OVER_DATASHEET = (1e-3, 2.0)
#: Measured over estimated ceilings (L2 bandwidth, launch latency: no datasheet gives them) a calibration file may
#: hold. An estimate is no bound: an H200 measured 0.64-0.71x the L2 estimate and 1.2-2.3x the launch latency one
#: (benchmarks/results/*/calibration_h200*.json); a thousand times off either way is a broken file, and values
#: beyond priced every kernel at infinity (an L2 of 1e-300 B/s: the GEMM selector found no config) or a step of
#: 1e304 ms (a launch latency of 1e300 s).
PLAUSIBLE_OVER_ESTIMATE = (1e-3, 1e3)


def ceilings(spec: DeviceSpec, measured: dict[str, Any] | None = None) -> Ceilings:
    """The ceilings of a device: calibrated where measured, else datasheet, else a stated estimate.

    ``measured`` defaults to the stored calibration of ``spec.name``.
    """
    measured = load_calibration(spec.name) if measured is None else measured
    cal = f"calibrated {measured.get('date', '?')}" if measured else ""

    def pick(key: str, fallback: float, origin: str) -> Ceiling:
        value = measured.get(key) if measured else None
        if value is None:
            return Ceiling(value=fallback, origin=origin)
        if not (finite_number(value) and value > 0):
            raise ValueError(f"calibration of {spec.name}: '{key}' must be a finite positive number, got {value!r}")
        low, high = PLAUSIBLE_OVER_DATASHEET if origin == "datasheet" else PLAUSIBLE_OVER_ESTIMATE
        if fallback > 0 and not low <= value / fallback <= high:
            what = "datasheet's" if origin == "datasheet" else "estimate's"
            raise ValueError(f"calibration of {spec.name}: '{key}' {value:.4g} is {value / fallback:.3g}x the "
                             f"{what} {fallback:.4g}, not a measurement of this device; run `polyrec hw "
                             "calibrate` again or delete the file")
        return Ceiling(value=float(value), origin=cal)

    matmul = {}
    for dtype in MATMUL_DTYPES:
        matmul[dtype] = pick(f"matmul_{dtype}", spec.peak_flops[dtype], "datasheet")
    return Ceilings(
        device=spec.name,
        copy_bandwidth=pick("copy_bandwidth", spec.hbm_bandwidth, "datasheet"),
        l2_bandwidth=pick("l2_bandwidth", DEFAULT_L2_OVER_HBM * spec.hbm_bandwidth,
                          f"estimate: {DEFAULT_L2_OVER_HBM}x HBM bandwidth"),
        matmul_flops=matmul,
        launch_latency=pick("launch_latency", DEFAULT_LAUNCH_LATENCY_S,
                            f"estimate: {DEFAULT_LAUNCH_LATENCY_S * 1e6:.0f} us"),
    )


#: What H200s and an H100 measured against their datasheet peaks: H200 (4.8 TB/s HBM, 989 TFLOP/s bf16) copy
#: 4.11-4.28 TB/s and bf16 matmul 730-802 TFLOP/s over the nineteen H200 calibrations committed by 2026-12-04
#: (benchmarks/results/*/calibration_h200*.json and calibrate_spread_2026-12-01/hw_calibrate_run*_h200.json);
#: H100 (3.35 TB/s, 989 TFLOP/s) copy 3.03 TB/s and bf16 786 TFLOP/s, one calibration
#: (benchmarks/results/planner_accuracy_h100_2026-12-06/calibration_h100.json). Said where a plan uses
#: datasheet peaks.
MEASURED_BELOW_DATASHEET = ("an H200 measured copy 4.11-4.28 of 4.8 TB/s and bf16 matmul 730-802 of 989 TFLOP/s, "
                            "an H100 3.03 of 3.35 TB/s and 786 of 989 TFLOP/s")


def datasheet_note(by_device: dict[str, Ceilings], dtype: str) -> str | None:
    """A plan's note where a device's copy bandwidth or ``dtype`` matmul rate is its datasheet peak (no stored
    calibration): the predicted step is then faster than the device will run it. None where all are measured."""
    kinds = sorted(name for name, ceil in by_device.items()
                   if "datasheet" in (ceil.copy_bandwidth.origin,
                                      ceil.matmul_flops.get(dtype, ceil.matmul_flops["bf16"]).origin))
    if not kinds:
        return None
    return (f"{', '.join(kinds)}: datasheet peaks, not measured ({MEASURED_BELOW_DATASHEET}), so the step will run "
            "slower than predicted; `polyrec hw calibrate` on the device measures them")


def timed_ms(fn, *, warmup: int = 3, reps: int = 10, before=None) -> list[float]:
    """Milliseconds of each of ``reps`` calls of ``fn`` timed with CUDA events, after warmup; ``before``
    (untimed) runs ahead of each timed call (a barrier, so every rank starts a collective together)."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def median_ms(fn, *, warmup: int = 3, reps: int = 10, before=None) -> float:
    """Median of ``timed_ms``."""
    times = sorted(timed_ms(fn, warmup=warmup, reps=reps, before=before))
    return times[len(times) // 2]


def steady_ms(fn) -> float:
    """ms per call of ``fn`` with the device kept busy: calls for STEADY_WARM_S (each waited for), then the
    median over STEADY_BLOCKS blocks of STEADY_CALLS back-to-back calls timed between two events."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    while time.perf_counter() - start < STEADY_WARM_S:
        fn()
        torch.cuda.synchronize()
    blocks = []
    for _ in range(STEADY_BLOCKS):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(STEADY_CALLS):
            fn()
        end.record()
        end.synchronize()
        blocks.append(begin.elapsed_time(end) / STEADY_CALLS)
    return sorted(blocks)[len(blocks) // 2]


def measure_copy_bandwidth(nbytes: int, timing=steady_ms) -> float:
    """bytes/s of a device-to-device copy of ``nbytes``, counting bytes read plus written, timed by
    ``timing`` (ms per call of a function; the steady state by default, see STEADY_WARM_S)."""
    import torch

    src = torch.rand(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    return 2 * nbytes / (timing(lambda: dst.copy_(src)) * 1e-3)


def measure_l2_bandwidth(spec: DeviceSpec) -> float:
    """bytes/s read from L2: one launch re-reads a buffer of half the L2 many times (L1 bypassed)."""
    import torch

    from polyrec.hardware.probes import l2_read

    programs = L2_PROBE_WAVES * spec.compute_units
    block = 1024
    chunk = max(block, (spec.l2_bytes // 2 // 4 // programs) // block * block)  # fp32 elements
    x = torch.rand(programs * chunk, device="cuda")
    reps = L2_PROBE_REPS
    ms = median_ms(lambda: l2_read(x, programs, reps, block))
    return 4 * x.numel() * reps / (ms * 1e-3)


def measure_matmul(dtype: str, size: int = MATMUL_SIZE, timing=median_ms) -> float:
    """FLOP/s of a ``size``^3 matmul on random data through torch (cuBLAS / hipBLASLt), timed by ``timing``
    (each call alone by default: the rate the GEMM models' factors were fitted on)."""
    import torch

    if dtype == "fp8":
        return _measure_fp8_matmul(size, timing)
    torch_dtype = getattr(torch, _TORCH_DTYPES[dtype])
    a = torch.randn(size, size, device="cuda", dtype=torch_dtype)
    b = torch.randn(size, size, device="cuda", dtype=torch_dtype)
    with tf32_matmuls(dtype == "tf32"):
        ms = timing(lambda: a @ b)
    return 2 * size**3 / (ms * 1e-3)


@contextlib.contextmanager
def tf32_matmuls(allowed: bool):
    """fp32 matmuls through torch with TF32 / XF32 allowed or not, both put back after: torch's flag and, on
    ROCm, ``HIPBLASLT_TF32_VARIABLE``."""
    import torch

    previous_flag = torch.backends.cuda.matmul.allow_tf32
    previous_variable = os.environ.get(HIPBLASLT_TF32_VARIABLE)
    torch.backends.cuda.matmul.allow_tf32 = allowed
    if torch.version.hip is not None:
        os.environ[HIPBLASLT_TF32_VARIABLE] = "1" if allowed else "0"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_flag
        if previous_variable is None:
            os.environ.pop(HIPBLASLT_TF32_VARIABLE, None)
        else:
            os.environ[HIPBLASLT_TF32_VARIABLE] = previous_variable


def _measure_fp8_matmul(size: int, timing) -> float:
    """FLOP/s of a ``size``^3 fp8 matmul: the device's e4m3 operands (fnuz on gfx942), unit scales, a bf16
    output, fast accumulation (``polyrec.kernels.fp8.scaled_mm``, as the fp8 forward GEMMs call it)."""
    import torch

    from polyrec.kernels.fp8 import FORWARD, formats, scaled_mm

    fmt = formats(torch.device("cuda"))[FORWARD]
    a = torch.randn(size, size, device="cuda").to(fmt.dtype)
    b = torch.randn(size, size, device="cuda").to(fmt.dtype).t()  # column-major, as scaled_mm needs
    one = torch.ones((), device="cuda")
    ms = timing(lambda: scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, fast_accumulation=True))
    return 2 * size**3 / (ms * 1e-3)


def measure_launch_latency(launches: int = 2000) -> float:
    """Seconds per launch of a tiny kernel, back to back (includes the launch gap)."""
    import torch

    x = torch.zeros(1, device="cuda")

    def run() -> None:
        for _ in range(launches):
            x.add_(1.0)

    ms = median_ms(run, warmup=1, reps=5)
    return ms * 1e-3 / launches


def _matmul_steps(spec: DeviceSpec) -> list[tuple[str, Any]]:
    """The matmul rates to time: each dtype the datasheet gives a peak (fp8 before Hopper / CDNA3 has none:
    not timed), or, for a GPU the catalog lacks (every peak unknown, 0), each dtype the GPU can run."""
    if any(spec.peak_flops[d] > 0 for d in MATMUL_DTYPES):
        return [(f"matmul_{d}", lambda d=d: measure_matmul(d)) for d in MATMUL_DTYPES if spec.peak_flops[d] > 0]
    return [(f"matmul_{d}", lambda d=d: _rate_if_supported(d)) for d in MATMUL_DTYPES]


def _rate_if_supported(dtype: str) -> float | None:
    """``measure_matmul(dtype)``, or None (not measured: the datasheet's 0 stays) where the GPU cannot run
    ``dtype`` (torch or the fp8 formats refuse it); running out of memory is an error still."""
    import torch

    try:
        return measure_matmul(dtype)
    except torch.OutOfMemoryError:
        raise
    except (RuntimeError, ValueError):
        return None


def calibration_steps(spec: DeviceSpec) -> list[tuple[str, Any]]:
    """(key, measurement) of each ceiling ``calibrate`` measures on ``spec``'s GPU, in order."""
    return [("copy_bandwidth", lambda: measure_copy_bandwidth(COPY_BYTES)),
            ("l2_bandwidth", lambda: measure_l2_bandwidth(spec)),
            *_matmul_steps(spec),
            ("launch_latency", measure_launch_latency)]


def calibrate(spec: DeviceSpec, *, progress=None) -> dict[str, Any]:
    """Measure the present GPU's ceilings; ``progress(step_name)`` is called before each step."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("hw calibrate needs a CUDA or ROCm GPU; none is visible to torch")
    measured: dict[str, Any] = {"device": spec.name, "gpu": torch.cuda.get_device_name(0),
                                "date": dt.date.today().isoformat()}
    for key, step in calibration_steps(spec):
        if progress is not None:
            progress(key)
        measured[key] = step()
        torch.cuda.empty_cache()
    return measured
