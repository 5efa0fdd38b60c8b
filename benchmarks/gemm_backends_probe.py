"""In-situ A/B of how the dense GEMMs choose their backend, in the full-size ``mlperf-dcnv2`` training
step (batch 65536, one GPU): interleaved rounds of backend policies in one process, 20 timed steps
each, the first round's kernels by the torch profiler, and the selector's choice for every GEMM call.

Policies (wrapping ``polyrec.kernels.gemm.select_gemm``): ``selector`` (as shipped), ``library``
(every GEMM through the vendor library, its epilogue in one pass), ``no-classic`` (the classic Triton
picks moved to the library, TMA picks kept), ``no-in-place`` (the selector as before it priced the
library's in-place residual add: ``library_adds_residual`` forced off), ``no-lt-epilogue`` (the library
applies no bias / ReLU epilogue of its own: ``gemm_library.LIBRARY_EPILOGUES`` = {"none"}, as before
the seventeenth session's second change; the selector's cache is cleared at each switch).

    PYTHONPATH=. python3 benchmarks/gemm_backends_probe.py [--policies selector,no-in-place,library]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import polyrec.kernels.gemm as gemm  # noqa: E402
from polyrec.kernels import gemm_select  # noqa: E402
from polyrec.perfmodel import gemm_library  # noqa: E402
from polyrec.results import write_results  # noqa: E402
from profiling import kernel_table, mlperf_trainer, step_ms  # noqa: E402

POLICIES = ("selector", "library", "no-classic", "no-in-place", "no-lt-epilogue")
LIBRARY_EPILOGUES = gemm_library.LIBRARY_EPILOGUES


class Policy:
    """A wrapper of ``select_gemm`` that applies the current policy and records every choice."""

    def __init__(self, select) -> None:
        self.select, self.name, self.seen = select, "selector", {}

    def use(self, name: str) -> None:
        """Switch to policy ``name`` (the library's own epilogues as it says; selections made afresh)."""
        self.name = name
        gemm_library.LIBRARY_EPILOGUES = frozenset({"none"}) if name == "no-lt-epilogue" else LIBRARY_EPILOGUES
        gemm_select.clear_cache()

    def __call__(self, m, n, k, dtype, spec, **kw):
        if self.name == "no-in-place":
            kw["library_adds_residual"] = False
        choice = self.select(m, n, k, dtype, spec, **kw)
        key = (self.name, m, n, k, kw.get("epilogue", "none"), kw.get("library_adds_residual", False))
        self.seen.setdefault(key, {"policy": self.name, "m": m, "n": n, "k": k, "epilogue": key[4],
                                   "library_adds_residual": key[5],
                                   "kernel": choice.kernel, "config": choice.config.label,
                                   "triton_ms": choice.triton_seconds * 1e3, "library_ms": choice.library_seconds * 1e3})
        if self.name == "library" or (self.name == "no-classic" and choice.kernel == "triton"):
            return dataclasses.replace(choice, backend="library")
        return choice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="selector,no-lt-epilogue,library")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    policies = args.policies.split(",")
    if not set(policies) <= set(POLICIES) or len(policies) < 2:
        parser.error(f"--policies: two or more of {POLICIES}")
    policy = Policy(gemm.select_gemm)
    gemm.select_gemm = policy
    trainer = mlperf_trainer()
    for _ in range(5):
        trainer.train_step()
    trainer.sync()
    rows = []
    for r in range(args.rounds):
        for name in policies:
            policy.use(name)
            row = {"round": r, "policy": name, "ms_per_step": step_ms(trainer)}
            if r == 0:
                kernels = kernel_table(trainer.train_step, reps=2, warmup=1)
                row |= {"kernel_ms": sum(x["ms_per_step"] for x in kernels), "kernels": kernels[:30]}
            rows.append(row)
            print({k: v for k, v in row.items() if k != "kernels"}, flush=True)
    median = {p: sorted(r["ms_per_step"] for r in rows if r["policy"] == p)[args.rounds // 2] for p in policies}
    summary = {f"median_ms_{p}": v for p, v in median.items()}
    write_results("gemm_backends_probe", {"policies": policies, "rounds": rows, "choices": list(policy.seen.values())},
                  rows=[{k: v for k, v in r.items() if k != "kernels"} for r in rows], summary=summary)
    print(summary)


if __name__ == "__main__":
    main()
