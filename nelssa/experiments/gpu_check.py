"""The GPU check's figures (issue 45): what `scripts/gpu_check.sh` leaves in its folder, and the
page written from it (`scripts/gpu_page.py`, docs/results/gpu.md).

    python -m nelssa.experiments.gpu_check facts DIR     # nvidia-smi and torch facts, commit
    python -m nelssa.experiments.gpu_check kernels DIR   # measured against roofline, per family
    python scripts/gpu_page.py DIR [--out docs/results/gpu.md]

The folder holds ``facts.json`` (the machine), ``gpu-measured.json`` (the preset
scripts/calibrate_gpu.py fitted on the GPU), ``calibrate.log``, ``decode.json`` and
``decode.log`` (a `nelssa decode --json` run with the GPU side on CUDA) and, from them,
``kernels.json`` and ``kernels.md``: each kernel family's time as the GPU took it (CUDA events)
against the roofline model's figure of the preset the decode named. A folder made on the CPU
with a stand-in timer (tests/test_gpu_check.py) has the same files; the page says which timer
measured."""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from nelssa.emu.files import read_text
from nelssa.emu.latency.hardware import GpuHw, HardwareCatalog
from nelssa.host.gpu.gpu_timer import device_name
from nelssa.provenance import code_version

log = logging.getLogger(__name__)

FACTS, PRESET, DECODE, KERNELS_JSON, KERNELS_MD = (
    "facts.json", "gpu-measured.json", "decode.json", "kernels.json", "kernels.md")
SMI_FIELDS = ("name", "memory.total", "driver_version", "clocks.max.sm", "clocks.max.memory",
              "power.limit", "pci.bus_id", "compute_cap")
"""What `nvidia-smi --query-gpu` is asked for."""
FAMILIES = ("qkv", "attention", "top-k", "o-proj+mlp", "output-head")
"""gpu_timer.Family values, in the order a layer runs them (the head last)."""
DOC_BYTES = 64 << 20
"""Largest file of the folder read (a decode JSON of many steps is a few MB)."""
EFFICIENCIES = ("mem_efficiency", "linear_efficiency", "attn_efficiency")
COMPARED = ("h100-nvl", "h200")
"""The hardware description's Hopper presets the fitted one is shown beside (and the
decode's own GPU)."""


class CheckError(ValueError):
    """A folder the page cannot be written from; the message names the file."""


def _load(folder: Path, name: str) -> dict[str, Any]:
    path = folder / name
    try:
        doc = json.loads(read_text(path, name, DOC_BYTES))
    except OSError as e:
        raise CheckError(f"{path}: {e.strerror or e}") from None
    except ValueError as e:
        raise CheckError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise CheckError(f"{path}: a JSON object expected, got {type(doc).__name__}")
    return doc


def smi_facts() -> dict[str, Any]:
    """nvidia-smi's answers for each GPU, or why there are none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"error": "nvidia-smi not found"}
    try:
        done = subprocess.run([smi, f"--query-gpu={','.join(SMI_FIELDS)}",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": f"nvidia-smi: {e}"}
    if done.returncode:
        return {"error": f"nvidia-smi exit {done.returncode}: {done.stderr.strip()[:500]}"}
    gpus = [dict(zip(SMI_FIELDS, (v.strip() for v in line.split(",")), strict=False))
            for line in done.stdout.splitlines() if line.strip()]
    return {"gpus": gpus}


def facts() -> dict[str, Any]:
    """The machine a check ran on: nvidia-smi, torch and its device, the host, the code."""
    import torch

    cuda = torch.cuda.is_available()
    code = code_version()
    commit = os.environ.get("NELSSA_COMMIT") or code["commit"]
    return {
        "date": datetime.date.today().isoformat(),
        "commit": commit, "modified": code["modified"],
        "nvidia_smi": smi_facts(),
        "torch": {"version": torch.__version__, "cuda": torch.version.cuda,
                  "device": device_name(torch.device("cuda" if cuda else "cpu")),
                  "cudnn": torch.backends.cudnn.version() if cuda else None},
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                 "python": platform.python_version()},
    }


def kernels(decode: dict[str, Any]) -> dict[str, Any]:
    """Each kernel family's time over a decode's steps: what the GPU took (the steps whose
    time was measured) against the roofline's figure of the same work."""
    steps = decode.get("steps")
    if not isinstance(steps, list) or not steps:
        raise CheckError(f"{DECODE}: no steps")
    measured = [s for s in steps if s.get("gpu_time") == "measured"]
    rows = []
    for fam in FAMILIES:
        got = [s["measured_ps"][fam] for s in measured if fam in s.get("measured_ps", {})]
        roof = [s["roofline_ps"][fam] for s in measured if fam in s.get("measured_ps", {})]
        if not got:
            continue
        rows.append({"family": fam, "steps": len(got), "measured_us": sum(got) * 1e-6,
                     "roofline_us": sum(roof) * 1e-6,
                     "ratio": sum(got) / sum(roof) if sum(roof) else None})
    timers = sorted({s.get("gpu_timer", "roofline") for s in steps})
    return {"timers": timers, "steps": len(steps), "measured_steps": len(measured),
            "gpu": _decode_gpu(decode), "families": rows}


def _decode_gpu(decode: dict[str, Any]) -> str:
    hw = decode.get("config", {}).get("hardware", {}).get("gpu", {})
    return hw.get("name", "?") if isinstance(hw, dict) else "?"


def kernels_md(k: dict[str, Any]) -> str:
    """The comparison as a markdown table."""
    out = [f"Kernel families over {k['measured_steps']} measured of {k['steps']} decode steps "
           f"(timer {', '.join(k['timers'])}), against the roofline of {k['gpu']}:", "",
           "| family | steps | measured us | roofline us | measured / roofline |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for r in k["families"]:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
        out.append(f"| {r['family']} | {r['steps']} | {r['measured_us']:.1f} | "
                   f"{r['roofline_us']:.1f} | {ratio} |")
    return "\n".join(out) + "\n"


def write_kernels(folder: Path) -> dict[str, Any]:
    k = kernels(_load(folder, DECODE))
    (folder / KERNELS_JSON).write_text(json.dumps(k, indent=2) + "\n")
    (folder / KERNELS_MD).write_text(kernels_md(k))
    return k


def _preset_rows(measured: GpuHw, presets: list[GpuHw]) -> list[str]:
    """The fitted preset beside the description's: each field, and the achieved rates the
    roofline divides by (peak x efficiency)."""
    gpus = [measured, *presets]
    rows = ["| field | fitted on this GPU | " + " | ".join(f"preset {p.name}" for p in presets)
            + " |", "| --- |" + " ---: |" * len(gpus)]
    for f in ("hbm_gbs", "bf16_tflops", "memory_gb", *EFFICIENCIES):
        rows.append(f"| {f} | " + " | ".join(f"{getattr(g, f):g}" for g in gpus) + " |")
    for f, unit, eff in (("hbm_gbs", "GB/s", "mem_efficiency"),
                         ("bf16_tflops", "TFLOP/s", "linear_efficiency"),
                         ("bf16_tflops", "TFLOP/s", "attn_efficiency")):
        rows.append(f"| achieved {eff.split('_')[0]} ({unit}) | " + " | ".join(
            f"{getattr(g, f) * getattr(g, eff):.4g}" for g in gpus) + " |")
    return rows


def _split(decode: dict[str, Any]) -> list[str]:
    """The decode's Figure-11 split (GPU, top-K, wait for the node) of the step time, and
    its steps, measured GPU time beside the roofline's."""
    steps = decode["steps"]
    total = sum(s["step_ps"] for s in steps)
    if not total:
        raise CheckError(f"{DECODE}: the steps took no time")
    parts = {k: sum(s[k] for s in steps) for k in ("others_ps", "topk_ps", "wait_ps",
                                                   "recovery_ps")}
    roof = sum(s["roofline_gpu_ps"] for s in steps)
    gpu = parts["others_ps"] + parts["topk_ps"]
    out = [f"Over {len(steps)} steps, {total * 1e-6:.1f} us: GPU (QKV, attention, O-proj + MLP, "
           f"head, launches) {100 * parts['others_ps'] / total:.1f} %, top-K search "
           f"{100 * parts['topk_ps'] / total:.1f} %, waiting for the PNM node "
           f"{100 * parts['wait_ps'] / total:.1f} %"
           + (f", recovery {100 * parts['recovery_ps'] / total:.1f} %"
              if parts["recovery_ps"] else "") + ". "
           + (f"The GPU's part as the roofline gives it: {roof * 1e-6:.1f} us against "
              f"{gpu * 1e-6:.1f} us measured ({gpu / roof if roof else float('nan'):.2f}x)."
              if any(s["gpu_time"] == "measured" for s in steps) else
              "No step was measured: every GPU figure is the roofline's."), "",
           "| step | batch | step us | GPU us | top-K us | wait us | GPU by | roofline GPU us |",
           "| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: |"]
    for i, s in enumerate(steps, 1):
        out.append(f"| {i} | {s['short']}S+{s['long']}L | {s['step_ps'] * 1e-6:.1f} | "
                   f"{s['others_ps'] * 1e-6:.1f} | {s['topk_ps'] * 1e-6:.1f} | "
                   f"{s['wait_ps'] * 1e-6:.1f} | {s['gpu_time']} | "
                   f"{s['roofline_gpu_ps'] * 1e-6:.1f} |")
    return out


def _smi_lines(f: dict[str, Any]) -> list[str]:
    smi = f.get("nvidia_smi", {})
    if "gpus" not in smi:
        return [f"nvidia-smi: {smi.get('error', 'not run')}."]
    out = ["| " + " | ".join(SMI_FIELDS) + " |", "|" + " --- |" * len(SMI_FIELDS)]
    out += ["| " + " | ".join(g.get(k, "") for k in SMI_FIELDS) + " |" for g in smi["gpus"]]
    return out


def page(folder: Path) -> str:
    """docs/results/gpu.md from a check's folder."""
    f, decode = _load(folder, FACTS), _load(folder, DECODE)
    k = _load(folder, KERNELS_JSON)
    try:
        cat = HardwareCatalog.load(folder / PRESET)
    except ValueError as e:
        raise CheckError(str(e)) from None
    fitted = [g for g in cat.gpus.values() if g.calibrated_on is not None]
    if not fitted:
        raise CheckError(f"{folder / PRESET}: no calibrated preset (calibrated_on) in it")
    g = fitted[-1]
    names = dict.fromkeys([_decode_gpu(decode), *COMPARED])
    presets = [cat.gpus[n] for n in names if n in cat.gpus and n != g.name]
    argv = decode.get("config", {}).get("argv") or []
    t = f["torch"]
    lines = [
        "# The GPU side on a real GPU (issue 45)", "",
        f"Written by `python scripts/gpu_page.py {folder}` from the folder "
        f"`scripts/gpu_check.sh {folder}` left on {t['device']} (torch {t['version']}, CUDA "
        f"{t['cuda']}), {f['date']}, commit {f['commit']}"
        + (" (with local changes)" if f.get("modified") is True else "") + ".",
        "", "## The machine", "", *_smi_lines(f), "",
        f"Host: {f['host']['cpus']} CPUs ({f['host']['machine']}), Python "
        f"{f['host']['python']}.", "",
        "## Calibration (scripts/calibrate_gpu.py on the GPU)", "",
        f"Preset `{g.name}`, fitted on {g.device_name} on {g.calibrated_on}; the hardware "
        f"description loads it (`--hardware {PRESET}`), for `nelssa crossover`, `serve-sim` and "
        f"`decode`. Its source: {g.source}", "", *_preset_rows(g, presets), "",
        "## Measured against the roofline, per kernel family", "",
        f"`nelssa {' '.join(argv)}`" if argv else "(the decode's command was not recorded)", "",
        kernels_md(k).rstrip(), "",
        "## The decode step's Figure-11 split on this GPU", "", *_split(decode), "",
        "Measured steps take the CUDA events' times for the kernel families above (the host's "
        "launch gaps inside each span among them); the launches-and-sampling constant "
        "(kernel_us) and any recompute stay modelled. The node's side is the model devices' "
        "emulated time, as in every decode run.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    for name, text in (("facts", "write facts.json: nvidia-smi, torch, host, commit"),
                       ("kernels", "write kernels.json and kernels.md from decode.json"),
                       ("page", "write the page from the folder")):
        p = sub.add_parser(name, help=text)
        p.add_argument("folder", type=Path)
        if name == "page":
            p.add_argument("--out", type=Path, default=Path("docs/results/gpu.md"))
    args = parser.parse_args(argv)
    folder: Path = args.folder
    if not folder.is_dir():
        parser.error(f"{folder}: not a folder")
    try:
        if args.what == "facts":
            (folder / FACTS).write_text(json.dumps(facts(), indent=2) + "\n")
        elif args.what == "kernels":
            sys.stdout.write(kernels_md(write_kernels(folder)))
        else:
            args.out.write_text(page(folder))
            print(f"wrote {args.out}")
    except CheckError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
