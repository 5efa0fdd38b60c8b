"""What a table-batched embedding's lookups read (pure Python): ids over a table's rows, the rows they
touch, the reads L2 serves, and the bytes a random read costs.

* **Gather efficiency.** A row is fetched in whole DRAM access units (``granularity``): 32-byte
  sectors on NVIDIA (CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory":
  https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/#coalesced-access-to-global-memory),
  64-byte requests between L2 and memory on AMD CDNA3, whose L2 line is 128 B (ROCm Compute
  Profiler, "L2 cache (TCC)", L2-Fabric transactions:
  https://rocm.docs.amd.com/projects/rocprofiler-compute/en/latest/conceptual/l2-cache.html); and a
  random read costs at least RANDOM_READ_MIN_BYTES of copy rate, however small the row (measured).
  Measured since on an H100 (``gather_rate --floor``, benchmarks/results/gather_floor_2026-12-07/): random
  reads of 160 and 224 B rows ran at 0.88 / 0.93 of the copy rate counted in 64 B units, as their 192 and
  256 B neighbours (0.88 / 0.95), and at 0.73 / 0.81 counted in 32 B sectors, so random rows there arrive
  in 64 B units. The update prices its sorted rows at the 32 B the constants were fitted with (at 64 B
  its H100 module checks lose: that folder's README), and the pooled lookup at its tile's BLOCK_D
  elements (``tbe_lookup.forward_seconds``).
* **L2 reuse under skew.** Ids of a table follow a distribution over ranks (uniform, or the
  log-uniform skew of the benchmark: rank = floor((rows+1)^u) - 1, which is Zipf with exponent ~1).
  L2 is modelled as an ideal frequency cache shared by all tables: the hottest rows, over all tables,
  that fit stay resident; each resident row still misses once (compulsory miss).

It also holds what both kernel models (``tbe_lookup``, ``tbe``) take for occupancy: resident warps and
programs per compute unit, and the loaded DRAM latency of a round trip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polyrec.hardware.types import DeviceSpec

#: DRAM access granularity in bytes, per vendor (sources in the module docstring).
GATHER_GRANULARITY = {"nvidia": 32, "amd": 64}
#: Resident warps (waves) per SM / CU: 64 on Hopper (CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability"); CDNA3 holds 8 waves per SIMD x 4 SIMDs (estimate from the
#: CDNA3 ISA guide's wave slots).
MAX_WARPS_PER_CU = {"nvidia": 64, "amd": 32}
#: Resident programs (thread blocks / workgroups) per SM / CU: 32 on Hopper (CUDA guide, same table).
MAX_PROGRAMS_PER_CU = {"nvidia": 32, "amd": 32}
#: Exponent of the power law the trainer's synthetic ids follow (``polyrec.data.synthetic``'s
#: DEFAULT_ZIPF_ALPHA; tests/test_tbe_perfmodel.py checks they agree). Priced as alpha 1 (log-uniform)
#: until the fourteenth session, the MLPerf step's distinct rows came out 30% high: 3.61M for one GPU's
#: 65536 samples where 2.78M are counted (benchmarks/shard_ids.py), and 2.79M with this exponent.
ZIPF_ALPHA = 1.05
#: Id distributions over a table's rows, with the power-law exponent of the skewed ones: "log_uniform",
#: the TBE benchmark's rank = floor((rows+1)^u) - 1, and "zipf", the trainer's synthetic data.
SKEW_ALPHA = {"log_uniform": 1.0, "zipf": ZIPF_ALPHA}
SKEWS = ("uniform", *SKEW_ALPHA)
#: Loaded DRAM latency under a full gather load, seconds: about twice the idle latency (queueing at ~100%
#: of the memory bandwidth). Idle: ~0.5-0.6 us on H100 (Chips and Cheese, "Nvidia's H100: Funny L2, and Tons
#: of Bandwidth", 2023), ~0.7-0.8 us on MI300X (Chips and Cheese, "Testing AMD's Giant MI300X", 2024).
#: NVIDIA: fitted to the forward sweep of benchmarks/results/tbe_breakdown_nvidia-h200_2026-11-29.json
#: (tests/test_tbe_perfmodel.py checks it); AMD: estimate (not measured), the MI300X's idle latency scaled
#: as that fit scales the H100's.
LOADED_LATENCY_S = {"nvidia": 1.0e-6, "amd": 1.4e-6}
#: Least bytes of copy rate one random row read costs, however small the row: random reads of 16-64 B
#: rows ran at 39-40 G rows/s on the H200 whatever their size (a minimal Triton gather over 8 GiB,
#: copy rate 4.25 TB/s in the same run: 4.25e12 / 40e9 = 106 B; 128 B rows ran at 0.92 of the copy rate;
#: benchmarks/results/gather_rate_2026-12-01/). Not measured on AMD: the same bytes are assumed there.
RANDOM_READ_MIN_BYTES = 106


@dataclass(frozen=True, kw_only=True, slots=True)
class TableLoad:
    """One table's traffic in one step."""

    rows: int  # rows of the table
    row_bytes: int  # bytes of one row (dim * element size)
    accesses: float  # ids looked up in the table per step
    skew: str = "uniform"  # one of SKEWS


def gather_efficiency(row_bytes: int, granularity: int) -> float:
    """Useful fraction of the bytes fetched for one random row read.

    A row of ``r`` bytes starting at a multiple of ``gcd(r, granularity)`` touches on average
    ``(r + granularity - gcd) / granularity`` access units.
    """
    g = math.gcd(row_bytes, granularity)
    units = (row_bytes + granularity - g) / granularity
    return row_bytes / (units * granularity)


def rank_cdf(rank: float, rows: int, skew: str) -> float:
    """P(an id's row rank < ``rank``) in a table of ``rows`` rows. The skewed ids are rank =
    floor(x) - 1 with x drawn from a continuous power law x^-alpha on [1, rows + 1), as the TBE
    benchmark (alpha 1) and the trainer's synthetic data (``ZIPF_ALPHA``) draw them."""
    if rank >= rows:
        return 1.0
    if skew == "uniform":
        return rank / rows
    if skew not in SKEW_ALPHA:
        raise ValueError(f"unknown skew '{skew}'; valid: {', '.join(SKEWS)}")
    alpha, x, top = SKEW_ALPHA[skew], rank + 1.0, rows + 1.0
    if alpha == 1.0:
        return math.log(x) / math.log(top)
    return (1.0 - x ** (1.0 - alpha)) / (1.0 - top ** (1.0 - alpha))


def _rank_buckets(rows: int, skew: str, buckets: int = 48) -> list[tuple[float, float]]:
    """(rows in bucket, probability mass of bucket) over geometrically growing rank ranges."""
    if skew == "uniform":
        return [(float(rows), 1.0)]
    edges = sorted({0, *(int(round((rows) ** (i / buckets))) for i in range(buckets + 1))})
    return [(float(hi - lo), rank_cdf(hi, rows, skew) - rank_cdf(lo, rows, skew)) for lo, hi in zip(edges, edges[1:])]


def unique_rows(table: TableLoad) -> float:
    """Expected distinct rows touched in one step: sum over rows of 1 - exp(-accesses * p_row)."""
    total = 0.0
    for n, mass in _rank_buckets(table.rows, table.skew):
        total += n * -math.expm1(-table.accesses * mass / n)
    return total


def l2_hits(tables: list[TableLoad], l2_bytes: int) -> list[float]:
    """Expected L2-hit accesses per table, for an ideal frequency cache of ``l2_bytes``.

    The threshold access rate (per row) above which rows are resident is found by bisection so the
    resident rows fill the cache; hits are the accesses to resident rows minus one miss per
    resident row touched.
    """
    buckets = [[(n, t.accesses * m / n, t.row_bytes) for n, m in _rank_buckets(t.rows, t.skew)] for t in tables]

    def resident_bytes(rate: float) -> float:
        return sum(n * rb for bs in buckets for n, r, rb in bs if r >= rate)

    lo, hi = 0.0, max((r for bs in buckets for _, r, _ in bs), default=0.0) + 1.0
    if resident_bytes(lo) > l2_bytes:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if resident_bytes(mid) > l2_bytes else (lo, mid)
        threshold = hi
    else:
        threshold = lo
    hits = []
    for bs in buckets:
        h = sum(n * r - n * -math.expm1(-r) for n, r, _ in bs if r >= threshold)
        hits.append(max(h, 0.0))
    return hits


def hit_fraction(tables: list[TableLoad], spec: DeviceSpec) -> float:
    """Fraction of the row reads of ``tables`` that hit L2 (``l2_hits``, each table under its skew)."""
    total = sum(t.accesses for t in tables)
    return sum(l2_hits(tables, spec.l2_bytes)) / total if total > 0 else 0.0


def least_hit_fraction(table_rows: list[int], accesses: list[float], row_bytes: int, spec: DeviceSpec) -> float:
    """``hit_fraction`` when each feature's ids spread uniformly over its table (``table_rows[i]`` rows,
    ``accesses[i]`` ids): the least reuse any data can have, since a table smaller than its share of
    the L2 stays resident whatever the skew."""
    return hit_fraction([TableLoad(rows=r, row_bytes=row_bytes, accesses=a)
                         for r, a in zip(table_rows, accesses, strict=True)], spec)


def random_read_bytes(row_bytes: float) -> float:
    """Bytes of copy rate one random read of ``row_bytes`` costs (at least RANDOM_READ_MIN_BYTES)."""
    return max(row_bytes, RANDOM_READ_MIN_BYTES)
