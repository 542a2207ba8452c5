"""The `nelssa` command line."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

# PyTorch's CPU allocator on transparent huge pages, read when torch is first imported (so set
# before any import that brings it in): the KV buffers of a long prompt (a 128K-token head is
# 32-64 MB) are fresh memory each layer, and each 4 KB page faulted in took a few microseconds
# here, about a fifth of a 128K run's set-up. A setting the user made is kept; children inherit it.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from nelssa import __version__
from nelssa.hw.sim.verilator import log as verilator_log
from nelssa.options import (
    PID,
    SEED,
    Parser,
    UsageError,
    add_datapath_args,
    add_ddr5_args,
    add_engines,
    check_rtl_engines,
    endpoint,
    input_file,
    int_range,
)

log = logging.getLogger(__name__)


def cmd_demo(args: argparse.Namespace) -> int:
    """One attention command through the RTL engine and the bit-exact model."""
    import numpy as np

    from nelssa.hw.model.device import SIM_CLOCK_HZ
    from nelssa.hw.model.engine import EngineParams
    from nelssa.hw.sim.demo import LSE_BOUND, O_BOUND, engine_demo
    from nelssa.hw.sim.engine import RtlEngine

    tokens = args.cluster_tokens * args.clusters
    print(f"NELSSA attention engine demo: {args.qheads} query heads x head_dim {args.head_dim}, "
          f"{args.clusters} clusters x {args.cluster_tokens} tokens = {tokens} tokens, "
          f"scale 1/sqrt({args.head_dim}), seed {args.seed}")
    print("building the Verilated engine (cached after the first run) ...", flush=True)
    t0 = time.perf_counter()
    engine = RtlEngine(EngineParams())
    print(f"  ready in {time.perf_counter() - t0:.1f} s: {engine.exe}")
    d = engine_demo(engine, args.head_dim, args.qheads, args.clusters, args.cluster_tokens,
                    args.seed)
    if d.status != "OK":
        print(f"RTL engine reported {d.status}")
        return 1
    print("\nresults (query head 0, first 6 elements of O):")
    np.set_printoptions(precision=7, suppress=False, linewidth=110)
    print(f"  RTL    O = {d.rtl_o[0, :6]}")
    print(f"  model  O = {d.model_o[0, :6]}")
    print(f"  fp64   O = {d.o64[0, :6]}")
    print(f"  RTL    LSE = {d.rtl_lse}")
    print(f"  model  LSE = {d.model_lse}")
    print(f"  fp64   LSE = {d.lse64}")
    print("\nagreement:")
    print(f"  RTL vs model: O {'bit-identical' if d.same_o else 'DIFFERENT'} "
          f"({d.rtl_o.size} values), LSE {'bit-identical' if d.same_lse else 'DIFFERENT'}")
    print(f"  vs float64: max|O - O64| = {d.o_err:.3e} ({d.o_err / d.v_max:.2e} x max|V|), "
          f"max|LSE - LSE64| = {d.lse_err:.3e}  (bound: {O_BOUND:g} x max|V|, {LSE_BOUND:g})")
    print("\ntiming:")
    print(f"  engine cycles: {d.cycles} (command to done), stream {d.kv_beats} beats in "
          f"{d.kv_span} cycles = {d.beats_per_cycle:.3f} beats/cycle")
    print(f"  at {SIM_CLOCK_HZ / 1e6:g} MHz: {d.device_us:.2f} us of device time")
    print(f"  simulation: {d.sim_cycles_per_s:,.0f} cycles/s "
          f"(harness {d.rtl_wall_s:.2f} s wall); model {d.model_wall_s:.2f} s wall")
    print("\nPASS" if d.ok else "\nFAIL")
    return 0 if d.ok else 1


SERVED = ("model", "rtl", "fpga")
"""The devices ``device serve`` serves (a remote one it would only relay)."""


def served_device(text: str) -> str:
    """``--backend``: a device spec of hw/ports.py that ``device serve`` can serve, or ``fpga``
    (its board from ``--bar``)."""
    from nelssa.hw.ports import PortSpecError, parse_spec

    if text == "fpga":
        return text
    try:
        parse_spec(text, SERVED)
    except PortSpecError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def cmd_device_serve(args: argparse.Namespace) -> int:
    """Serve one device's port over ZeroMQ until a client asks it to shut down."""
    from nelssa.cli_node import check_bind
    from nelssa.driver.remote_server import serve_port
    from nelssa.emu.launcher import remove_socket_file
    from nelssa.emu.link.security import CurveServerKeys
    from nelssa.emu.link.tokens import AdminTokenError, token_from_file, token_path
    from nelssa.hw.fpga.errors import FpgaError
    from nelssa.hw.ports import PortOptions, board_spec, open_port

    check_bind(args.endpoint, args.curve_secret)  # before the device is made (rtl: built)
    curve = CurveServerKeys(args.curve_secret) if args.curve_secret else None
    token = None
    if args.token_file is not None:
        try:
            token = token_from_file(args.token_file)
        except AdminTokenError as e:
            raise UsageError(f"--token-file {e}") from None
    spec = args.backend
    if spec == "fpga":  # the long form: the board from --bar
        if not args.bar:
            print("error: --backend fpga needs --bar", file=sys.stderr)
            return 2
        spec = board_spec(args.bar)
    if args.memory_file is not None and spec != "model":
        print("error: --memory-file goes with --backend model", file=sys.stderr)
        return 2
    if args.command_trace is not None and spec != "model":
        print("error: --command-trace goes with --backend model", file=sys.stderr)
        return 2
    options = PortOptions(engines=args.engines, preset=args.preset,
                          ddr5_overrides=tuple(args.ddr5_override or ()),
                          subchannels=args.subchannels or PortOptions.subchannels,
                          fp_latency=args.fp_latency or (),
                          compute_lanes=args.compute_lanes or PortOptions.compute_lanes,
                          memory_file=args.memory_file, manifest=args.manifest)
    try:
        port = open_port(spec, options)
    except (FpgaError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the one file a local device makes
        print(f"error: --memory-file {args.memory_file}: {e}", file=sys.stderr)
        return 2
    schedule = getattr(port, "schedule", None)
    if args.command_trace is not None:
        if not hasattr(schedule, "log_commands"):
            print("error: --command-trace needs the device's cycle model (its DDR5 timer "
                  "'cycle': 8 sub-channels, at most 6 units)", file=sys.stderr)
            return 2
        schedule.log_commands()
    log.info("serving a %s device at %s", args.backend, args.endpoint)
    if token is None:
        print(f"device token: {token_path(args.endpoint)} (read by `node up --attach` of this "
              "user on this host; elsewhere give a copy with --device-token)", flush=True)
    try:
        serve_port(port, args.endpoint, curve=curve, parent_pid=args.parent_pid, token=token)
    except ValueError as e:  # a refused bind, a bad key file
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if args.command_trace is not None:
            from nelssa.hw.model.ddr5_power import power_spec
            from nelssa.hw.model.drampower import write_schedule

            wrote = write_schedule(args.command_trace, schedule, power_spec(args.preset))
            log.info("DDR5 command traces: %s", ", ".join(map(str, wrote)))
        close = getattr(getattr(port, "mem", None), "close", None)
        if args.memory_file is not None and close is not None:
            close()  # the file-backed memory's file goes with the device
    remove_socket_file(args.endpoint)
    return 0


def cmd_device_demo(args: argparse.Namespace) -> int:
    """KV written through CXL.mem, attention descriptors through the rings, on the Verilated
    device and on the model, results compared bit for bit."""
    from nelssa.hw.model.device import SIM_CLOCK_HZ
    from nelssa.hw.sim.demo import device_demo

    print(f"NELSSA device demo: {args.kv_heads} KV heads x {args.qheads} query heads, head_dim "
          f"128, {args.clusters} clusters of 8-24 tokens per KV head, {args.selected} selected")
    print("building the Verilated device (cached after the first run) ...", flush=True)

    def show(run) -> None:
        print(f"  {run.name:5}: {run.cycles:,} device cycles ({run.device_us:.1f} us at "
              f"{SIM_CLOCK_HZ / 1e6:g} MHz), status {run.statuses}, {run.wall_s:.1f} s wall",
              flush=True)

    d = device_demo(args.kv_heads, args.qheads, args.clusters, args.selected, args.seed, show)
    print(f"  rtl vs model: O and LSE {'bit-identical' if d.same else 'DIFFERENT'}; "
          f"max|O - O64| = {d.o_err:.2e}")
    print("\nPASS" if d.ok else "\nFAIL")
    return 0 if d.ok else 1


def _ranged(parser: argparse.ArgumentParser, option: str, most: int, default: int,
            what: str) -> None:
    """An integer option in 1..most, its help naming the range."""
    parser.add_argument(option, type=int_range(1, most), default=default,
                        help=f"{what} (1..{most})")


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    from nelssa.driver.status import SUPPORTED_HEAD_DIMS
    from nelssa.hw.model.engine import EngineParams

    engine = EngineParams()  # what the demos' engines take (the device's CAPS says the same)
    demo = sub.add_parser("demo", help="one attention command through the RTL engine and model")
    demo.add_argument("--head-dim", type=int, choices=SUPPORTED_HEAD_DIMS,
                      default=engine.head_dim)
    _ranged(demo, "--qheads", engine.num_qheads, 4, "query heads per KV head")
    _ranged(demo, "--clusters", 65535, 64, "selected clusters")
    _ranged(demo, "--cluster-tokens", engine.max_cluster_tokens, 16, "tokens per cluster")
    demo.add_argument("--seed", type=SEED, default=0)
    demo.set_defaults(func=cmd_demo)


def add_device_parser(sub: argparse._SubParsersAction) -> None:
    from nelssa.cli_fpga import add_board_args
    from nelssa.driver.formats import MAX_IDS
    from nelssa.emu.link.tokens import default_endpoint
    from nelssa.hw.model.device import DeviceConfig
    from nelssa.hw.model.drampower import command_trace_option
    from nelssa.hw.model.engine import EngineParams
    from nelssa.hw.ports import known_forms

    engine = EngineParams()
    device = sub.add_parser("device", help="PNM device processes")
    device_sub = device.add_subparsers(dest="device_command", required=True)
    serve = device_sub.add_parser("serve", help="serve a device's port over ZeroMQ")
    serve.add_argument("--backend", type=served_device, default="model", metavar="SPEC",
                       help=f"the device: {known_forms(SERVED)} (or fpga with --bar)")
    add_board_args(serve, several=False)
    serve.add_argument("--endpoint", type=endpoint, default=default_endpoint("device-0"),
                       help="ZeroMQ endpoint to bind (ipc://PATH or tcp://127.0.0.1:PORT)")
    add_engines(serve)
    add_ddr5_args(serve, DeviceConfig.preset)
    add_datapath_args(serve)
    serve.add_argument("--parent-pid", type=PID,
                       help="exit when this process (the node that started the device) is gone")
    serve.add_argument("--curve-secret", type=input_file,
                       help="CURVE secret key file; needed to bind an address other hosts "
                            "can reach")
    serve.add_argument("--memory-file", type=Path, metavar="PATH",
                       help="--backend model: hold device memory in a new sparse file at PATH "
                            "(removed on exit) instead of RAM, for KV beyond the host's memory")
    serve.add_argument("--command-trace", type=command_trace_option, metavar="FILE",
                       help="--backend model: write the device's DDR5 commands when it stops, "
                            "in DRAMPower's CSV (FILE's stem + -sub<N> per sub-channel), with "
                            "the DDR5 part's DRAMPower memspec beside them (the commands are "
                            "kept in memory until then: 32 bytes each)")
    serve.add_argument("--token-file", type=Path, metavar="FILE",
                       help="the token a client must present before any call: read from FILE "
                            "(mode 0600), or made there if FILE does not exist [default: a new "
                            "token, written for the endpoint where `node up --attach` of this "
                            "user on this host finds it]")
    serve.set_defaults(func=cmd_device_serve)
    ddemo = device_sub.add_parser("demo", help="attention descriptors on the rtl and model device")
    _ranged(ddemo, "--kv-heads", 8, 2, "KV heads")
    _ranged(ddemo, "--qheads", engine.num_qheads, 4, "query heads per KV head")
    _ranged(ddemo, "--clusters", MAX_IDS, 64, "clusters per KV head")
    ddemo.add_argument("--selected", type=int_range(1, MAX_IDS), default=16,
                       help="selected clusters per KV head (1..--clusters)")
    ddemo.add_argument("--seed", type=SEED, default=0)
    ddemo.set_defaults(func=cmd_device_demo)


COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (__name__, "add_demo_parser"),
    "device": (__name__, "add_device_parser"),
    "node": ("nelssa.cli_node", "add_node_parser"),
    "decode": ("nelssa.cli_decode", "add_decode_parser"),
    "fpga": ("nelssa.cli_fpga", "add_fpga_parser"),
    "crossover": ("nelssa.cli_latency", "add_latency_parser"),
    "serve-sim": ("nelssa.cli_serving", "add_serving_parser"),
    "sweep": ("nelssa.cli_sweep", "add_sweep_parser"),
    "plan": ("nelssa.cli_plan", "add_plan_parser"),
    "presets": ("nelssa.cli_presets", "add_presets_parser"),
}
"""Each subcommand, in --help's order: the module that adds its parser, and the function. A
process builds (so imports) only the one it runs: each module's dependencies (pydantic, the
serving records, the planner, ...) cost a short command more than its work."""


class _TopLevelError(Exception):
    """A refusal of the top-level parser built with one subcommand (its usage would list that
    one alone)."""


class _OneCommandParser(Parser):
    parsing = True
    """While it reads the words; after, its refusals (the commands' checks) are Parser's."""

    def error(self, message: str) -> NoReturn:
        if self.parsing:
            raise _TopLevelError(message)
        super().error(message)


def build_parser(only: str | None = None) -> Parser:
    """The whole command line: every subcommand and its options (``only``: that subcommand's
    alone, the others left out and their modules not imported)."""
    parser = (Parser if only is None else _OneCommandParser)(
        prog="nelssa", description="Hardware-in-the-loop emulator of NELSSA (GPU-PNM serving).")
    parser.add_argument("--version", action="version", version=f"nelssa {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (module, adder) in COMMANDS.items():
        if only is None or name == only:
            getattr(importlib.import_module(module), adder)(sub)
    return parser


def _command(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names, if the words before it are the top level's flags."""
    for word in argv:
        if word in COMMANDS:
            return word
        if word not in ("-v", "--verbose"):
            return None
    return None


def parse(argv: list[str]) -> tuple[Parser, argparse.Namespace]:
    """The parser of ``argv``'s subcommand and what it read. A refusal at the top level
    (whose usage lists every subcommand) comes from the whole parser."""
    command = _command(argv)
    if command is not None:
        parser = build_parser(command)
        try:
            args = parser.parse_args(argv)
        except _TopLevelError:
            pass
        else:
            parser.parsing = False
            return parser, args
    parser = build_parser()
    return parser, parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, args = parse(argv)
    args.argv = argv  # for the processes it starts
    if args.command == "node":
        from nelssa.cli_node import check_node_args

        check_node_args(parser, args)
    elif args.command == "decode":
        from nelssa.cli_decode_args import check_decode_args

        check_decode_args(parser, args)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # what a Verilator build is building, and for how long, on stderr
        logging.getLogger(verilator_log.name).setLevel(logging.INFO)
    if args.command == "device" and args.device_command == "demo" \
            and args.selected > args.clusters:
        parser.error(f"--selected must be in 1..{args.clusters}, got {args.selected}")
    if args.command == "device" and args.device_command == "serve" and args.backend == "rtl":
        check_rtl_engines(parser, args.engines)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        if args.command not in ("crossover", "serve-sim"):
            raise
        print(f"error: {e}", file=sys.stderr)  # a bad hardware file or trace, named
        return 2
    except OSError as e:  # a disk that fills, a folder removed under us: named, no traceback
        if args.verbose:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
