"""`nelssa fpga ...`: probe a board against its bitstream manifest, write a manifest at build
time, and serve fake boards (the model device behind BAR files) to rehearse without one."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from pathlib import Path

from nelssa.emu.latency.fields import Num
from nelssa.options import add_engines, input_file, int_range, number, output_dir, output_file

log = logging.getLogger(__name__)
BYTES = number(Num("a positive integer", integer=True, lo=1, most=1 << 64))
HERTZ = number(Num("a positive integer", integer=True, lo=1, most=10 ** 12))


def cmd_fpga_probe(args: argparse.Namespace) -> int:
    """Read the identity registers (reads only) and check them and the manifest."""
    from nelssa.driver import regs
    from nelssa.driver.iface import interface_digest
    from nelssa.hw.fpga.errors import FpgaError
    from nelssa.hw.fpga.port import open_board

    try:
        port = open_board(args.bar, args.manifest)
    except FpgaError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        m, ident = port.manifest, port.identity
        caps = regs.unpack_caps(ident["CAPS"])
        print(f"board {port.files.folder}: {m.board} ({m.part}), build {m.build_id:#010x}"
              f"{', built ' + m.built if m.built else ''}")
        print(f"  interface {ident['VERSION'] >> 16}.{ident['VERSION'] & 0xFFFF}, hash "
              f"{ident['IFACE_HASH']:#010x} (software {interface_digest()[:16]}...): match")
        print(f"  {caps['engines']} engines, up to {caps['max_qheads']} query heads, head_dim "
              f"{'/'.join(map(str, caps['head_dims']))}, clusters up to "
              f"{caps['max_cluster_tokens']} tokens, {ident['MEM_SIZE'] / 2**30:g} GiB at "
              f"{m.device.clock_hz / 1e6:g} MHz")
        print(f"  memory BAR {port.files.mem.name}: {port.aperture:#x} bytes mapped; DMA "
              f"{'yes' if port.has_dma else 'no'}")
        print(f"  status {port.read_register('STATUS'):#x}, cycles {port.cycle:,}")
        print("OK")
    finally:
        port.close()
    return 0


def cmd_fpga_manifest(args: argparse.Namespace) -> int:
    """Write the manifest of a bitstream built from this tree."""
    from datetime import UTC, datetime

    from nelssa.hw.fpga import plan
    from nelssa.hw.fpga.errors import FpgaError
    from nelssa.hw.fpga.manifest import DeviceParams, Manifest, PciIds
    from nelssa.hw.model.engine import EngineParams

    ints = {}
    for flag in ("build_id", "vendor", "device"):
        try:
            ints[flag] = int(getattr(args, flag), 0)
        except ValueError:
            print(f"error: --{flag.replace('_', '-')} must be an integer (decimal or 0x...), "
                  f"got {getattr(args, flag)!r}", file=sys.stderr)
            return 2
    try:
        config, part, engines, engine, clock_hz = None, args.part, args.engines, \
            EngineParams(), args.clock_hz
        known = plan.boards()
        if args.board in known:  # a board of the hardware description: its plan
            p = plan.plan(known[args.board])
            z = p.size
            config, part = p.to_dict(), part or p.board.part
            engines = engines or z.units
            engine = EngineParams(z.head_dim, z.num_qheads, z.max_cluster_tokens)
            clock_hz = clock_hz or round(p.board.clock_mhz * 1e6)
        if part is None:
            raise FpgaError(f"--part is needed for board {args.board!r}, which is not one of "
                            f"the hardware description's ({', '.join(sorted(known))})")
        digest = None if args.bitstream is None else _file_sha256(args.bitstream)
        m = Manifest.for_this_software(
            board=args.board, part=part, build_id=ints["build_id"],
            device=DeviceParams.of(engines or 2, engine, args.mem_bytes,
                                   clock_hz or 300_000_000),
            pci=PciIds(ints["vendor"], ints["device"]),
            built=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), config=config,
            bitstream_sha256=digest)
        Manifest.from_dict(m.to_dict())  # the checks a reader will make
    except (FpgaError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    m.save(args.out)
    print(f"wrote {args.out}: {m.board} ({m.part}), build {m.build_id:#010x}, interface "
          f"{m.interface_sha256[:16]}...")
    return 0


def cmd_fpga_plan(args: argparse.Namespace) -> int:
    """The device configuration for a board and its resource table."""
    from nelssa.hw.fpga import plan

    try:
        b = plan.board(args.board)
        model = plan.load_model()
        p = plan.plan(b, model)
    except plan.PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(plan.report(p, model)))
    if args.vivado is not None:
        from nelssa.hw.fpga import vivado

        try:
            written = vivado.write(p, Path(args.vivado))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {', '.join(map(str, written))}: vivado -mode batch -source "
              f"hw/fpga/vivado/build.tcl -tclargs {args.vivado}")
    return 0


def _file_sha256(path: str) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cmd_fpga_fake(args: argparse.Namespace) -> int:
    """Serve fake boards until Ctrl-C or SIGTERM."""
    from nelssa.hw.fpga.fake import FakeBoard
    from nelssa.hw.model.device import DeviceConfig

    folder = Path(args.folder)
    made = not folder.exists()
    boards = [FakeBoard(folder / f"board{i}", DeviceConfig(engines=args.engines))
              for i in range(args.boards)]
    threads = [threading.Thread(target=b.serve_forever, name=f"fake-board{i}", daemon=True)
               for i, b in enumerate(boards)]
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    for t in threads:
        t.start()
    for b in boards:
        print(f"fake board at {b.folder} (model device, {b.config.engines} engines; "
              f"`nelssa fpga probe --bar {b.folder}`)")
    print("serving", flush=True)
    stop.wait()
    for b in boards:
        b.stop()
    for t in threads:
        t.join(timeout=5)
    for b in boards:
        b.close()
        b.remove()
    if made:
        with contextlib.suppress(OSError):  # the folder this command made, when empty
            folder.rmdir()
    print("fake boards stopped; their files removed", flush=True)
    return 0


def cmd_fpga_sources(args: argparse.Namespace) -> int:
    """The FPGA top's sources in compile order, for a vendor project."""
    from nelssa.hw.sim.rtl_sources import FPGA_TOP

    for path in FPGA_TOP:
        print(path)
    return 0


def add_board_args(p: argparse.ArgumentParser, several: bool) -> None:
    """--bar and --manifest of the commands that take --backend fpga."""
    p.add_argument("--bar", action="append" if several else "store", metavar="BOARD",
                   help="with --backend fpga: a board (PCI device folder, optionally ,H2C,C2H "
                        "DMA devices)" + ("; repeat for each" if several else ""))
    p.add_argument("--manifest", type=input_file,
                   help="with --backend fpga: the bitstream manifest (default: manifest.json "
                        "in the board folder)")


def add_fpga_parser(sub: argparse._SubParsersAction) -> None:
    fpga = sub.add_parser("fpga", help="boards: probe, manifests, fake boards")
    fsub = fpga.add_subparsers(dest="fpga_command", required=True)

    probe = fsub.add_parser("probe", help="check a board against its bitstream manifest "
                                          "(reads only)")
    probe.add_argument("--bar", required=True,
                       help="the board's PCI device folder (/sys/bus/pci/devices/DDDD:BB:DD.F) "
                            "or its resourceN file; DIR,H2C,C2H adds a DMA channel")
    probe.add_argument("--manifest", type=input_file,
                       help="the bitstream's manifest (default: DIR/manifest.json)")
    probe.set_defaults(func=cmd_fpga_probe)

    man = fsub.add_parser("manifest", help="write the manifest of a bitstream built from this "
                                           "tree")
    man.add_argument("--board", required=True,
                     help="board name; one of the hardware description's boards (`nelssa fpga "
                          "plan`) records its plan and defaults --part, --engines, --clock-hz "
                          "to it")
    man.add_argument("--part", help="FPGA part (needed for a board not in the hardware "
                                    "description)")
    man.add_argument("--build-id", required=True, help="32-bit id, also the BUILD_ID parameter")
    add_engines(man, "attention engines of the bitstream (default: the board's plan, else 2)",
                rtl=False, default=None)
    man.add_argument("--mem-bytes", type=BYTES, default=1 << 36)
    man.add_argument("--clock-hz", type=HERTZ,
                     help="core clock (default: the board's plan, else 300 MHz)")
    man.add_argument("--bitstream", type=input_file,
                     help="the bitstream file: its SHA-256 goes into the manifest")
    man.add_argument("--vendor", default="0x10ee")
    man.add_argument("--device", default="0x4e4c")
    man.add_argument("-o", "--out", required=True, type=output_file)
    man.set_defaults(func=cmd_fpga_manifest)

    pl = fsub.add_parser("plan", help="the device configuration for a board (units, channels, "
                                      "engine limits, clock) and its resource table")
    pl.add_argument("--board", required=True,
                    help="a board of the hardware description (emu/latency/hardware.json)")
    pl.add_argument("--vivado", type=output_dir, metavar="DIR",
                    help="AMD boards: write the vendor flow's inputs for this plan into DIR "
                         "(plan.tcl, sources.f, the top's wrapper; hw/fpga/vivado/build.tcl "
                         "reads them)")
    pl.set_defaults(func=cmd_fpga_plan)

    src = fsub.add_parser("sources", help="the FPGA top's SystemVerilog files in compile order "
                                          "(top module nelssa_fpga_top)")
    src.set_defaults(func=cmd_fpga_sources)

    fake = fsub.add_parser("fake", help="serve fake boards (model devices behind BAR files)")
    fake.add_argument("folder", type=output_dir,
                      help="where the boards' folders go (FOLDER/board0, ...)")
    fake.add_argument("--boards", type=int_range(1, 32), default=1, help="1..32")
    add_engines(fake, "attention engines of each fake board's model device", rtl=False)
    fake.set_defaults(func=cmd_fpga_fake)
