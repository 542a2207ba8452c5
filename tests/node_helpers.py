"""Start `nelssa node up` as a real process for tests, and the data and reference results they
compare against."""

from __future__ import annotations

import os
import re
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nelssa.emu.launcher import NodeLauncher
from nelssa.hw.model.fp import f32_to_bf16_bits

HEAD_DIM = 128
GROUP = 4


class NodeProcess(NodeLauncher):
    """A node started with `nelssa node up`, its device pids read from what it prints."""

    def __init__(self, endpoint: str, devices: int, backend: str = "model",
                 device_timeout: float = 30.0, ready_timeout: float = 300.0,
                 extra: list[str] | None = None) -> None:
        super().__init__(endpoint, devices, backend, "roce-400g", ready_timeout,
                         extra=["--device-timeout", str(device_timeout), *(extra or [])])
        self.device_pids = [int(m.group(1)) for line in self.lines
                            if (m := re.search(r"device \d+: .* \(pid (\d+)\)", line))]

    def output(self) -> str:
        """Everything printed so far."""
        time.sleep(0.2)  # let the reader catch up with the last lines
        return "\n".join(self.lines)

    def interrupt(self, timeout: float = 60.0) -> int:
        """Ctrl-C; the exit status."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        for pid in self.device_pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGCONT)
        self.stop()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


@dataclass
class HeadData:
    keys: list[np.ndarray]
    values: list[np.ndarray]
    q: np.ndarray
    ids: list[int]


@dataclass
class Workload:
    """Clustered KV for some KV heads of one layer, a query per head and its selection."""

    heads: dict[int, HeadData] = field(default_factory=dict)

    @classmethod
    def make(cls, seed: int, kv_heads: list[int], clusters: int = 24,
             selected: int = 8) -> Workload:
        rng = np.random.default_rng(seed)
        w = cls()
        for h in kv_heads:
            tokens = rng.integers(4, 25, clusters)
            w.heads[h] = HeadData(
                [bf16(rng, (int(t), HEAD_DIM)) for t in tokens],
                [bf16(rng, (int(t), HEAD_DIM)) for t in tokens],
                bf16(rng, (GROUP, HEAD_DIM)),
                sorted(rng.choice(clusters, selected, replace=False).tolist()))
        return w

    @property
    def max_tokens(self) -> int:
        return max(sum(k.shape[0] for k in d.keys) for d in self.heads.values())

    @property
    def max_clusters(self) -> int:
        return max(len(d.keys) for d in self.heads.values())


def single_device_reference(w: Workload, devices: int = 1
                            ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """(O, LSE) per KV head from in-process model devices through the driver, as a head-wise
    node of ``devices`` computes them: KV head h on device h mod ``devices``, each device's
    heads cut over its units (driver/split.py) and the parts merged by LSE."""
    from nelssa.driver.command import AttnRequest, CommandQueue
    from nelssa.driver.device import Device
    from nelssa.driver.memory import MemoryApi
    from nelssa.host.pnm_node.aggregate import attend_split
    from nelssa.hw.model.device import ModelDevice

    out = {}
    for index in range(devices):
        dev = Device(ModelDevice())
        mem = MemoryApi(dev, 1 << 20, 1 << 32)
        cq = CommandQueue(mem, entries=16)
        heads, reqs = [], []
        for h, d in w.heads.items():
            if h % devices != index:
                continue
            region = mem.alloc_kv(0, 0, h, HEAD_DIM, len(d.keys),
                                  sum(k.shape[0] for k in d.keys))
            mem.write_clusters(region, d.keys, d.values)
            heads.append(h)
            reqs.append(AttnRequest(region, d.q, d.ids))
        if not reqs:
            continue
        out.update(zip(heads, attend_split(cq, reqs), strict=True))
    return out


def float64_reference(d: HeadData) -> tuple[np.ndarray, np.ndarray]:
    from nelssa.hw.model.reference import attend_f64

    return attend_f64(d.q, [d.keys[i] for i in d.ids], [d.values[i] for i in d.ids],
                      np.float32(1 / np.sqrt(HEAD_DIM)))


def vmax(d: HeadData) -> float:
    from nelssa.hw.model.fp import as_f32, bf16_to_f32_bits

    return max(float(np.abs(as_f32(bf16_to_f32_bits(v))).max()) for v in d.values)


class InProcessNode:
    """NelssaHost served from a thread of this process over a real ZeroMQ socket, its devices
    real processes: for tests that set NodeConfig fields `nelssa node up` does not expose."""

    def __init__(self, endpoint: str, devices: int = 2, backend: str = "model",
                 token_file: Path | None = None, **config: object) -> None:
        import threading

        from nelssa.emu.launcher import DeviceProcesses
        from nelssa.host.pnm_node.config import NodeConfig
        from nelssa.host.pnm_node.node import NodeService

        self.procs = DeviceProcesses(devices, backend, token_file=token_file)
        try:
            self.service = NodeService(NodeConfig(
                tuple(self.procs.endpoints), backend=backend, device_timeout_s=10.0,
                connect_timeout_s=60.0, device_token_file=str(self.procs.token_file),
                **config), endpoint)
        except Exception:
            self.procs.stop()
            raise
        self.endpoint = self.service.endpoint
        self.host = self.service.host
        self._thread = threading.Thread(target=self.service.serve,
                                        kwargs={"shutdown_devices": True}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.service.stop()
        self._thread.join(60)
        self.procs.stop()


class FakeSlot:
    """A device slot that runs its work on a thread of its own, like DeviceSlot."""

    def __init__(self, index: int) -> None:
        self.index, self.endpoint, self.alive = index, f"fake{index}", True
        self._exec = ThreadPoolExecutor(max_workers=1)

    def submit(self, fn: Any) -> Future[Any]:
        return self._exec.submit(fn, self)
