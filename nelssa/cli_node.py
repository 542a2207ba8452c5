"""`nelssa node ...`: boot a PNM node (NelssaHost and its device processes), query it, stop
it, and make CURVE keys for nodes reachable from other hosts."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from dataclasses import asdict
from pathlib import Path

from nelssa.cli_fpga import add_board_args
from nelssa.emu.link.model import PRESETS

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "ipc:///tmp/nelssa-node"
LINKS = sorted(p for p in PRESETS if p.startswith("roce-"))


def _curve_server(args: argparse.Namespace):
    from nelssa.emu.link.security import CurveServerKeys

    if not args.curve_secret:
        return None
    return CurveServerKeys(Path(args.curve_secret),
                           Path(args.curve_clients) if args.curve_clients else None)


def _curve_client(args: argparse.Namespace):
    from nelssa.emu.link.security import CurveClientKeys

    if not args.curve_server_key:
        return None
    return CurveClientKeys(Path(args.curve_server_key),
                           Path(args.curve_secret) if args.curve_secret else None)


def cmd_node_up(args: argparse.Namespace) -> int:
    from nelssa.emu.launcher import DeviceProcesses
    from nelssa.emu.link.model import link_preset
    from nelssa.host.pnm_node.devices import DeviceUnreachableError
    from nelssa.host.pnm_node.host import NodeConfig
    from nelssa.host.pnm_node.node import NodeService
    from nelssa.hw.fpga.errors import FpgaError

    spec = link_preset(args.link)
    procs = None
    clock_mhz = 800.0
    if args.attach:
        endpoints = list(args.attach)
        backend = "remote"
    elif args.backend == "fpga":
        from nelssa.host.pnm_node.devices import FPGA_PREFIX
        from nelssa.hw.fpga.port import board_manifest, parse_board

        if not args.bar:
            print("error: --backend fpga needs --bar BOARD for each board (a PCI device "
                  "folder, or a fake board from `nelssa fpga fake`)", file=sys.stderr)
            return 2
        backend = "fpga"
        endpoints = [FPGA_PREFIX + b for b in args.bar]
        try:  # the device clock, for emulated time
            first, _ = parse_board(args.bar[0])
            clock_mhz = board_manifest(first, args.manifest).device.clock_hz / 1e6
        except FpgaError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    else:
        backend = args.backend
        if backend == "rtl":
            from nelssa.hw.sim.device import build_library

            print("building the Verilated device (cached after the first run) ...", flush=True)
            build_library(args.preset, args.engines)
        procs = DeviceProcesses(args.devices, backend, args.engines, args.preset, args.verbose)
        endpoints = procs.endpoints
    config = NodeConfig(tuple(endpoints), link=args.link, backend=backend,
                        device_timeout_s=args.device_timeout, core_clock_mhz=clock_mhz,
                        fpga_manifest=args.manifest)
    try:
        try:
            service = NodeService(config, args.endpoint, _curve_server(args))
        except DeviceUnreachableError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except FpgaError as e:  # a board refused
            print(f"error: {e}", file=sys.stderr)
            return 2
        except ValueError as e:  # a refused bind, a bad key file
            print(f"error: {e}", file=sys.stderr)
            return 2
        if procs is not None:
            service.host.watch_processes(procs.dead)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: service.stop())
        print(f"NELSSA node: {len(endpoints)} {backend} devices; link {spec.name} "
              f"({spec.latency_ns / 1000:g} us, {spec.bandwidth_gbps:g} Gb/s); CXL "
              f"{config.cxl}")
        for i, ep in enumerate(endpoints):
            pid = f" (pid {procs.procs[i].pid})" if procs else ""
            print(f"  device {i}: {ep}{pid}")
        service.serve(on_ready=lambda ep: print(f"listening at {ep}", flush=True),
                      shutdown_devices=procs is not None)
        print("node stopped", flush=True)
        return 0
    finally:
        if procs is not None:
            procs.stop()


def cmd_node_status(args: argparse.Namespace) -> int:
    from nelssa.host.pnm_node.client import NodeClient

    with NodeClient(args.endpoint, args.link, args.timeout, curve=_curve_client(args)) as c:
        try:
            st = c.status()
        except TimeoutError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps(asdict(st), indent=2))
        return 0
    print(f"NELSSA node at {args.endpoint}: version {st.version}, link {st.link}, "
          f"{st.sessions} sessions, {st.requests} requests ({st.errors} failed), "
          f"{st.bad_frames} bad frames, {st.duplicates} duplicates dropped")
    print(f"  {'dev':>3} {'state':<6} {'backend':<7} {'used':>10} {'of':>8} {'regions':>7} "
          f"{'queued':>6} {'descs':>7} {'cycles':>12}  endpoint")
    for d in st.devices:
        print(f"  {d.index:>3} {'up' if d.alive else 'DOWN':<6} {d.backend:<7} "
              f"{d.used_bytes / 2**20:>8.1f}Mi {d.mem_bytes / 2**30:>6.0f}Gi {d.regions:>7} "
              f"{d.queue_depth:>6} {d.descriptors:>7} {d.cycles:>12,}  {d.endpoint}")
        if not d.alive:
            print(f"      {d.error}")
    return 0


def cmd_node_stop(args: argparse.Namespace) -> int:
    from nelssa.host.pnm_node.client import NodeClient

    with NodeClient(args.endpoint, args.link, args.timeout, curve=_curve_client(args)) as c:
        c.shutdown()
    print(f"node at {args.endpoint} is stopping")
    return 0


def cmd_node_keygen(args: argparse.Namespace) -> int:
    from nelssa.emu.link.security import make_keys

    public, secret = make_keys(Path(args.folder), args.name)
    print(f"public key (give it to clients): {public}")
    print(f"secret key (keep it on the node): {secret}")
    return 0


def add_node_parser(sub: argparse._SubParsersAction) -> None:
    node = sub.add_parser("node", help="a PNM node: NelssaHost and its devices")
    node_sub = node.add_subparsers(dest="node_command", required=True)

    up = node_sub.add_parser("up", help="start a node and its device processes; Ctrl-C stops")
    up.add_argument("--devices", type=int, default=4, help="device processes to start (1..32)")
    up.add_argument("--backend", choices=("model", "rtl", "fpga"), default="model")
    add_board_args(up, several=True)
    up.add_argument("--engines", type=int, default=2, help="attention engines per device")
    up.add_argument("--preset", default="ddr5-6400", help="DDR5 timing preset")
    up.add_argument("--link", default="roce-400g", choices=LINKS,
                    help="link preset toward the GPU node")
    up.add_argument("--endpoint", default=DEFAULT_ENDPOINT,
                    help="where to listen (ipc://PATH, tcp://127.0.0.1:PORT; other addresses "
                         "need --curve-secret)")
    up.add_argument("--attach", action="append", metavar="ENDPOINT",
                    help="use a running device (`nelssa device serve`) instead of starting one; "
                         "repeat for each")
    up.add_argument("--device-timeout", type=float, default=30.0,
                    help="seconds without an answer before a device is marked down")
    up.add_argument("--curve-secret", help="the node's CURVE secret key file (.key_secret)")
    up.add_argument("--curve-clients", help="folder of accepted client public keys")
    up.set_defaults(func=cmd_node_up)

    for name, func, text in (("status", cmd_node_status, "devices, memory, queues, counters"),
                             ("stop", cmd_node_stop, "ask a node to stop")):
        p = node_sub.add_parser(name, help=text)
        p.add_argument("--endpoint", default=DEFAULT_ENDPOINT)
        p.add_argument("--link", default="roce-400g", choices=LINKS)
        p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")
        p.add_argument("--curve-server-key", help="the node's public key file (.key)")
        p.add_argument("--curve-secret", help="this client's secret key file, if the node "
                                              "restricts clients")
        if name == "status":
            p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)

    keygen = node_sub.add_parser("keygen", help="make a CURVE key pair")
    keygen.add_argument("folder")
    keygen.add_argument("--name", default="node")
    keygen.set_defaults(func=cmd_node_keygen)


def check_node_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.command == "node" and args.node_command == "up":
        if not 1 <= args.devices <= 32:
            parser.error(f"--devices must be in 1..32, got {args.devices}")
        if args.attach and len(args.attach) > 32:
            parser.error(f"--attach given {len(args.attach)} times; a node has at most 32")
        if args.device_timeout <= 0:
            parser.error(f"--device-timeout must be > 0, got {args.device_timeout}")
        if args.curve_clients and not args.curve_secret:
            parser.error("--curve-clients needs --curve-secret")
