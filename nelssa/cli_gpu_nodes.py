"""`nelssa decode --gpu-nodes K`: K GPU decode nodes, each a `nelssa decode` process of its own
(its own engine and batch, the same shape), against one PNM node, in one clock domain
(host/pnm_node/domains.py): their ATTENDs queue on the node's devices in emulated time.

This process boots the node (or uses --node), opens the domain and hands its ticket to each
child on its standard input (never on a command line others may read); then prints each node's
step table and, step by step, each node's wait for the PNM node and step time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nelssa.options import UsageError

CHILD = "import sys; from nelssa.cli import main; sys.exit(main())"


def child_argv(argv: list[str], endpoint: str, i: int, folder: Path, args: argparse.Namespace
               ) -> list[str]:
    """The decode command line of node ``i``: the caller's, one node joining the domain
    (argparse keeps the last of an option given twice)."""
    stem = Path(args.trace)
    return [sys.executable, "-c", CHILD, *argv, "--gpu-nodes", "1", "--node", endpoint,
            "--domain-ticket", "-", "--rtl-layers", "0", "--device-memory", "ram",
            "--trace", str(stem.with_name(f"{stem.stem}.node{i}{stem.suffix}")),
            "--plot", str(Path(args.plot).with_name(f"{Path(args.plot).stem}.node{i}.png")),
            "--steps-json", str(folder / f"steps{i}.json")]


def run_nodes(argv: list[str], endpoint: str, ticket: bytes, k: int, folder: Path,
              args: argparse.Namespace) -> tuple[list[int], list[str], list[list[dict[str, Any]]]]:
    """Run the K decode processes to the end: their exit codes, outputs and steps."""
    procs = []
    for i in range(k):
        out = (folder / f"out{i}.txt").open("w")
        proc = subprocess.Popen(child_argv(argv, endpoint, i, folder, args),
                                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                                text=True)
        assert proc.stdin is not None
        proc.stdin.write(ticket.hex() + "\n")
        proc.stdin.close()
        procs.append((proc, out))
    codes = []
    for proc, out in procs:
        codes.append(proc.wait())
        out.close()
    outputs = [(folder / f"out{i}.txt").read_text() for i in range(k)]
    steps = [json.loads(p.read_text()) if (p := folder / f"steps{i}.json").exists() else []
             for i in range(k)]
    return codes, outputs, steps


def run_gpu_nodes(args: argparse.Namespace) -> int:
    from nelssa.cli_decode import node_spec
    from nelssa.decode_hardware import gpu_pnm_link
    from nelssa.emu.launcher import EndpointError, NodeLauncher, check_listening, private_folder
    from nelssa.emu.link.transport import LinkTimeoutError, RemoteError
    from nelssa.host.pnm_node.client import NodeClient

    k = args.gpu_nodes
    _, _, pnm, link = gpu_pnm_link(args)
    args.link = link
    devices = len(args.bar) if args.backend == "fpga" and args.bar else args.devices
    spec = node_spec(args, pnm, devices)
    folder = private_folder("nelssa-gpu-nodes-")
    launcher = None
    try:
        if args.node is None:
            print(f"booting a node: {devices} {args.backend} devices, link {link}, for {k} GPU "
                  "decode nodes ...", flush=True)
            launcher = NodeLauncher(f"ipc://{folder}/node", devices, args.backend, link,
                                    spec.ready_timeout_s, extra=spec.node_args)
            endpoint = launcher.endpoint
        else:
            try:
                check_listening(args.node, min(args.timeout, 2.0))
            except EndpointError as e:
                raise UsageError(f"--node {e}") from None
            endpoint = args.node
        try:
            with NodeClient(endpoint, link, timeout_s=args.timeout) as owner:
                ticket = owner.domain_open(k)
        except (LinkTimeoutError, RemoteError) as e:
            print(f"error: opening a clock domain on the node at {endpoint}: {e}", flush=True)
            return 1
        t0 = time.perf_counter()
        codes, outputs, steps = run_nodes(args.argv, endpoint, ticket, k, folder, args)
        wall = time.perf_counter() - t0
    finally:
        if launcher is not None:
            launcher.stop()
        shutil.rmtree(folder, ignore_errors=True)
    for i, (code, text) in enumerate(zip(codes, outputs, strict=True)):
        print(f"\n=== GPU decode node {i} (exit {code}) ===\n{text.rstrip()}")
    print_summary(steps, wall)
    if args.steps_json:
        Path(args.steps_json).write_text(json.dumps(steps))
    return max(codes)


def print_summary(steps: list[list[dict[str, Any]]], wall: float) -> None:
    """Per step: each node's wait for the PNM node and step time, and their means."""
    k = len(steps)
    n = max((len(s) for s in steps), default=0)
    print(f"\n{k} GPU decode nodes sharing one PNM node's devices (one clock domain), "
          f"{wall:.1f} s wall; emulated us per step, wait for the node / step time:")
    print(f"{'step':>4} " + " ".join(f"{'node ' + str(i):>17}" for i in range(k))
          + f" {'mean':>17}")
    for j in range(n):
        row = [s[j] for s in steps if j < len(s)]
        cells = [f"{r['wait_ps'] * 1e-6:>7.1f} / {r['step_ps'] * 1e-6:>7.1f}" for r in row]
        wait = sum(r["wait_ps"] for r in row) / len(row) * 1e-6
        step = sum(r["step_ps"] for r in row) / len(row) * 1e-6
        print(f"{j + 1:>4} " + " ".join(f"{c:>17}" for c in cells)
              + f" {wait:>7.1f} / {step:>7.1f}")
