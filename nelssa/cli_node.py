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
from nelssa.config_args import add_config_options, config_values
from nelssa.driver.status import ENGINE_LANES
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK, GPU_PNM_LINKS
from nelssa.emu.link.tokens import default_endpoint
from nelssa.host.pnm_node.config import NodeConfig
from nelssa.hw.model.drampower import command_trace_option
from nelssa.options import (
    SECONDS,
    UsageError,
    add_datapath_args,
    add_ddr5_args,
    add_engines,
    check_rtl_engines,
    endpoint,
    input_dir,
    input_file,
    int_range,
    output_dir,
    plain_name,
)

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = default_endpoint("node")
"""Per user: ipc://$TMPDIR/nelssa-UID/node (a folder of this user alone)."""
NODE_OPTIONS = ("device_timeout_s", "max_queued", "max_sessions", "max_sessions_per_client",
                "max_client_bytes", "max_clients", "max_queue_pairs", "max_request_heads",
                "max_write_kv_bytes", "max_request_tokens", "max_client_queued_tokens",
                "probe_period_s", "split_over_units", "rtl_layers", "kv_backdoor")
"""NodeConfig fields `node up` takes as options (config_args: name, default, help)."""
LINKS = sorted(GPU_PNM_LINKS)


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


def check_bind(endpoint: str, curve_secret: str | None) -> None:
    """What binding ``endpoint`` would refuse, found before anything starts (UsageError): an
    address beyond loopback without a readable CURVE secret, a live server there, a missing
    folder, a port in use."""
    import zmq

    from nelssa.emu.launcher import EndpointError, check_bindable
    from nelssa.emu.link.security import CurveServerKeys, secure_server
    from nelssa.emu.link.tokens import AdminTokenError, prepare_endpoint

    try:
        prepare_endpoint(endpoint)
    except AdminTokenError as e:
        raise UsageError(f"--endpoint {endpoint}: {e}") from None
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    try:  # the bind's own checks of address and keys, on a socket never bound
        secure_server(sock, endpoint, CurveServerKeys(Path(curve_secret)) if curve_secret
                      else None)
    except ValueError as e:
        raise UsageError(str(e)) from None
    finally:
        sock.close(linger=0)
    try:
        check_bindable(endpoint)
    except EndpointError as e:
        raise UsageError(f"--endpoint {e}") from None


def _check_reachable(option: str, endpoints: list[str], timeout_s: float,
                     wait_s: float = 0.0) -> None:
    """Refuse (UsageError) an endpoint where nothing listens, after waiting up to ``wait_s``
    for one that is still starting."""
    import time

    from nelssa.emu.launcher import EndpointError, check_listening

    deadline = time.monotonic() + wait_s
    for ep in endpoints:
        while True:
            try:
                check_listening(ep, timeout_s)
                break
            except EndpointError as e:
                if time.monotonic() >= deadline:
                    raise UsageError(f"{option} {e}") from None
                time.sleep(0.1)


def cmd_node_up(args: argparse.Namespace) -> int:
    import zmq

    from nelssa.driver.remote import DeviceAuthError
    from nelssa.emu.launcher import DeviceProcesses
    from nelssa.emu.link.model import link_preset
    from nelssa.host.pnm_node.devices import DeviceUnreachableError
    from nelssa.host.pnm_node.node import NodeService
    from nelssa.hw.fpga.errors import FpgaError

    spec = link_preset(args.link)
    procs = None
    check_bind(args.endpoint, args.curve_secret)  # before a device is built or started
    if args.curve_clients and not any(Path(args.curve_clients).glob("*.key")):
        log.warning("%s holds no client keys (*.key): no client will be let in",
                    args.curve_clients)
    _check_reachable("--attach", args.attach or [], min(args.device_timeout_s, 2.0),
                     wait_s=args.device_timeout_s)  # devices started just before may be booting
    token_file = _device_token(args)
    if args.attach:
        endpoints = list(args.attach)
        backend = "remote"
    elif args.backend == "fpga":
        from nelssa.hw.fpga.port import board_manifest, parse_board
        from nelssa.hw.ports import board_spec

        backend = "fpga"
        endpoints = [board_spec(b) for b in args.bar]
        try:  # a board that is not there, named before anything starts
            board_manifest(parse_board(args.bar[0])[0], args.manifest)
        except FpgaError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    else:
        backend = args.backend
        if backend == "rtl":
            from nelssa.hw.sim.device import build_library

            print("building the Verilated device (cached after the first run) ...", flush=True)
            build_library(args.preset, args.engines, engine=_engine(args))
        procs = DeviceProcesses(args.devices, backend, args.engines, args.preset, args.verbose,
                                file_memory=args.device_memory == "file",
                                device_args=_device_args(args),
                                command_trace=args.command_trace)
        endpoints = procs.endpoints
        token_file = str(procs.token_file)
    twins = None
    if args.rtl_layers:  # sampled simulation: a Verilated twin beside each model device
        from nelssa.hw.sim.device import build_library

        print("building the Verilated device (cached after the first run) ...", flush=True)
        build_library(args.preset, args.engines, engine=_engine(args))
        # the twins' engines are the model devices' (their cycles are compared)
        twins = DeviceProcesses(args.devices, "rtl", args.engines, args.preset, args.verbose,
                                token_file=procs.token_file if procs else None,
                                device_args=_datapath_args(args))
    try:
        config = NodeConfig(tuple(endpoints), link=args.link, backend=backend,
                            twins=tuple(twins.endpoints) if twins else (),
                            fpga_manifest=args.manifest, device_token_file=token_file,
                            **config_values(args, NodeConfig, NODE_OPTIONS))
        try:
            service = NodeService(config, args.endpoint, _curve_server(args))
        except zmq.ZMQError as e:  # a bind that lost a race with another process
            print(f"error: --endpoint {args.endpoint}: {e}", file=sys.stderr)
            return 2
        except DeviceUnreachableError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except DeviceAuthError as e:  # an attached device refused the token presented
            print(f"error: {e} (--device-token: that device's token file)", file=sys.stderr)
            return 2
        except FpgaError as e:  # a board refused
            print(f"error: {e}", file=sys.stderr)
            return 2
        except ValueError as e:  # a refused bind, a bad key file
            print(f"error: {e}", file=sys.stderr)
            return 2
        if procs is not None:
            service.host.watch_processes(procs.dead)
        if twins is not None:
            service.host.watch_twins(twins.dead)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: service.stop())
        print(f"NELSSA node: {len(endpoints)} {backend} devices; link {spec.name} "
              f"({spec.latency_ns / 1000:g} us, {spec.bandwidth_gbps:g} Gb/s); CXL "
              f"{config.cxl}")
        for i, ep in enumerate(endpoints):
            pid = f" (pid {procs.procs[i].pid})" if procs else ""
            print(f"  device {i}: {ep}{pid}")
            if twins is not None:
                print(f"  device {i} twin (rtl, layers 0..{args.rtl_layers - 1}): "
                      f"{twins.endpoints[i]} (pid {twins.procs[i].pid})")
        service.serve(on_ready=lambda ep: print(f"listening at {ep}", flush=True),
                      shutdown_devices=procs is not None)
        print("node stopped", flush=True)
        return 0
    finally:
        for started in (procs, twins):
            if started is not None:
                started.stop()


def _device_token(args: argparse.Namespace) -> str | None:
    """The token file presented to --attach devices: --device-token, checked now; else each
    device's own, written for its endpoint on this host (a device still starting has a moment
    to write it). UsageError naming the device that has none."""
    from nelssa.emu.link.tokens import AdminTokenError, read_token, read_token_file

    try:
        if args.device_token is not None:
            read_token_file(Path(args.device_token))
        else:
            for ep in args.attach or []:
                try:
                    read_token(ep, wait_s=2.0)
                except AdminTokenError as e:
                    raise UsageError(f"--attach {ep}: {e}; give that device's token file "
                                     "(`device serve --token-file`) with --device-token "
                                     "FILE") from None
    except AdminTokenError as e:
        raise UsageError(f"--device-token {e}") from None
    return args.device_token


def _engine(args: argparse.Namespace):
    """The engines' parameters --fp-latency and --compute-lanes give."""
    from nelssa.hw.model.engine import EngineParams, FpLatency

    return EngineParams(latency=FpLatency(**dict(args.fp_latency or ())),
                        **({"compute_lanes": args.compute_lanes} if args.compute_lanes else {}))


def _device_config(args: argparse.Namespace):
    from nelssa.hw.model.device import DeviceConfig

    return DeviceConfig(engines=args.engines, preset=args.preset,
                        ddr5_overrides=tuple(args.ddr5_override or ()),
                        subchannels=args.subchannels or DeviceConfig.subchannels,
                        engine=_engine(args))


def _datapath_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The units' latencies and the engines' lanes as `device serve` options (none where they
    are the defaults)."""
    given = [f"{k}={v}" for k, v in args.fp_latency or () if v]
    lanes = _engine(args).compute_lanes
    return (*(("--fp-latency", ",".join(given)) if given else ()),
            *(("--compute-lanes", str(lanes)) if lanes != ENGINE_LANES else ()))


def _device_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The DDR5 overrides, sub-channels and units' latencies as `device serve` options."""
    out = [x for k, v in args.ddr5_override or () for x in ("--ddr5-override", f"{k}={v}")]
    if args.subchannels:
        out += ["--subchannels", str(args.subchannels)]
    return (*out, *_datapath_args(args))


def resolve_device(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--engines, --preset, --ddr5-override, --subchannels, --fp-latency and --compute-lanes: as
    given, else the device of the PNM entry (--pnm, else the --hardware files' use.pnm, else the
    default's)."""
    from nelssa.hardware_options import chosen, load_catalog
    from nelssa.hw.model.device import DeviceConfig

    try:
        pnm = chosen(load_catalog(args.hardware), "pnm", args.pnm)
    except UsageError as e:
        parser.error(str(e))
    dev = pnm.device or {}
    if args.engines is None:
        args.engines = dev.get("units", DeviceConfig.engines)
    if args.preset is None:
        args.preset = dev.get("ddr5", DeviceConfig.preset)
    if args.ddr5_override is None:
        args.ddr5_override = sorted(dev.get("ddr5_overrides", {}).items())
    if args.subchannels is None and dev.get("subchannels", 8) != 8:
        args.subchannels = dev["subchannels"]
    if args.fp_latency is None:
        args.fp_latency = tuple(sorted(dev.get("fp_latency", {}).items()))
    if args.compute_lanes is None:
        args.compute_lanes = dev.get("compute_lanes", ENGINE_LANES)
    try:
        _device_config(args)
    except ValueError as e:
        parser.error(f"the device of --pnm {pnm.name}: {e}")


def cmd_node_status(args: argparse.Namespace) -> int:
    st = _ask(args, "status")
    if st is None:
        return 1
    if args.json:
        print(json.dumps(asdict(st), indent=2))
        return 0
    print(f"NELSSA node at {args.endpoint}: version {st.version}, link {st.link}, "
          f"{st.sessions} sessions, {st.requests} requests ({st.errors} failed), "
          f"{st.bad_frames} bad frames, {st.duplicates} duplicates dropped, {st.busy} refused "
          f"busy, {st.queued} queued")
    print("  (duplicates: frames the node had already taken, sent again by a client that saw no "
          "reply in time; each is answered by replaying its reply, not run twice. bad frames: "
          "refused by a check, e.g. a checksum)")
    sm = st.sampling
    if sm.rtl_layers:
        print(f"  sampled layers 0..{sm.rtl_layers - 1} on Verilated twins: {sm.batches} "
              f"batches, {sm.descriptors} descriptors, {sm.mismatches} differing from the model; "
              f"the model's cycles {100 * sm.model_error:+.2f} % of the RTL's (worst batch "
              f"{sm.worst_ppm / 1e4:.2f} %)")
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
    if _ask(args, "shutdown") is None:
        return 1
    print(f"node at {args.endpoint} is stopping")
    return 0


def _ask(args: argparse.Namespace, what: str) -> object:
    """One request to the node at --endpoint; None (said in one line) when no answer came.
    Nothing listening there at all is a refusal (UsageError)."""
    from nelssa.emu.link.transport import RemoteError
    from nelssa.host.pnm_node.admin import AdminTokenError
    from nelssa.host.pnm_node.client import NodeClient

    _check_reachable("--endpoint", [args.endpoint], min(args.timeout, 2.0))
    try:
        curve = _curve_client(args)
    except ValueError as e:  # a key file that is not one
        raise UsageError(str(e)) from None
    with NodeClient(args.endpoint, args.link, args.timeout, curve=curve) as c:
        try:
            answer = getattr(c, what)()
        except AdminTokenError as e:  # `stop`: not this user's node, or not on this host
            raise UsageError(str(e)) from None
        except (TimeoutError, RemoteError) as e:
            print(f"error: {e}", file=sys.stderr)
            return None
    return True if answer is None else answer


def cmd_node_keygen(args: argparse.Namespace) -> int:
    from nelssa.emu.link.security import make_keys

    for suffix in (".key", ".key_secret"):
        if (Path(args.folder) / f"{args.name}{suffix}").exists():
            raise UsageError(f"{Path(args.folder) / args.name}{suffix} already exists (keys "
                             "are not overwritten: choose another --name or folder)")
    public, secret = make_keys(Path(args.folder), args.name)
    print(f"public key (give it to clients): {public}")
    print(f"secret key (keep it on the node): {secret}")
    return 0


def add_node_parser(sub: argparse._SubParsersAction) -> None:
    # here, not at the top: `device serve` imports this module (check_bind) and needs not the
    # hardware description's pydantic
    from nelssa.hardware_options import add_entry_arg, add_hardware_file_arg

    node = sub.add_parser("node", help="a PNM node: NelssaHost and its devices")
    node_sub = node.add_subparsers(dest="node_command", required=True)

    up = node_sub.add_parser("up", help="start a node and its device processes; Ctrl-C stops")
    up.add_argument("--devices", type=int_range(1, 32), default=4,
                    help="device processes to start (1..32)")
    up.add_argument("--backend", choices=("model", "rtl", "fpga"), default="model")
    add_board_args(up, several=True)
    add_hardware_file_arg(up)
    add_entry_arg(up, "pnm", "; its device sets what --engines, --preset, --ddr5-override, "
                  "--subchannels and --fp-latency do not")
    add_engines(up, default=None)
    add_ddr5_args(up, None)
    add_datapath_args(up)
    up.add_argument("--link", default=DEFAULT_GPU_PNM_LINK, choices=LINKS,
                    help="link preset toward the GPU node")
    up.add_argument("--endpoint", type=endpoint, default=DEFAULT_ENDPOINT,
                    help="where to listen (ipc://PATH, tcp://127.0.0.1:PORT; other addresses "
                         "need --curve-secret)")
    up.add_argument("--attach", action="append", metavar="ENDPOINT", type=endpoint,
                    help="use a running device (`nelssa device serve`) instead of starting one; "
                         "repeat for each")
    up.add_argument("--device-token", metavar="FILE", type=input_file,
                    help="--attach: the token file the devices take calls with (`device serve "
                         "--token-file`; mode 0600) [default: each device's own, which a "
                         "device of this user on this host writes for its endpoint]")
    add_config_options(up, NodeConfig, NODE_OPTIONS)
    up.add_argument("--command-trace", type=command_trace_option, metavar="FILE",
                    help="model devices the node starts write their DDR5 commands when they "
                         "stop, each to FILE's stem + -dev<N> (DRAMPower CSV per sub-channel, "
                         "and the memspec)")
    up.add_argument("--device-memory", choices=("ram", "file"), default="ram",
                    help="where model devices hold their memory: RAM, or a sparse file each "
                         "in the node's temporary folder (removed at exit; for KV beyond the "
                         "host's memory) [default: %(default)s]")
    up.add_argument("--curve-secret", type=input_file,
                    help="the node's CURVE secret key file (.key_secret)")
    up.add_argument("--curve-clients", type=input_dir,
                    help="folder of accepted client public keys")
    up.set_defaults(func=cmd_node_up)

    for name, func, text in (("status", cmd_node_status, "devices, memory, queues, counters"),
                             ("stop", cmd_node_stop, "ask a node to stop")):
        p = node_sub.add_parser(name, help=text)
        p.add_argument("--endpoint", type=endpoint, default=DEFAULT_ENDPOINT)
        p.add_argument("--link", default=DEFAULT_GPU_PNM_LINK, choices=LINKS)
        p.add_argument("--timeout", type=SECONDS, default=10.0, help="seconds to wait")
        p.add_argument("--curve-server-key", type=input_file,
                       help="the node's public key file (.key)")
        p.add_argument("--curve-secret", type=input_file,
                       help="this client's secret key file, if the node restricts clients")
        if name == "status":
            p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)

    keygen = node_sub.add_parser("keygen", help="make a CURVE key pair")
    keygen.add_argument("folder", type=output_dir)
    keygen.add_argument("--name", type=plain_name, default="node")
    keygen.set_defaults(func=cmd_node_keygen)


def check_node_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.command == "node" and args.node_command == "up":
        resolve_device(parser, args)
        if args.backend == "rtl" and (args.ddr5_override or (args.subchannels or 8) != 8):
            parser.error("--ddr5-override and --subchannels: the rtl device takes a preset and "
                         "has 8 sub-channels (--backend model)")
        if args.device_token and not args.attach:
            parser.error("--device-token goes with --attach (the devices a node starts get a "
                         "token of its own)")
        if args.attach and len(args.attach) > 32:
            parser.error(f"--attach given {len(args.attach)} times; a node has at most 32")
        if args.curve_clients and not args.curve_secret:
            parser.error("--curve-clients needs --curve-secret")
        if args.backend == "rtl" and not args.attach:
            check_rtl_engines(parser, args.engines)
        if args.rtl_layers and (args.backend != "model" or args.attach):
            parser.error(f"--rtl-layers {args.rtl_layers}: sampling runs the other layers on "
                         "model devices the node starts (--backend model, no --attach)")
        if args.rtl_layers:
            check_rtl_engines(parser, args.engines)
        if args.command_trace and (args.backend != "model" or args.attach):
            parser.error("--command-trace: model devices the node starts (--backend model, no "
                         "--attach)")
        if args.device_memory == "file" and (args.backend != "model" or args.attach):
            parser.error("--device-memory file: model devices the node starts (--backend "
                         "model, no --attach)")
        if args.backend == "fpga" and not args.attach and not args.bar:
            parser.error("--backend fpga needs --bar BOARD for each board (a PCI device "
                         "folder, or a fake board from `nelssa fpga fake`)")
