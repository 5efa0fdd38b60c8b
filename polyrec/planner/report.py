"""Fleet what-if: the same model on each accelerator, as rows, a matplotlib PNG and an HTML page.

For each device kind: the fewest GPUs on which the model fits (``fitting.smallest_fleet``), the best
plan there, and its predicted samples/s in total, per GPU and per watt (board power from the
catalog's datasheet TDP). Every row says where its ceilings came from (datasheet or calibration); a kind
that fits no fleet has no numbers, only the reason.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path

from polyrec.hardware.catalog import get_device
from polyrec.planner.fitting import smallest_fleet
from polyrec.planner.no_fit import no_fleet_reason
from polyrec.planner.propose import make_plan
from polyrec.planner.types import ModelSpec, Plan, PlanConstraints, first_repeat


@dataclass(kw_only=True, slots=True)
class WhatIfRow:
    """One device kind. Where it fits no fleet (``fleet`` None) every number is None (``-`` in the table,
    ``null`` in JSON, no bar in the chart: never a 0 to read as a result) and ``notes`` says why."""

    device: str
    fleet: str | None  # smallest fleet that fits; None when none up to the largest tried
    gpus: int | None
    samples_per_s: float | None
    samples_per_s_per_gpu: float | None
    samples_per_s_per_watt: float | None
    step_ms: float | None
    peak_gb_per_gpu: float | None  # predicted allocator peak of the busiest GPU
    batch_per_gpu: int | None
    notes: str  # the plan's notes; where no fleet fits, why (``no_fit.no_fleet_reason``)
    origin: str | None  # where the rates came from (copy bandwidth, matmul); None where no fleet fits

    @property
    def fits(self) -> bool:
        """Whether a fleet of this kind fits the model (``"fits"`` in ``polyrec plan --compare --json``)."""
        return self.fleet is not None


def what_if(model: ModelSpec, devices: list[str], constraints: PlanConstraints | None = None, *,
            host_memory_bytes: int | None = None) -> list[WhatIfRow]:
    """One row per device kind (names as in the catalog), on hosts of ``host_memory_bytes`` each
    (``Fleet.host_memory_bytes``; None: not known)."""
    c = constraints or PlanConstraints()
    twice = first_repeat([get_device(name).name for name in devices])
    if twice is not None:
        raise ValueError(f"what-if: {twice} is listed twice")
    rows = []
    for name in devices:
        spec = get_device(name)
        fleet = smallest_fleet(model, spec.name, c, host_memory_bytes=host_memory_bytes)
        if fleet is None:
            reason = no_fleet_reason(model, spec.name, c, host_memory_bytes=host_memory_bytes)
            rows.append(WhatIfRow(device=spec.name, fleet=None, gpus=None, samples_per_s=None,
                                  samples_per_s_per_gpu=None, samples_per_s_per_watt=None, step_ms=None,
                                  peak_gb_per_gpu=None, batch_per_gpu=None, notes=reason, origin=None))
            continue
        plan = make_plan(model, fleet, c)
        rows.append(_row(spec.name, plan, spec.tdp_watts))
    return rows


def _row(device: str, plan: Plan, tdp_watts: float) -> WhatIfRow:
    gpus = plan.fleet.world_size
    per_gpu = plan.samples_per_s / gpus
    o = plan.origins
    origin = (f"copy {o.get(f'{device}.copy_bandwidth', '?')}; matmul {o.get(f'{device}.matmul_{plan.dense_dtype}', '?')}; "
              "HBM, TDP datasheet")
    return WhatIfRow(device=device, fleet=plan.fleet.text, gpus=gpus, samples_per_s=plan.samples_per_s,
                     samples_per_s_per_gpu=per_gpu, samples_per_s_per_watt=per_gpu / tdp_watts,
                     step_ms=plan.step.total_ms, peak_gb_per_gpu=max(m.used for m in plan.memory) / 1e9,
                     batch_per_gpu=plan.batch_per_gpu, notes="; ".join(plan.notes), origin=origin)


#: What a chart shows in place of a bar for a device kind that fits no fleet.
NO_FLEET_LABEL = "fits no\nfleet"


def chart_bars(rows: list[WhatIfRow]) -> list[tuple[str, list[float], list[str]]]:
    """The three panels of ``render_png``: (title, bar heights, bar labels). A kind that fits no fleet gets no
    bar (height 0) and ``NO_FLEET_LABEL``, not a number."""
    panels = [("GPUs needed", [r.gpus for r in rows], "{:.0f}", 1),
              ("samples/s per GPU (M)", [r.samples_per_s_per_gpu for r in rows], "{:.2f}", 1e6),
              ("samples/s per watt (k)", [r.samples_per_s_per_watt for r in rows], "{:.2f}", 1e3)]
    return [(title, [0.0 if v is None else v / unit for v in values],
             [NO_FLEET_LABEL if v is None else fmt.format(v / unit) for v in values])
            for title, values, fmt, unit in panels]


def render_png(rows: list[WhatIfRow], path: Path, *, title: str) -> Path:
    """Three bar charts side by side: GPUs needed, samples/s per GPU, samples/s per watt (``chart_bars``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.device for r in rows]
    colors = ["#76b900" if get_device(n).vendor == "nvidia" else "#ed1c24" for n in names]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    for ax, (label, heights, labels) in zip(axes, chart_bars(rows)):
        bars = ax.bar(names, heights, color=colors)
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=30)
        for bar, text in zip(bars, labels):
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=8, color="gray" if text == NO_FLEET_LABEL else "black")
        ax.margins(y=0.15)
        ax.set_ylim(bottom=0)  # no negative axis where every kind fits no fleet (all heights 0)
    axes[0].yaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(title)
    fig.text(0.5, 0.01, "predicted by polyrec plan (green: NVIDIA, red: AMD); rates from datasheet unless calibrated",
             ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


COLUMNS = (("device", "device"), ("fleet", "smallest fleet"), ("gpus", "GPUs"), ("samples_per_s", "samples/s"),
           ("samples_per_s_per_gpu", "samples/s per GPU"), ("samples_per_s_per_watt", "samples/s per W"),
           ("step_ms", "step ms"), ("peak_gb_per_gpu", "peak GB/GPU"), ("batch_per_gpu", "batch/GPU"),
           ("notes", "plan notes"), ("origin", "numbers from"))


def format_cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return "-" if value is None else str(value)


def render_html(rows: list[WhatIfRow], png: Path, path: Path, *, title: str) -> Path:
    """A self-contained page: the table and the PNG embedded."""
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(format_cell(getattr(r, key)))}</td>" for key, _ in COLUMNS)
                   + "</tr>" for r in rows)
    image = base64.b64encode(png.read_bytes()).decode()
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><table><tr>{head}</tr>{body}</table>"
            f"<p><img alt='what-if chart' src='data:image/png;base64,{image}'></p>"
            "<p>Predicted by <code>polyrec plan --compare</code>: per-op times from polyrec's GEMM and TBE cost "
            "models, collectives from an alpha-beta model of the links. Per watt uses the datasheet board power.</p>"
            "</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def write_report(rows: list[WhatIfRow], out_dir: Path, *, title: str, stem: str = "whatif") -> tuple[Path, Path]:
    """Write ``<stem>.png`` and ``<stem>.html`` under ``out_dir``; return both paths."""
    png = render_png(rows, out_dir / f"{stem}.png", title=title)
    return png, render_html(rows, png, out_dir / f"{stem}.html", title=title)
