"""Link faults end to end (issue 20): decode steps over a PNM node with frames dropped,
duplicated, corrupted and held back (reordered) on the RoCE link (GPU node <-> PNM node) and on
every CXL link (PNM host <-> device), against the same run without faults. The outputs (every
attention result the node returned, and every generated token) must be bit-identical, and every
damaged frame must have been refused by a check at the end that received it.

    python scripts/link_faults.py --steps 1000 --write docs/results/link_faults.md

Every part is a real process on real ZeroMQ sockets: each device is ``link_faults.py device``
(serve_port over a model device; prints its link counters when it stops), the node is
``link_faults.py node`` (NodeService attached to those devices, the CXL faults injected at the
node's end of each device link, both directions), and the GPU node is this process
(a co-simulation session, ``nelssa/cosim.py``, the RoCE faults injected at its end of the
link, both directions).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nelssa.experiments.pages import render
from nelssa.provenance import commit_label

log = logging.getLogger("link_faults")
COUNTERS = "COUNTERS "
"""Prefix of the line a device or node process prints its link counters on when it stops."""


def _faults(rate: float, seed: int, delay_ns: float = 0.0):
    from nelssa.emu.link.model import LinkFaults

    return LinkFaults(drop=rate, duplicate=rate, corrupt=rate, late=rate, late_ms=2.0,
                      delay_ns=delay_ns, seed=seed)


# -- the processes ---------------------------------------------------------------------------------
def cmd_device(args: argparse.Namespace) -> int:
    from nelssa.driver.remote_server import serve_port
    from nelssa.hw.model.device import DeviceConfig, ModelDevice

    counters = serve_port(ModelDevice(DeviceConfig()), args.endpoint, parent_pid=args.parent_pid)
    print(COUNTERS + json.dumps(counters), flush=True)
    return 0


def cmd_node(args: argparse.Namespace) -> int:
    from nelssa.emu.link.model import LinkFaults
    from nelssa.host.pnm_node.config import NodeConfig
    from nelssa.host.pnm_node.node import NodeService
    from nelssa.host.pnm_node.protocol import NodeOp

    service = NodeService(NodeConfig(tuple(args.attach), backend="model"), args.endpoint)
    slots = service.host.slots
    cxl = [LinkFaults(**json.loads(args.cxl_faults), seed=i) if args.cxl_faults else None
           for i in range(len(slots))]

    def set_faults(on: bool) -> None:  # on each slot's own thread, which owns its socket
        for slot, f in zip(slots, cxl, strict=True):
            slot.submit(lambda s, f=f: s.remote.link.set_faults(f if on else None)).result()

    set_faults(True)
    served = service.server.handler

    def handler(request):  # the faults stop before the devices are asked to, so every frame
        if request.op == NodeOp.SHUTDOWN:  # sent with them reaches its device
            set_faults(False)
        return served(request)

    service.server.handler = handler
    counters = {}

    def ready(ep: str) -> None:
        print(f"listening at {ep}", flush=True)

    try:
        service.serve(on_ready=ready, shutdown_devices=True)
    finally:
        counters = {"roce": service.server.counters(),
                    "cxl": [s.remote.link.counters() for s in slots]}
        print(COUNTERS + json.dumps(counters), flush=True)
    return 0


@dataclass
class Stack:
    """Device processes and a node attached to them; ``cxl_rate`` of CXL faults injected."""

    devices: int
    cxl_rate: float

    def __post_init__(self) -> None:
        from nelssa.emu.launcher import check_listening

        self.folder = Path(tempfile.mkdtemp(prefix="nelssa-faults-"))
        self.endpoint = f"ipc://{self.folder}/node"
        me = [sys.executable, "-m", "nelssa.experiments.link_faults"]
        eps = [f"ipc://{self.folder}/device-{i}" for i in range(self.devices)]
        self.procs = [subprocess.Popen([*me, "device", "--endpoint", ep, "--parent-pid",
                                        str(os.getpid())], stdout=subprocess.PIPE, text=True)
                      for ep in eps]
        deadline = time.monotonic() + 60
        for ep in eps:
            while True:
                try:
                    check_listening(ep, 1.0)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        faults = []
        if self.cxl_rate:
            f = _faults(self.cxl_rate, 0)
            faults = ["--cxl-faults", json.dumps({k: v for k, v in asdict(f).items()
                                                  if k != "seed"})]
        node = [*me, "node", "--endpoint", self.endpoint, *faults]
        for ep in eps:
            node += ["--attach", ep]
        self.node = subprocess.Popen(node, stdout=subprocess.PIPE, text=True)
        assert self.node.stdout is not None
        for line in self.node.stdout:
            if line.startswith("listening at"):
                break
        else:
            raise RuntimeError(f"the node did not come up (exit {self.node.wait()})")

    @staticmethod
    def _counters(proc: subprocess.Popen[str]) -> dict:
        out, _ = proc.communicate(timeout=60)
        for line in out.splitlines():
            if line.startswith(COUNTERS):
                return json.loads(line[len(COUNTERS):])
        raise RuntimeError(f"process {proc.pid} (exit {proc.returncode}) printed no counters")

    def finish(self) -> dict:
        """Stop the node (it stops its devices); the counters of every process."""
        from nelssa.host.pnm_node.client import NodeClient

        try:
            with NodeClient(self.endpoint, timeout_s=60) as c:
                c.shutdown()
            node = self._counters(self.node)
            return {"roce": node["roce"], "cxl": node["cxl"],
                    "devices": [self._counters(p) for p in self.procs]}
        finally:
            for p in [self.node, *self.procs]:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            shutil.rmtree(self.folder, ignore_errors=True)


# -- the GPU node ----------------------------------------------------------------------------------
def _digest_client(endpoint: str, roce_rate: float, digest: hashlib._Hash):
    """A NodeClient with RoCE faults on it and its queue pairs, hashing every attention result
    it hands out, in the order it hands them out."""
    from nelssa.host.pnm_node.client import NodeClient

    class Hashed:
        def __init__(self, future) -> None:
            self._f, self._seen = future, False

        def done(self) -> bool:
            return self._f.done()

        def result(self):
            r = self._f.result()
            if not self._seen:
                self._seen = True
                for h in sorted(r.o):
                    digest.update(r.o[h].tobytes() + r.lse[h].tobytes())
            return r

    seeds = iter(range(100, 10_000))

    class DigestClient(NodeClient):
        def __init__(self, *a, **k) -> None:
            super().__init__(*a, **k)
            self.pairs: list[NodeClient] = []
            if roce_rate:
                self.link.set_faults(_faults(roce_rate, next(seeds), delay_ns=500.0))

        def queue_pair(self) -> NodeClient:
            qp = super().queue_pair()
            if roce_rate:
                qp.link.set_faults(_faults(roce_rate, next(seeds), delay_ns=500.0))
            self.pairs.append(qp)
            return qp

        def attend_async(self, *a, **k):
            return Hashed(super().attend_async(*a, **k))

    return DigestClient(endpoint, timeout_s=300)


def decode_run(steps: int, devices: int, roce_rate: float, cxl_rate: float) -> dict:
    """``steps`` decode steps of four requests (two on the PNM tier) over a fresh node; its
    outputs' digest and the link counters of every end."""
    import torch

    from nelssa.cosim import CosimSession, NodeSpec
    from nelssa.host.gpu.config import LlamaConfig
    from nelssa.host.gpu.engine import DecodeConfig
    from nelssa.host.gpu.model import Llama, random_weights

    small = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=64, max_position_embeddings=4096)
    stack = Stack(devices, cxl_rate)
    digest = hashlib.sha256()
    t0 = time.monotonic()
    clients: list = []

    def connect(endpoint: str):
        clients.append(_digest_client(endpoint, roce_rate, digest))
        return clients[0]

    try:
        cfg = DecodeConfig(t_input=300, selection=0.04, chunk=8, recent=16, sink=4,
                           check_accuracy=False)
        g = torch.Generator().manual_seed(2)
        prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (40, 90, 400, 520)]
        with CosimSession(Llama(small, random_weights(small, 1)), cfg,
                          NodeSpec(devices, endpoint=stack.endpoint), client=connect) as session:
            dec = session.engine
            node_requests = sum(rep.node_requests
                                for rep in session.run(prompts, steps + 1, steps))
            tiers = [r.tier for r in dec.requests]
            status = [r.status for r in dec.requests]
            for r in dec.requests:
                digest.update(json.dumps(r.generated).encode())
            roce = []
            client = clients[0]
            for c in [client, *client.pairs]:  # the faults stop; what they held back goes out
                c.link.set_faults(None)
                c.link.drain(0.05)
                roce.append(c.link.counters())
    except BaseException:
        stack.finish()
        raise
    wall = time.monotonic() - t0
    ends = stack.finish()
    return {"steps": steps, "node_requests": node_requests, "tiers": tiers, "status": status,
            "digest": digest.hexdigest(), "wall_s": round(wall, 1), "gpu": roce, **ends}


def check(faulty: dict, clean: dict) -> list[str]:
    """What is wrong with a faulty run against the clean one (nothing: an empty list)."""
    bad = []
    if faulty["digest"] != clean["digest"]:
        bad.append("outputs differ from the run without faults")
    if set(faulty["status"]) != {"done"} or faulty["tiers"].count("pnm") != 2:
        bad.append(f"requests: {faulty['status']}, tiers {faulty['tiers']}")
    s = _sums(faulty)
    for way, injected, refused in (
            ("RoCE GPU->node", "roce_up_corrupted", "roce_up_refused"),
            ("RoCE node->GPU", "roce_down_corrupted", "roce_down_refused"),
            ("CXL host->device", "cxl_down_corrupted", "cxl_down_refused"),
            ("CXL device->host", "cxl_up_corrupted", "cxl_up_refused")):
        if s[injected] != s[refused]:
            bad.append(f"{way}: {s[injected]} frames corrupted, {s[refused]} refused")
    return bad


def _sums(run: dict) -> dict[str, int]:
    gpu, cxl = run["gpu"], run["cxl"]

    def total(ends: list[dict], key: str) -> int:
        return sum(e[key] for e in ends)

    out = {"roce_up_corrupted": total(gpu, "out_corrupted"),
           "roce_up_refused": run["roce"]["frames_bad"],
           "roce_down_corrupted": total(gpu, "in_corrupted"),
           "roce_down_refused": total(gpu, "frames_bad"),
           "cxl_down_corrupted": total(cxl, "out_corrupted"),
           "cxl_down_refused": total(run["devices"], "frames_bad"),
           "cxl_up_corrupted": total(cxl, "in_corrupted"),
           "cxl_up_refused": total(cxl, "frames_bad")}
    for name in ("dropped", "duplicated", "delayed"):
        out[f"roce_{name}"] = total(gpu, f"out_{name}") + total(gpu, f"in_{name}")
        out[f"cxl_{name}"] = total(cxl, f"out_{name}") + total(cxl, f"in_{name}")
    out["roce_retransmits"] = total(gpu, "retransmits")
    out["cxl_retransmits"] = total(cxl, "retransmits")
    out["roce_replays"] = run["roce"]["replays"]
    out["cxl_replays"] = total(run["devices"], "replays")
    out["roce_frames"] = run["roce"]["frames_in"]
    out["cxl_frames"] = total(run["devices"], "frames_in")
    return out


def report(faulty: dict, clean: dict, command: str, roce_rate: float, cxl_rate: float) -> str:
    """The page (templates/link_faults.md filled with the two runs' counters)."""
    s = _sums(faulty)
    return render(
        "link_faults.md", "page", command=command, commit=commit_label(), steps=faulty["steps"],
        node_requests=faulty["node_requests"], devices=len(faulty["devices"]),
        roce_rate=f"{roce_rate:g}", cxl_rate=f"{cxl_rate:g}",
        **{k: f"{v:,}" for k, v in s.items()},
        faulty_digest=faulty["digest"][:16], clean_digest=clean["digest"][:16],
        outputs="identical" if not check(faulty, clean) else "DIFFERENT",
        status=", ".join(faulty["status"]), faulty_wall_s=f"{faulty['wall_s']:g}",
        clean_wall_s=f"{clean['wall_s']:g}",
        clean_roce_retransmits=f"{sum(e['retransmits'] for e in clean['gpu']):,}",
        clean_cxl_retransmits=f"{sum(e['retransmits'] for e in clean['cxl']):,}",
        clean_roce_replays=f"{clean['roce']['replays']:,}",
        clean_cxl_replays=f"{sum(e['replays'] for e in clean['devices']):,}")


def cmd_run(args: argparse.Namespace) -> int:
    faulty = decode_run(args.steps, args.devices, args.roce_rate, args.cxl_rate)
    clean = decode_run(args.steps, args.devices, 0.0, 0.0)
    problems = check(faulty, clean)
    command = "python scripts/link_faults.py " + " ".join(args.argv)
    text = report(faulty, clean, command.strip(), args.roce_rate, args.cxl_rate)
    print(text)
    if args.json:
        print(json.dumps({"faulty": faulty, "clean": clean, "sums": _sums(faulty),
                          "problems": problems}))
    if args.write:
        Path(args.write).write_text(text)
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    from nelssa.options import PID, POSITIVE_INT, PROBABILITY, Parser, int_range

    parser = Parser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    dev = sub.add_parser("device", help="(internal) serve a model device")
    dev.add_argument("--endpoint", required=True)
    dev.add_argument("--parent-pid", type=PID)
    node = sub.add_parser("node", help="(internal) a node attached to devices")
    node.add_argument("--endpoint", required=True)
    node.add_argument("--attach", action="append", required=True)
    node.add_argument("--cxl-faults", help="LinkFaults fields as JSON, for every CXL link")
    parser.add_argument("--steps", type=POSITIVE_INT, default=1000, help="decode steps (>= 1)")
    parser.add_argument("--devices", type=int_range(1, 32), default=2,
                        help="model devices (1..32)")
    parser.add_argument("--roce-rate", type=PROBABILITY, default=0.02,
                        help="probability of each fault kind per RoCE frame")
    parser.add_argument("--cxl-rate", type=PROBABILITY, default=0.005,
                        help="probability of each fault kind per CXL frame")
    parser.add_argument("--write", help="write the table (markdown) here")
    parser.add_argument("--json", action="store_true", help="also print every counter")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv  # for the page's command line
    logging.basicConfig(level=logging.ERROR)
    if args.cmd == "device":
        return cmd_device(args)
    if args.cmd == "node":
        return cmd_node(args)
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
