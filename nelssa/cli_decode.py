"""`nelssa decode`: a mixed batch of short and long requests decoded end to end, the long
requests' attention on the PNM node's devices (booted here unless --node is given)."""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from nelssa.cli_decode_args import TORCH_OPTIONS, add_decode_options, prefill_config
from nelssa.config_args import config_values
from nelssa.decode_hardware import (
    gpu_pnm_link,
    model_config,
    model_name,
    node_device_args,
    weights_folder,
)
from nelssa.emu.policy.vllm_scheduler import VllmEnvError
from nelssa.host.gpu.gpu_timer import (
    TorchConfig,
    device_name,
    make_timer,
    resolve_device,
    weights_dtype,
)
from nelssa.host.gpu.report import measured_line, run_json
from nelssa.options import (
    UsageError,
)
from nelssa.provenance import (
    check_fresh_files,
    config_beside,
    file_record,
    run_config,
    write_config,
)

log = logging.getLogger(__name__)

def _lengths(span: tuple[int, int], count: int, rng: Any) -> list[int]:
    return [int(x) for x in rng.integers(span[0], span[1] + 1, count)]


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
                           prefill=prefill_config(args), weight_sets=args.weight_sets)
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
        "decode": cfg, "prefill": prefill_config(args),
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
    add_decode_options(sub).set_defaults(func=cmd_decode)
