"""What a decode run reports: per-step figures (the paper's Figure-11 breakdown, device cycles
and bandwidth, accuracy), a Chrome/Perfetto trace-event JSON of the run, and a PNG plot."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from nelssa.host.gpu.gpu_timer import GpuTime

if TYPE_CHECKING:
    from nelssa.emu.energy import EnergySplit
    from nelssa.emu.latency.hardware import EnergyHw, GpuHw
    from nelssa.host.pnm_node.client import AttendResult
    from nelssa.hw.model.ddr5_power import DDR5PowerSpec
    from nelssa.hw.model.ddr5_timing import DDR5Timing
    from nelssa.hw.model.device import DeviceConfig


@dataclass
class StepReport:
    """One decode step, emulated times in picoseconds."""

    short: int
    """Requests on the GPU tier."""
    long: int
    """Requests on the PNM tier."""
    step_ps: int = 0
    """The step: others + top-K + wait + recovery (exactly)."""
    others_ps: int = 0
    """GPU work: QKV, attention of short requests and long requests' windows, O-proj, MLP."""
    topk_ps: int = 0
    """GPU: scoring the centroids of long requests."""
    wait_ps: int = 0
    """GPU waiting for the node beyond its own work (node time not hidden)."""
    recovery_ps: int = 0
    """GPU recomputing KV the node lost with a device (prefills of the lost tokens)."""
    recovered: list[int] = field(default_factory=list)
    """Requests whose KV the node lost this step: recomputed, and on the GPU until it is back
    on the node."""
    transfer_ps: int = 0
    """Node requests: RoCE both ways (summed over requests; mostly overlapped)."""
    pnm_overhead_ps: int = 0
    """Node requests: host software, queueing behind other requests, CXL transfers."""
    pnm_attn_ps: int = 0
    """Node requests: device compute of the critical device."""
    gpu_attn_ps: int = 0
    """GPU: its attention (of ``others_ps``), what the node's replies overlap."""
    node_ps: int = 0
    """The node's replies, from their sending to the last one's arrival, summed over the
    layers (what the GPU's attention overlaps; beyond it, ``wait_ps``)."""
    node_requests: int = 0
    device_cycles: dict[int, int] = field(default_factory=dict)
    """Cycles each device computed this step."""
    kv_bytes: int = 0
    """KV bytes the devices read (the selected clusters)."""
    tokens: int = 0
    """Tokens generated this step."""
    errors: dict[int, float] = field(default_factory=dict)
    """Per long request: the largest relative error of its attention against dense attention
    over its whole context, over the layers (what top-K selection leaves out)."""
    migrating: list[int] = field(default_factory=list)
    """Requests whose KV was on its way to the node during this step."""
    engine_errors: dict[int, float] = field(default_factory=dict)
    """Per long request: the same against dense attention over exactly the tokens it attended
    to (the devices' arithmetic and the LSE merge)."""
    gpu_time: GpuTime = GpuTime.MODELLED
    """Whether the step's GPU operations took what the GPU measured (the kernel families of
    ``measured_ps``) or what the roofline model gives."""
    gpu_timer: str = "roofline"
    """The kernel timer that ran (gpu_timer.TIMERS)."""
    roofline_ps: dict[str, int] = field(default_factory=dict)
    """The roofline model's figure of each kernel family this step (gpu_timer.Family
    values), measured or not."""
    measured_ps: dict[str, int] = field(default_factory=dict)
    """What the GPU took for each kernel family this step (empty when modelled)."""

    @property
    def roofline_gpu_ps(self) -> int:
        """The step's GPU time (``others_ps + topk_ps``) as the roofline model gives it: the
        measured families at their roofline figures."""
        return (self.others_ps + self.topk_ps - sum(self.measured_ps.values())
                + sum(self.roofline_ps[f] for f in self.measured_ps))
    gpu_flops: float = 0.0
    """FLOPs of the GPU's operations this step (what its time and energy come from)."""
    hbm_bytes: float = 0.0
    """HBM bytes of the GPU's operations this step."""
    clusters: int = 0
    """Clusters the devices read (KV head x cluster)."""
    node_commands: int = 0
    """Device commands of the node requests (one per KV head and layer of a request)."""
    link_bytes: int = 0
    """Bytes of the node requests on the link, both ways (queries and cluster ids up,
    outputs down)."""
    energy: dict[str, float] = field(default_factory=dict)
    """The step's joules by component (``emu/energy.EnergySplit``; ``step_energy``)."""
    ddr5_counts: dict[int, list[int]] = field(default_factory=dict)
    """Per device, the DDR5 counters of its work for the node requests (driver/port.
    DDR5_COUNTERS, summed over its sub-channels), from devices that count their commands."""
    ddr5_uncounted: int = 0
    """Node replies with a device that does not count its DDR5 commands."""
    ddr5_idle_cycles: int = 0
    """Sub-channel cycles of the step the devices did not run (between the requests they
    served), priced as idle (``ddr5_energy.idle_row``) where the step's DDR5 is counted."""
    ddr5_counted: bool | None = None
    """The step's DDR5 energy: from counted commands (True) or the average per byte read and
    background (False); None: no energy reported."""

    @property
    def energy_j(self) -> float:
        return sum(self.energy.values())

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / (self.step_ps * 1e-12) if self.step_ps else 0.0

    @property
    def device_gbs(self) -> float:
        """Device read bandwidth over the busiest device's compute time (GB/s)."""
        busiest = max(self.device_cycles.values(), default=0) * 1.25e-9
        return self.kv_bytes / busiest / 1e9 if busiest else 0.0


@dataclass(frozen=True)
class Ddr5Meter:
    """A step's DDR5 energy from its counted commands, for a node of devices alike (the PNM
    entry's device: its DDR5 part, timing, sub-channels and clock)."""

    spec: DDR5PowerSpec
    timing: DDR5Timing
    subchannels: int
    clock_hz: int

    @classmethod
    def of(cls, config: DeviceConfig) -> Ddr5Meter:
        from nelssa.hw.model.ddr5_power import power_spec

        return cls(power_spec(config.preset), config.timing, config.subchannels,
                   config.clock_hz)

    def step_j(self, rep: StepReport, devices: int) -> float | None:
        """The step's DDR5 joules over its ``devices`` devices: their counted work and, for the
        rest of the step, each sub-channel idle (``ddr5_energy.idle_row``); sets
        ``rep.ddr5_idle_cycles``. None (the step keeps the average) where the step had no node
        reply or one from a device that does not count."""
        from nelssa.hw.model.ddr5_energy import energy_of_rows, idle_row

        if not rep.ddr5_counts or rep.ddr5_uncounted:
            return None
        wall = round(rep.step_ps * 1e-12 * self.clock_hz)
        idle = 0
        for d in range(devices):
            row = rep.ddr5_counts.get(d)
            ran = sum(row[6:]) // self.subchannels if row else 0  # residencies: every cycle run
            idle += max(0, wall - ran)
        rep.ddr5_idle_cycles = idle * self.subchannels
        pad = [n * self.subchannels for n in idle_row(self.timing, idle)]
        return energy_of_rows(self.spec, self.timing, [*rep.ddr5_counts.values(), pad])


def step_energy(rep: StepReport, gpu: GpuHw, e: EnergyHw, group: int, head_dim: int,
                devices: int, ddr5_counted_j: float | None = None) -> EnergySplit:
    """The step's energy (``emu/energy.py``): the GPU over the step, busy but while it waits
    for the node, with the step's FLOPs and HBM bytes, the cap applied to the step; the node
    (one host, ``devices`` devices) with the engines' operations on the KV they read and the
    node requests' bytes, counted once on RoCE and once on CXL (the host forwards queries and
    replies to and from its devices). ``ddr5_counted_j``: the step's DDR5 energy from counted
    commands, which replaces the average."""
    from nelssa.emu.energy import EngineOps, gpu_split, pnm_split

    wall = rep.step_ps * 1e-12
    busy = max(0, rep.step_ps - rep.wait_ps) * 1e-12
    ops = EngineOps.of(rep.kv_bytes / (4 * head_dim), rep.clusters, rep.node_commands, group,
                       head_dim, rep.kv_bytes)  # a KV head's token: K and V of head_dim bf16
    return (gpu_split(gpu, wall, busy, rep.gpu_flops, rep.hbm_bytes)
            + pnm_split(e, wall, ops, rep.kv_bytes, devices, 1, rep.link_bytes,
                        rep.link_bytes, ddr5_counted_j))


class TraceRecorder:
    """Chrome trace events ("X" complete events, microseconds) on named process/thread
    tracks; opens in Perfetto (ui.perfetto.dev) and chrome://tracing."""

    def __init__(self) -> None:
        self.events: list[dict[str, object]] = []
        self._pids: dict[str, int] = {}
        self._tids: dict[tuple[str, str], int] = {}

    def _ids(self, process: str, thread: str) -> tuple[int, int]:
        if process not in self._pids:
            pid = self._pids[process] = len(self._pids) + 1
            self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                "args": {"name": process}})
        pid = self._pids[process]
        if (process, thread) not in self._tids:
            tid = self._tids[(process, thread)] = len(self._tids) + 1
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                "args": {"name": thread}})
        return pid, self._tids[(process, thread)]

    def slice(self, process: str, thread: str, name: str, start_ps: int, dur_ps: int,
              args: dict[str, object] | None = None) -> None:
        pid, tid = self._ids(process, thread)
        event: dict[str, object] = {"ph": "X", "name": name, "pid": pid, "tid": tid,
                                    "ts": start_ps / 1e6, "dur": max(dur_ps, 0) / 1e6}
        if args:
            event["args"] = args
        self.events.append(event)

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"traceEvents": self.events,
                                          "displayTimeUnit": "ns"}))


class DecodeTracer:
    """The executor's work as trace slices, beside it: GPU operations, the node's replies
    (link both ways, each device's compute), background transfers."""

    def __init__(self, trace: TraceRecorder, device_ps: Callable[[int], int]) -> None:
        self.trace = trace
        self._device_ps = device_ps
        """A device's emulated picoseconds for a number of its cycles."""

    def gpu(self, name: str, start_ps: int, dur_ps: int, roofline_ps: int | None = None,
            operation: bool = True) -> None:
        """A GPU operation (``operation``; else the GPU waiting): measured (``roofline_ps``
        its roofline figure, in the slice's args) or modelled (None)."""
        args: dict[str, object] | None = (
            {"gpu_time": GpuTime.MODELLED.value} if operation else None)
        if roofline_ps is not None:
            args = {"gpu_time": GpuTime.MEASURED.value, "roofline_us": roofline_ps / 1e6}
        self.trace.slice("GPU node", "compute", name, start_ps, dur_ps, args)

    def node_reply(self, rid: int, layer: int, res: AttendResult) -> None:
        t = res.timing
        name = f"req {rid} L{layer}"
        self.trace.slice("link", "RoCE up", name, t.sent_ps, t.link_up_ps)
        self.trace.slice("link", "RoCE down", name, t.arrive_ps - t.link_down_ps, t.link_down_ps)
        for d, cycles in res.device_cycles.items():
            self.trace.slice("PNM node", f"device {d}", name, res.device_start_ps[d],
                             self._device_ps(cycles))

    def transfer(self, what: str, rid: int, start_ps: int, dur_ps: int) -> None:
        self.trace.slice("link", what, f"req {rid} KV", start_ps, dur_ps)


def plot_steps(reports: list[StepReport], path: str | Path, title: str) -> None:
    """Per-step stacked emulated time (others, top-K, wait for the node) and tokens/s; the
    steps with KV migrating shaded; the legend below the axes, off the bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = list(range(1, len(reports) + 1))
    us = 1e-6
    others = [r.others_ps * us for r in reports]
    topk = [r.topk_ps * us for r in reports]
    wait = [r.wait_ps * us for r in reports]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.bar(steps, others, label="GPU (QKV, attention, MLP)", color="#4c72b0")
    ax.bar(steps, topk, bottom=others, label="top-K search", color="#dd8452")
    ax.bar(steps, wait, bottom=[a + b for a, b in zip(others, topk, strict=True)],
           label="waiting for the PNM node", color="#c44e52")
    ax.set_xlabel("decode step")
    ax.set_ylabel("emulated time (us)")
    ax.set_title(title, fontsize=9)
    for i, r in enumerate(reports, 1):
        if r.migrating:
            ax.axvspan(i - 0.5, i + 0.5, color="#999999", alpha=0.25, lw=0,
                       label="KV migrating" if i == next(
                           j for j, x in enumerate(reports, 1) if x.migrating) else None)
    ax2 = ax.twinx()
    ax2.plot(steps, [r.tokens_per_s for r in reports], "k.-", label="tokens/s")
    ax2.set_ylabel("tokens/s (emulated)")
    ax2.set_ylim(bottom=0)
    ax.xaxis.get_major_locator().set_params(integer=True)
    handles = [h for a in (ax, ax2) for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3,
              fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plain(v):
    """A value JSON can hold without NaN: non-finite floats as None, keys as strings."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def measured_line(reports: list[StepReport]) -> str | None:
    """One line on the steps whose GPU time was measured, against the roofline; None if none
    was."""
    measured = [r for r in reports if r.gpu_time is GpuTime.MEASURED]
    if not measured:
        return None
    roof = sum(r.roofline_gpu_ps for r in measured)
    gpu = sum(r.others_ps + r.topk_ps for r in measured)
    return (f"GPU time measured ({measured[0].gpu_timer}) in {len(measured)} of {len(reports)} "
            f"steps: {gpu * 1e-6:.1f} us against the roofline's {roof * 1e-6:.1f} us "
            f"({gpu / roof if roof else math.nan:.2f}x)")


def run_json(reports: list[StepReport], requests: list, walls: list[float],
             sampling: object | None = None) -> dict:
    """A decode run as ``decode --json`` writes it: each step's report (times in ps), each
    request's tier and outcome, the totals, the wall time per step and the sampling's counts."""
    total = sum(r.step_ps for r in reports)
    toks = sum(r.tokens for r in reports)
    energy = sum(r.energy_j for r in reports)
    return _plain({
        "steps": [{**asdict(r), "roofline_gpu_ps": r.roofline_gpu_ps} for r in reports],
        "requests": [{"rid": r.rid, "prompt_tokens": len(r.prompt),
                      "generated": len(r.generated), "tier": r.tier.value,
                      "status": r.status.value, "migrated": r.migrated,
                      "preemptions": r.preemptions} for r in requests],
        "total": {"step_ps": total, "tokens": toks,
                  "tokens_per_s": toks / (total * 1e-12) if total else None,
                  "energy_j": energy if any(r.energy for r in reports) else None,
                  "j_per_token": energy / toks if toks and any(r.energy for r in reports)
                  else None},
        "wall_s_per_step": walls,
        "sampling": asdict(sampling) if sampling is not None else None,
    })
