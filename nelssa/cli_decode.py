"""`nelssa decode`: a mixed batch of short and long requests decoded end to end, the long
requests' attention on the PNM node's devices (booted here unless --node is given)."""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from nelssa.cli_fpga import add_board_args
from nelssa.config_args import add_config_options, config_values, field_docs, user_help
from nelssa.decode_hardware import (
    gpu_pnm_link,
    model_config,
    model_name,
    node_device_args,
    weights_folder,
)
from nelssa.emu.latency.model import POSITIVE as CHUNK
from nelssa.emu.latency.model import Sparsity
from nelssa.emu.policy.schedulers import SCHEDULERS
from nelssa.emu.policy.vllm_scheduler import VllmEnvError
from nelssa.hardware_options import add_entry_arg, add_hardware_file_arg, presets
from nelssa.host.gpu.config import PRESETS, LlamaConfig, PrefillConfig, describe_shape
from nelssa.host.gpu.gpu_timer import (
    TIMERS,
    TorchConfig,
    device_name,
    make_timer,
    resolve_device,
    weights_dtype,
)
from nelssa.host.gpu.report import measured_line, run_json
from nelssa.hw.model.drampower import command_trace_option
from nelssa.options import (
    POSITIVE_INT,
    SECONDS,
    SEED,
    UsageError,
    endpoint,
    int_range,
    number,
    output_file,
)
from nelssa.provenance import (
    check_fresh_files,
    config_beside,
    file_record,
    run_config,
    write_config,
)

PREFILL_OPTIONS = ("prefill_chunk", "prefill_limit_s", "prefill", "emulate_above_s")
"""PrefillConfig fields `decode` takes as options."""
TORCH_OPTIONS = ("torch_device", "gpu_timer", "torch_weights")
"""TorchConfig fields (--gpu-timer's choices are the registry's)."""
log = logging.getLogger(__name__)

MAX_PROMPT = 1 << 20
"""Longest prompt --short-len and --long-len take (the model's positions bound it further)."""


def length_range(text: str) -> tuple[int, int]:
    """``N`` or ``LO..HI`` prompt lengths, 1 <= LO <= HI <= MAX_PROMPT."""
    lo, dots, hi = text.partition("..")
    hi = hi if dots else lo
    if not (lo.isdigit() and hi.isdigit() and 1 <= int(lo) <= int(hi) <= MAX_PROMPT):
        raise argparse.ArgumentTypeError(f"must be N or LO..HI with 1 <= LO <= HI <= "
                                         f"{MAX_PROMPT}, got {text!r}")
    return int(lo), int(hi)


def _lengths(span: tuple[int, int], count: int, rng: Any) -> list[int]:
    return [int(x) for x in rng.integers(span[0], span[1] + 1, count)]


def _prefill_config(args: argparse.Namespace) -> PrefillConfig:
    return PrefillConfig(**config_values(args, PrefillConfig, PREFILL_OPTIONS))


def node_spec(args: argparse.Namespace, pnm: Any, devices: int) -> Any:
    """The node `decode` boots (or joins, with --node)."""
    from nelssa.cosim import NodeSpec

    extra = [x for b in args.bar or [] for x in ("--bar", b)]
    if args.backend != "fpga":
        extra += node_device_args(pnm)
    if args.rtl_layers:
        extra += ["--rtl-layers", str(args.rtl_layers)]
    if args.device_memory == "file":
        extra += ["--device-memory", "file"]
    if args.command_trace is not None:
        extra += ["--command-trace", str(args.command_trace.resolve())]
    if args.manifest:
        extra += ["--manifest", args.manifest]
    return NodeSpec(devices, args.backend, args.link, args.node, extra)


def cmd_decode(args: argparse.Namespace) -> int:
    if args.gpu_nodes > 1:
        from nelssa.cli_gpu_nodes import run_gpu_nodes

        trace = Path(args.trace)
        for i in range(args.gpu_nodes):  # each node's run writes its configuration beside it
            node = trace.with_name(f"{trace.stem}.node{i}{trace.suffix}")
            check_fresh_files(config_beside(str(node)), args.overwrite, "--trace/--plot")
        return run_gpu_nodes(args)
    import numpy as np

    from nelssa.cosim import CosimSession
    from nelssa.emu.launcher import EndpointError, check_listening
    from nelssa.emu.policy.states import SeqState, Tier
    from nelssa.host.gpu.clustering import ClusterConfig
    from nelssa.host.gpu.engine import DecodeConfig
    from nelssa.host.gpu.model import Llama
    from nelssa.host.gpu.report import StepReport, plot_steps
    from nelssa.host.gpu.routing import crossover_router
    from nelssa.progress import Progress

    config_path = config_beside(args.trace, args.json, args.plot)
    check_fresh_files(config_path, args.overwrite, "--trace/--plot/--json")
    cat, gpu_name, pnm, link = gpu_pnm_link(args)
    args.link = link
    cfg = DecodeConfig(selection=args.selection, chunk=args.chunk, gpu=gpu_name,
                       check_accuracy=not args.no_accuracy,
                       cluster=ClusterConfig(iterations=args.kmeans_iterations),
                       torch=TorchConfig(**config_values(args, TorchConfig, TORCH_OPTIONS)))
    try:
        device = resolve_device(cfg.torch.torch_device)
        timer = make_timer(device, cfg.torch.gpu_timer).name
    except ValueError as e:  # CUDA asked for without one, or a timer the device cannot run
        raise UsageError(f"--torch-device {cfg.torch.torch_device.value}: {e}") from None
    if args.node is not None:
        try:
            check_listening(args.node, min(args.timeout, 2.0))
        except EndpointError as e:
            raise UsageError(f"--node {e}") from None
    try:
        model = Llama.load(weights_folder(args), seed=args.seed, config=model_config(args),
                           prefill=_prefill_config(args), weight_sets=args.weight_sets)
    except (ValueError, OSError) as e:
        raise UsageError(f"--model {model_name(args)}: {e}") from None
    c = model.c
    devices = len(args.bar) if args.backend == "fpga" and args.bar else args.devices
    try:
        router = crossover_router(c, cfg, args.link, devices, args.t_input, pnm.name, cat)
    except ValueError as e:  # a model the PNM entry's device cannot be measured with
        raise UsageError(f"--pnm {pnm.name}: {e}") from None
    try:
        cfg = replace(cfg, t_input=router.t_input)
    except ValueError as e:
        raise UsageError(f"T_input {router.t_input} (the crossover): {e}; give --t-input"
                         ) from None
    if args.grow and router.t_input is None:
        raise UsageError(f"--grow needs a T_input to grow past, and T_input is "
                         f"{router.describe()}: give --t-input")
    if args.grow and router.t_input - 4 + args.steps + 1 > c.max_position_embeddings:
        raise UsageError(f"--grow: the growing request starts at T_input - 4 = "
                         f"{router.t_input - 4} tokens (T_input {router.describe()}); with "
                         f"{args.steps + 1} generated it exceeds the model's "
                         f"{c.max_position_embeddings} positions: give --t-input")
    rng = np.random.default_rng(args.seed)
    lens = ([("short", n) for n in _lengths(args.short_len, args.short, rng)]
            + [("long", n) for n in _lengths(args.long_len, args.long, rng)])
    prompts = [rng.integers(0, c.vocab_size, n).tolist() for _, n in lens]
    weights = weights_folder(args)
    print(f"NELSSA decode: {c.model_type} {c.num_hidden_layers} layers, "
          f"{c.num_attention_heads} query / {c.num_key_value_heads} KV heads x {c.head_dim}, "
          f"hidden {c.hidden_size}, MLP {c.intermediate_size}, vocabulary {c.vocab_size}, "
          f"{'weights from ' + weights if weights else 'random weights'}"
          f"{'' if weights else ' (' + model_name(args) + ' shape)'}; "
          f"{args.short} short + {args.long} long requests, T_input {router.describe()}, "
          f"selection {cfg.selection:.0%}, {args.steps} steps, GPU model {cfg.gpu}")
    dtype = str(weights_dtype(cfg.torch.torch_weights, device)).removeprefix("torch.")
    print(f"  GPU side on {device}"
          + (f" ({device_name(device)})" if device.type == "cuda" else "")
          + f", weights in {dtype}; its times: {timer} timer"
          + ("" if timer == "roofline" else f", the roofline of {cfg.gpu} beside them"))
    if args.backend != "fpga" and args.node is None:
        print(f"  PNM devices: {pnm.name}: {pnm.device or 'the default device'}")
    node = node_spec(args, pnm, devices)
    if args.node is None:
        print(f"booting a node: {devices} {args.backend} devices, link {args.link} "
              "(the first rtl run builds the device) ...", flush=True)
    t0 = time.perf_counter()
    try:
        session = CosimSession(model, cfg, node, router=router, scheduler=args.scheduler,
                               timeout_s=args.timeout, domain_ticket=domain_ticket(args))
    except ValueError as e:  # a model the node's devices cannot run (their CAPS)
        raise UsageError(f"--model: {e}") from None
    except RuntimeError as e:  # the node did not come up: it printed why
        print(f"error: {e}", flush=True)
        return 1
    if args.node is None:
        print(f"  node up at {session.endpoint} in {time.perf_counter() - t0:.1f} s")
    with session:
        dec, client = session.engine, session.client
        if args.grow:  # one request that starts below T_input and grows past it
            assert router.t_input is not None
            prompts.append(rng.integers(0, c.vocab_size, router.t_input - 4).tolist())
        bar = Progress(len(prompts), "prefill + offload")
        t0 = time.perf_counter()
        for p in prompts:
            dec.add(p, args.steps + 1)
        try:
            dec.prefill(bar.advance)
        except VllmEnvError as e:
            raise UsageError(f"--scheduler {args.scheduler}: {e}") from None
        bar.close()
        if args.grow:  # GPU memory just what the requests grow into: growth presses, and the
            # request that passes T_input migrates
            blocks = dec.blocks_to_grow(args.steps)
            dec.set_gpu_blocks(blocks)
            print(f"--grow: request {len(prompts) - 1} starts at {router.t_input - 4} tokens; "
                  f"the emulated GPU holds {blocks:,} KV blocks of {cfg.block_tokens} tokens")
        print(f"\nrouting (prefill and KV offload took {time.perf_counter() - t0:.1f} s wall):")
        for r in dec.requests:
            kv = dec.kv(r.rid)
            extra = f" ({r.note})" if r.note else ""
            where = (f"PNM tier, {kv.offloaded} tokens clustered on the node"
                     if r.tier is Tier.PNM else "GPU tier, dense attention")
            if kv.emulated_prefill:
                where += (f" (KV from the emulated prefill node, its prefill "
                          f"{kv.prefill_ps * 1e-9:.1f} ms there)")
            print(f"  request {r.rid}: prompt {len(r.prompt):>6} tokens -> {where}{extra}")
        if args.long and args.t_input is None and not any(r.tier is Tier.PNM
                                                          for r in dec.requests):
            print(f"  (T_input {router.describe()}: at these lengths the GPU alone is faster "
                  "for this model and hardware;\n  --t-input N sends prompts of N tokens or "
                  "more to the PNM tier all the same)")
        reports: list[StepReport] = []
        energy = _energy_of(cat, gpu_name, pnm, c, devices)
        print(f"\n{'step':>4} {'batch':>9} {'step us':>8} {'GPU':>7} {'top-K':>6} {'wait':>7} "
              f"{'tok/s':>8} {'xfer':>6} {'PNM-ovh':>7} {'PNM-attn':>8} {'dev cycles':>10} "
              f"{'GB/s':>6} {'mJ':>7} {'DDR5':>7} {'GPU by':>8} {'roofline':>8}  max rel. error "
              "of long requests: attended tokens / full context")
        wall = time.perf_counter()
        walls: list[float] = []
        n_events = len(dec.events)
        for s in range(args.steps):
            if not dec.unfinished():
                break
            t_step = time.perf_counter()
            rep = dec.step()
            walls.append(time.perf_counter() - t_step)
            if energy is not None:
                rep.energy = energy(rep).as_dict()
            reports.append(rep)
            us = 1e-6
            errs = " ".join(f"r{k}: {rep.engine_errors[k]:.1e} / {v:.1e}"
                            for k, v in rep.errors.items())
            print(f"{s + 1:>4} {rep.short:>3}S+{rep.long:>2}L {rep.step_ps * us:>8.1f} "
                  f"{rep.others_ps * us:>7.1f} {rep.topk_ps * us:>6.1f} {rep.wait_ps * us:>7.1f} "
                  f"{rep.tokens_per_s:>8,.0f} {rep.transfer_ps * us:>6.1f} "
                  f"{rep.pnm_overhead_ps * us:>7.1f} {rep.pnm_attn_ps * us:>8.1f} "
                  f"{max(rep.device_cycles.values(), default=0):>10,} {rep.device_gbs:>6.1f} "
                  f"{rep.energy_j * 1e3 if rep.energy else math.nan:>7.2f} "
                  f"{DDR5_SOURCE[rep.ddr5_counted]:>7} {rep.gpu_time.value:>8} "
                  f"{rep.roofline_gpu_ps * us:>8.1f}  {errs}", flush=True)
            for e in dec.events[n_events:]:
                print(f"     {e}")
            n_events = len(dec.events)
        wall = time.perf_counter() - wall
        session.leave_domain()  # nothing more to attend: the other members go on
        failed = [r for r in dec.requests if r.status is SeqState.FAILED]
        status = client.probe_status()
        sampling = status.sampling if args.rtl_layers else None
        backends = sorted({d.backend for d in status.devices}) or [args.backend]
    if not reports:
        print("no decode step ran")
        return 1
    total = sum(r.step_ps for r in reports)
    toks = sum(r.tokens for r in reports)
    sums = {k: sum(getattr(r, k) for r in reports) for k in
            ("others_ps", "topk_ps", "wait_ps", "transfer_ps", "pnm_overhead_ps", "pnm_attn_ps")}
    print(f"\ntotal: {toks} tokens in {total * 1e-6:.1f} us emulated = "
          f"{toks / (total * 1e-12):,.0f} tokens/s ({wall:.1f} s wall)")
    print(f"  wall time per step: {', '.join(f'{w:.1f}' for w in walls)} s")
    print("  Figure-11 breakdown of the step time: "
          f"GPU {100 * sums['others_ps'] / total:.1f} %, top-K search "
          f"{100 * sums['topk_ps'] / total:.1f} %, waiting for the node "
          f"{100 * sums['wait_ps'] / total:.1f} %")
    if (line := measured_line(reports)) is not None:
        print(f"  {line}")
    _print_energy(reports, toks)
    node_sum = sums["transfer_ps"] + sums["pnm_overhead_ps"] + sums["pnm_attn_ps"]
    if node_sum:
        print(f"  node requests (latency, mostly overlapped with GPU work): transfer "
              f"{100 * sums['transfer_ps'] / node_sum:.1f} %, PNM-overhead "
              f"{100 * sums['pnm_overhead_ps'] / node_sum:.1f} %, PNM-attn "
              f"{100 * sums['pnm_attn_ps'] / node_sum:.1f} %")
    if sampling is not None:
        print(f"  sampled layers 0..{sampling.rtl_layers - 1} on Verilated twins: "
              f"{sampling.batches} device batches, {sampling.descriptors} descriptors, "
              f"{sampling.mismatches} differing from the model devices; the model's cycles "
              f"{100 * sampling.model_error:+.2f} % of the RTL's (worst batch "
              f"{sampling.worst_ppm / 1e4:.2f} %)")
    if cfg.check_accuracy and any(r.tier is Tier.PNM for r in dec.requests):
        print("  accuracy: the first error is the devices' and the LSE merge's own (over exactly "
              "the tokens attended to;\n  bound 1e-3); the second adds what top-K selection "
              "leaves out, which is large for a random model\n  (its keys have no cluster "
              "structure and its attention is near uniform); --selection 1 makes it the first;"
              "\n  scripts/needle_report.py measures selection on structured attention")
    first = next((i for i, r in enumerate(reports) if r.migrating), None)
    if first:
        during = [r.step_ps for r in reports if r.migrating]
        before = [r.step_ps for r in reports[:first]]
        a, b = sum(during) / len(during), sum(before) / len(before)
        print(f"  migration: {len(during)} steps with KV in flight, {a * 1e-6:.1f} us each on "
              f"average against {b * 1e-6:.1f} us in the steps before "
              f"({100 * (a - b) / b:+.1f} %: the jitter other requests saw)")
    for r in dec.requests:
        if r.preemptions:
            print(f"  request {r.rid}: preempted {r.preemptions} times (GPU KV full), "
                  "recomputed when admitted again")
        if r.tier is Tier.PNM:
            how = "migrated while decoding; " if r.migrated else ""
            kv = dec.kv(r.rid)
            print(f"  request {r.rid}: {how}{len(r.generated)} tokens generated, {kv.chunks} chunk "
                  f"updates of {cfg.chunk} tokens appended, {kv.offloaded} tokens on the node")
    for r in failed:
        print(f"  request {r.rid} FAILED: {r.note}")
    if args.steps_json:
        write_steps(Path(args.steps_json), reports)
    trace = Path(args.trace)
    dec.trace.write(trace)
    migrated = sum(1 for r in dec.requests if r.migrated)
    plot_steps(reports, args.plot, f"NELSSA decode: {c.model_type} {c.num_hidden_layers} "
               f"layers, {args.short} short + {args.long} long requests, T_input "
               f"{router.describe()}, selection {cfg.selection:.0%}\n{devices} "
               f"{'/'.join(backends)} devices ({pnm.name}), link {args.link}"
               + (f", {migrated} migrated" if migrated else ""))
    doc = decode_config(args, cat, gpu_name, pnm, c, cfg, devices, lens)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {**run_json(reports, dec.requests, walls, sampling), "config": doc}, indent=2,
            allow_nan=False))
    if config_path is not None:
        write_config(config_path, doc, [str(x) for x in (args.trace, args.plot, args.json)
                                        if x is not None])
    print(f"\nwrote {trace} (open in ui.perfetto.dev) and {args.plot}"
          + (f" and {args.json}" if args.json else "")
          + (f"; the run's configuration in {config_path}" if config_path else ""))
    return 1 if failed else 0


def _energy_of(cat: Any, gpu_name: str, pnm: Any, c: Any, devices: int) -> Any:
    """Each step's energy (``host/gpu/report.step_energy``), or None (said why) where the
    GPU's entry has no power figures. DDR5 from the devices' counted commands where every
    node reply of the step has them (model and rtl devices; priced as the PNM entry's
    device), else the average (``rep.ddr5_counted`` says which)."""
    from nelssa.emu.energy import EnergyError, check_power, energy_entry
    from nelssa.emu.latency.description import pnm_device
    from nelssa.host.gpu.report import Ddr5Meter, step_energy
    from nelssa.hw.model.device import DeviceConfig

    gpu = cat.get("gpus", gpu_name)
    try:
        e = energy_entry(cat)
        check_power(gpu)
    except EnergyError as err:
        print(f"  energy not reported: {err}")
        return None
    meter = Ddr5Meter.of(DeviceConfig() if pnm.device is None
                         else pnm_device(pnm.device).device_config())

    def energy(rep: Any) -> Any:
        counted = meter.step_j(rep, devices)
        rep.ddr5_counted = counted is not None
        return step_energy(rep, gpu, e, c.group, c.head_dim, devices, counted)
    return energy


DDR5_SOURCE = {True: "counted", False: "average", None: "-"}
"""The step table's DDR5 column: the step's DDR5 energy from the devices' counted commands,
or the average per byte read and background (``StepReport.ddr5_counted``)."""


def _print_energy(reports: list[Any], tokens: int) -> None:
    """The run's energy and its Figure-11 split (GPU compute, GPU memory, PNM engine, DDR5,
    links, idle)."""
    from nelssa.emu.energy import EnergySplit

    if not any(r.energy for r in reports):
        return
    total = EnergySplit()
    for r in reports:
        total = total + EnergySplit(**r.energy)
    j = total.total_j
    parts = ", ".join(f"{k} {100 * v / j:.1f} %" for k, v in total.figure11().items())
    counted = sum(bool(r.ddr5_counted) for r in reports)
    print(f"  energy: {j * 1e3:.2f} mJ emulated, {j / tokens * 1e3 if tokens else math.nan:.3f}"
          f" mJ per token; Figure-11 split: {parts}; DDR5 from counted commands in {counted} "
          f"of {len(reports)} steps (the others: the average per byte read and background)")


def decode_config(args: argparse.Namespace, cat: Any, gpu_name: str, pnm: Any, c: Any,
                  cfg: Any, devices: int, lens: list[tuple[str, int]]) -> dict[str, Any]:
    """The run's resolved configuration (provenance.run_config): hardware values, the model's
    shape, the decode and prefill settings, the requests' lengths and seed."""
    return run_config("decode", getattr(args, "argv", None), {
        "hardware": {"files": [file_record(f) for f in args.hardware],
                     "gpu": cat.get("gpus", gpu_name), "pnm": pnm,
                     "link": cat.get("links", args.link)},
        "model": {"name": model_name(args), "weights": weights_folder(args), "shape": c,
                  "weight_sets": args.weight_sets},
        "decode": cfg, "prefill": _prefill_config(args),
        "torch": {"device": str(resolve_device(cfg.torch.torch_device)),
                  "name": device_name(resolve_device(cfg.torch.torch_device))},
        "node": {"devices": devices, "backend": args.backend, "endpoint": args.node,
                 "rtl_layers": args.rtl_layers, "device_memory": args.device_memory},
        "requests": {"seed": args.seed, "short": args.short, "long": args.long,
                     "prompt_tokens": [n for _, n in lens], "grow": args.grow,
                     "steps": args.steps},
        "scheduler": args.scheduler})


def domain_ticket(args: argparse.Namespace) -> bytes | None:
    """--domain-ticket's bytes (from standard input for `-`)."""
    import sys

    text = args.domain_ticket
    if text is None:
        return None
    if text == "-":
        text = sys.stdin.readline().strip()
    try:
        ticket = bytes.fromhex(text)
    except ValueError:
        ticket = b""
    if len(ticket) != 16:
        raise UsageError("--domain-ticket: 32 hexadecimal digits (the ticket the domain's "
                         "opener was given)")
    return ticket


def write_steps(path: Path, reports: list[Any]) -> None:
    """Each step's emulated figures (picoseconds), for --gpu-nodes and the checks."""
    import json

    keys = ("step_ps", "wait_ps", "node_ps", "others_ps", "topk_ps", "transfer_ps",
            "pnm_overhead_ps", "pnm_attn_ps", "short", "long", "tokens", "node_requests")
    path.write_text(json.dumps([{k: getattr(r, k) for k in keys} for r in reports]))


def add_decode_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("decode", help="a mixed batch decoded end to end on the GPU and the node")
    p.add_argument("--node", type=endpoint,
                   help="a running node's endpoint (default: boot one here)")
    p.add_argument("--devices", type=int_range(1, 32), default=4, help="1..32")
    p.add_argument("--backend", choices=("rtl", "model", "fpga"), default="rtl")
    add_board_args(p, several=True)
    add_hardware_file_arg(p)
    add_entry_arg(p, "links")
    add_entry_arg(p, "pnm", "; its device (units, DDR5 grade and overrides, sub-channels) "
                  "is what the booted node's model or rtl devices are")
    shapes = "; ".join(f"{name}: {describe_shape(make())}" for name, make in PRESETS.items())
    models = ", ".join(n for n, m in presets().models.items() if m.hf and n not in PRESETS)
    p.add_argument("--model", metavar="NAME|PATH",
                   help=f"the decoder: a Hugging Face model folder (config.json + safetensors: "
                        f"its weights), a config.json (or a folder of one) without weights, or "
                        f"a model entry: the decoder's own small and llama-3-8b (32000 tokens "
                        f"unless --vocab), or the description's {models} or an entry of "
                        f"--hardware (llama, mistral, qwen2 shapes); random weights but for a "
                        f"weights folder [default: the files' use.model, else small, "
                        f"{LlamaConfig().num_hidden_layers} layers]. {shapes}"
                        .replace("%", "%%"))
    p.add_argument("--model-shape", metavar="NAME", help="deprecated: --model NAME")
    p.add_argument("--layers", type=int_range(1, 256),
                   help="layers of the --model shape: the first ones, cut to fit the machine "
                        "(default: the shape's)")
    p.add_argument("--vocab", type=int_range(1, 1 << 20),
                   help="vocabulary of the --model shape (default: the shape's)")
    p.add_argument("--positions", type=int_range(1, 1 << 24), metavar="N",
                   help="positions of the --model shape (default: the shape's; llama-3-8b "
                        "131072): longer prompts, RoPE (Llama-3 scaled) taken on past the "
                        "trained range, as long-context variants do; random weights do not "
                        "mind")
    add_config_options(p, PrefillConfig, PREFILL_OPTIONS)
    p.add_argument("--kmeans-iterations", type=int_range(1, 1000), metavar="N",
                   default=Sparsity().kmeans_iterations,
                   help="k-means rounds per segment of a long prompt's keys (the reference "
                        "figure is the default; the set-up's wall time scales with it, the "
                        "emulated times do not) [default: %(default)s]")
    p.add_argument("--rtl-layers", type=int_range(0, 0xFFFF), default=0, metavar="K",
                   help="with --backend model: layers 0..K-1 also on a Verilated twin of "
                        "each device, answered by it and checked against the model devices "
                        "bit for bit and cycle for cycle (sampled simulation; `node up "
                        "--rtl-layers`)")
    p.add_argument("--weight-sets", type=int_range(0, 256), default=0, metavar="N",
                   help="random weights: draw layers 0..N-1 only (the values a model of N "
                        "layers has) and give layer i the weights of layer i mod N, so many "
                        "layers of a large shape fit the host; each layer's KV is still its "
                        "own; 0: every layer its own weights [default: %(default)s]")
    p.add_argument("--device-memory", choices=("ram", "file"), default="ram",
                   help="where the booted node's model devices hold their memory: RAM, or a "
                        "sparse file each in the node's temporary folder, removed at exit "
                        "(`node up --device-memory`; for KV beyond the host's memory) "
                        "[default: %(default)s]")
    p.add_argument("--command-trace", type=command_trace_option, metavar="FILE",
                   help="the booted node's model devices write their DDR5 commands when the "
                        "run ends: DRAMPower CSV per device and sub-channel (FILE's stem + "
                        "-dev<N>-sub<M>) and the part's DRAMPower memspec (`node up "
                        "--command-trace`)")
    p.add_argument("--short", type=int_range(0, 256), default=4, help="short requests (0..256)")
    p.add_argument("--long", type=int_range(0, 64), default=2, help="long requests (0..64)")
    p.add_argument("--short-len", type=length_range, default="64..512",
                   help="prompt lengths LO..HI")
    p.add_argument("--long-len", type=length_range, default="3072..6144",
                   help="prompt lengths LO..HI")
    p.add_argument("--t-input", type=POSITIVE_INT,
                   help="routing threshold (tokens); default: the latency model's crossover "
                        "for --gpu, --link, --devices, the model, --selection and the cluster "
                        "size (`nelssa crossover` shows it)")
    add_config_options(p, Sparsity, ("selection",))
    p.add_argument("--chunk", type=number(CHUNK), default=Sparsity.chunk_tokens,
                   help=f"{field_docs(Sparsity)['chunk_tokens']} The paper's figure, which "
                        "the serving emulator and the latency model use too; a run of fewer "
                        "--steps appends no chunk (--chunk 16 shows the appends)")
    p.add_argument("--steps", type=int_range(1, 100000), default=32, help="1..100000")
    add_entry_arg(p, "gpus", " (the roofline time model's)")
    add_config_options(p, TorchConfig, ("torch_device", "torch_weights"))
    p.add_argument("--gpu-timer", choices=sorted(TIMERS), metavar="NAME",
                   help=f"{user_help(field_docs(TorchConfig)['gpu_timer'])} Choices: "
                        f"{', '.join(sorted(TIMERS))}.")
    p.add_argument("--timeout", type=SECONDS, default=300.0, help="seconds per node request")
    p.add_argument("--no-accuracy", action="store_true",
                   help="skip the comparison with dense attention over the full context")
    p.add_argument("--trace", type=output_file, default="decode-trace.json",
                   help="Perfetto trace-event JSON")
    p.add_argument("--plot", type=output_file, default="decode.png", help="PNG plot")
    p.add_argument("--json", type=output_file,
                   help="also write the run as JSON here: each step's report, each request's "
                        "tier and outcome, the totals")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier run's --trace, --plot and --json (a run writes its "
                   "resolved configuration beside them, NAME.config.json, and refuses paths "
                   "that hold one)")
    p.add_argument("--grow", action="store_true",
                   help="add a request that grows past T_input and migrates to the PNM tier")
    p.add_argument("--scheduler", choices=sorted(SCHEDULERS), default="ours",
                   help="who plans the steps: ours (the project's implementation of vLLM v1's "
                        "algorithm) or vllm (vLLM's own v1 scheduler, unmodified, in its own "
                        "environment: `make vllm`) [default: %(default)s]")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--gpu-nodes", type=int_range(1, 64), default=1, metavar="K",
                   help="GPU decode nodes, each a process of its own with its own engine and "
                        "the same batch, against one PNM node, sharing its devices' emulated "
                        "timeline (a clock domain); 1: this process alone [default: "
                        "%(default)s]")
    p.add_argument("--domain-ticket", metavar="HEX|-",
                   help="join the clock domain of this ticket on the --node (`-`: read it "
                        "from standard input, as --gpu-nodes hands it to its nodes)")
    p.add_argument("--steps-json", type=output_file, metavar="PATH",
                   help="also write each step's emulated figures as JSON")
    p.set_defaults(func=cmd_decode)


def check_decode_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.command != "decode":
        return
    if args.short + args.long == 0:
        parser.error("--short and --long are both 0: nothing to decode")
    if args.backend == "fpga" and not args.bar and args.node is None:
        parser.error("--backend fpga needs --bar BOARD for each board (a PCI device folder, or "
                     "a fake board from `nelssa fpga fake`)")
    if args.bar and args.backend != "fpga":
        parser.error("--bar goes with --backend fpga")
    if args.grow and args.scheduler != "ours":
        parser.error(f"--grow sizes the GPU's KV after the prefills, and the {args.scheduler} "
                     "scheduler's is fixed when it starts: use --scheduler ours")
    if args.domain_ticket is not None and (args.node is None or args.gpu_nodes > 1):
        parser.error("--domain-ticket joins the clock domain of a running node: give --node, "
                     "and no --gpu-nodes")
    if args.rtl_layers and (args.backend != "model" or args.node is not None):
        parser.error(f"--rtl-layers {args.rtl_layers}: sampling puts the other layers on model "
                     "devices of a node this run boots (--backend model, no --node)")
    if args.device_memory == "file" and (args.backend != "model" or args.node is not None):
        parser.error("--device-memory file: the model devices of a node this run boots "
                     "(--backend model, no --node)")
    if args.command_trace is not None and (args.backend != "model" or args.node is not None):
        parser.error("--command-trace: the model devices of a node this run boots (--backend "
                     "model, no --node)")
    if args.weight_sets and weights_folder(args) is not None:
        parser.error("--weight-sets shares random weights between layers; --model loads them")
    from nelssa.host.gpu.request import DecodeConfig

    for option, field in (("--t-input", "t_input"), ("--selection", "selection"),
                          ("--chunk", "chunk")):  # what the decode itself refuses, by option
        if getattr(args, field) is None:
            continue
        try:
            DecodeConfig(**{field: getattr(args, field)})
        except ValueError as e:
            parser.error(f"argument {option}: {e}")
    check_model_args(parser, args)


def check_model_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The model the PNM devices can run, and a run this host can hold and prefill in time
    (estimated from the shapes, before anything is built)."""
    from nelssa.driver.status import SUPPORTED_HEAD_DIMS
    from nelssa.host.gpu.prefill import available_memory, check_run, estimate_run
    from nelssa.hw.model.engine import EngineParams

    if weights_folder(args) is not None and (args.model_shape or args.layers or args.vocab
                                             or args.positions):
        parser.error("--model-shape, --layers, --vocab and --positions describe a random "
                     "model; --model loads one")
    if args.model is not None and args.model_shape is not None:
        parser.error("--model-shape is --model's old name: give one")
    try:
        what = f"--model {model_name(args)}" if args.model_shape is None else \
            f"--model-shape {args.model_shape}"
        c = model_config(args)
    except UsageError as e:
        parser.error(str(e))
    except ValueError as e:
        parser.error(f"{what}: {e}")
    if c.head_dim not in SUPPORTED_HEAD_DIMS:
        parser.error(f"{what}: head_dim {c.head_dim}: the PNM devices take "
                     f"{', '.join(map(str, SUPPORTED_HEAD_DIMS))}")
    most = EngineParams().num_qheads
    if c.group > most:
        parser.error(f"{what}: {c.group} query heads per KV head: the PNM devices take at "
                     f"most {most}")
    for option, span in (("--short-len", args.short_len), ("--long-len", args.long_len)):
        if span[1] + args.steps + 1 > c.max_position_embeddings:  # before anything is built
            parser.error(f"{option}: a prompt of {span[1]} tokens and {args.steps + 1} "
                         f"generated exceed the model's {c.max_position_embeddings} positions")
    cfg = _prefill_config(args)
    short = [args.short_len[1]] * args.short
    long = [args.long_len[1]] * args.long
    file_memory = args.device_memory == "file"
    est = estimate_run(c, short, long, cfg, accuracy=not args.no_accuracy,
                       local_node=args.node is None, twin_layers=args.rtl_layers,
                       weight_sets=args.weight_sets, file_memory=file_memory)
    why = check_run(est, cfg, available_memory(),
                    shutil.disk_usage(tempfile.gettempdir()).free if file_memory else None)
    if why:
        parser.error(f"{what} ({c.num_hidden_layers} layers) with --short {args.short} x "
                     f"--short-len up to {args.short_len[1]} and --long {args.long} x --long-len "
                     f"up to {args.long_len[1]}: the run {why} (fewer --layers, shorter "
                     "prompts, --no-accuracy, --weight-sets, --device-memory file or "
                     "--prefill-limit)")
