"""The fpga backend on fake boards: the board's whole path (PCI ids, mapped BARs, 32-bit register
accesses, rings and completions in device memory, DMA) against the model and the RTL, bit for
bit; the manifest and its checks; and every refusal (absent, small or foreign BAR, missing or
malformed manifest, a bitstream that does not match, a device that stops answering), each before
anything is written to the board."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli

from nelssa.driver import regs
from nelssa.driver.command import AttnRequest, CommandQueue
from nelssa.driver.device import Device
from nelssa.driver.formats import DESCRIPTOR, DescOpcode, DescStatus
from nelssa.driver.iface import interface_digest, interface_hash32
from nelssa.driver.memory import MemoryApi
from nelssa.hw.fpga.errors import BarError, DeviceNotAnsweringError, ManifestError, MismatchError
from nelssa.hw.fpga.fake import FakeBoard
from nelssa.hw.fpga.manifest import Manifest
from nelssa.hw.fpga.port import FpgaPort, open_board
from nelssa.hw.model import fp
from nelssa.hw.model.ddr5_timing import PRESETS
from nelssa.hw.model.device import DeviceConfig, ModelDevice
from nelssa.hw.model.device_timing import Refresh, UnitTiming

# time and work counters differ between backends by design; a fake board cannot see loads, so
# it does not count reads of unmapped offsets
SKIP_REGS = {"PERF_CYCLES_LO", "PERF_CYCLES_HI", "PERF_BUSY_LO", "PERF_BUSY_HI", "ERR_UNMAPPED"}


class Served:
    """A fake board served on a thread of this process (so tests can look at its side)."""

    def __init__(self, folder: Path) -> None:
        self.board = FakeBoard(folder)
        self.thread = threading.Thread(target=self.board.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.board.stop()
        self.thread.join(timeout=10)
        self.board.close()


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path / "board0")
    yield s
    s.close()


def _bf16(rng, shape):
    return fp.f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))


def _workload(port) -> dict[str, object]:
    """KV through DMA-sized and line-sized writes, good and bad descriptors, read-back, the
    registers: everything that must come out the same on every backend."""
    dev = Device(port)
    mem = MemoryApi(dev, 1 << 20, 1 << 34)
    cq = CommandQueue(mem, entries=8)
    rng = np.random.default_rng(9)
    out: dict[str, object] = {}
    reqs = []
    for session, (hd, heads, n, sel) in enumerate([(128, 4, 30, 9), (64, 2, 12, 12),
                                                   (128, 8, 70, 40)]):
        tokens = rng.integers(1, 65, n)
        ks = [_bf16(rng, (t, hd)) for t in tokens]
        vs = [_bf16(rng, (t, hd)) for t in tokens]
        region = mem.alloc_kv(session, 0, 0, hd, n, int(tokens.sum()))
        mem.write_clusters(region, ks[: n // 2], vs[: n // 2])
        mem.append_chunk(region, ks[n // 2:], vs[n // 2:])
        out[f"kv{session}"] = dev.mem_read(region.data_addr, region.data_used)
        reqs.append(AttnRequest(region, _bf16(rng, (heads, hd)),
                                rng.choice(n, sel, replace=False).tolist()))
    ids = cq.submit(reqs)
    done = cq.wait(ids)
    out["results"] = [(done[i].status, done[i].o.tobytes(), done[i].lse.tobytes()) for i in ids]
    bad = DESCRIPTOR.build({"opcode": DescOpcode.ATTN, "flags": 0, "head_dim": 96, "q_heads": 1,
                            "reserved0": 0, "num_ids": 1, "desc_id": 777, "num_clusters": 1,
                            "q_addr": 1 << 20, "dir_addr": 1 << 20, "ids_addr": 1 << 20,
                            "out_addr": 1 << 20, "scale": 0, "reserved1": bytes(12)})
    cq.submit_raw([bad])
    out["bad"] = cq.wait([777])[777].status
    dev.mem_write(dev.mem_bytes - 5, b"tail!")  # the very end of memory, a partial line
    out["tail"] = dev.mem_read(dev.mem_bytes - 64, 64)
    dev.reg_write(0x800, 7)
    dev.reg_write("CAPS", 0)
    out["regs"] = {r.name: dev.reg_read(r.name) for r in regs.REGISTERS
                   if r.name not in SKIP_REGS}
    return out


def test_fake_board_matches_the_model_bit_for_bit(served):
    port = FpgaPort(served.board.folder)
    try:
        assert port.has_dma
        got = _workload(port)
    finally:
        port.close()
    want = _workload(ModelDevice())
    want["regs"]["BUILD_ID"] = served.board.config.build_id  # the fake's build id, by design
    assert got == want
    assert all(s == DescStatus.OK for s, _, _ in got["results"])
    assert got["bad"] == DescStatus.ERR_HEAD_DIM
    assert got["regs"]["IFACE_HASH"] == interface_hash32()
    assert got["regs"]["ERR_RO_WRITE"] == 1


@pytest.mark.rtl
def test_fake_board_matches_the_rtl(served):
    from nelssa.hw.sim.device import RtlDevice

    rtl = RtlDevice()
    try:
        want = _workload(rtl)
    finally:
        rtl.close()
    port = FpgaPort(served.board.folder, dma=None)  # this time every line through the BAR
    try:
        got = _workload(port)
    finally:
        port.close()
    want["regs"]["BUILD_ID"] = served.board.config.build_id
    assert got == want


def test_fake_board_in_its_own_process_through_the_cli(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "nelssa.cli", "fpga", "fake", str(tmp_path),
                             "--boards", "2"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "serving":
                break
        probe = run_cli("fpga", "probe", "--bar", str(tmp_path / "board1" / "resource0"))
        assert probe.returncode == 0, probe.stderr
        assert "match" in probe.stdout and probe.stdout.rstrip().endswith("OK")
        port = open_board(str(tmp_path / "board0"))
        try:
            got = _workload(port)
        finally:
            port.close()
        want = _workload(ModelDevice())
        want["regs"]["BUILD_ID"] = got["regs"]["BUILD_ID"]
        assert got == want
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert list(tmp_path.iterdir()) == []  # its sparse memory files and the rest removed


# -- the manifest ----------------------------------------------------------------------------
def test_manifest_round_trip_and_literal_form(served):
    m = Manifest.load(served.board.folder / "manifest.json")
    assert Manifest.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    d = m.to_dict()
    assert d["format"] == "nelssa-bitstream/1" and d["interface"]["version"] == "1.0"
    assert d["interface"]["sha256"] == interface_digest()
    assert d["pci"] == {"vendor": "0x10ee", "device": "0x4e4c", "bar_regs": 0, "bar_mem": 2}
    m.check_software()


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("board"), "field 'board' is missing"),
    (lambda d: d["device"].update(engines="two"), "field 'device.engines' must be int"),
    (lambda d: d["device"].update(engines=0), "field 'device.engines' must be in 1..15"),
    (lambda d: d["pci"].update(vendor="0xzz"), "field 'pci.vendor' must be an integer"),
    (lambda d: d["pci"].update(bar_mem=0), "need their own BARs"),
    (lambda d: d["interface"].update(sha256="abc"), "64 lower-case hex digits"),
    (lambda d: d["interface"].update(version="one"), "MAJOR.MINOR"),
    (lambda d: d.update(format="other/9"), "field 'format'"),
    (lambda d: d["device"].update(head_dims=[]), "non-empty list"),
])
def test_malformed_manifests_are_refused_naming_the_field(served, edit, message):
    d = Manifest.load(served.board.folder / "manifest.json").to_dict()
    edit(d)
    with pytest.raises(ManifestError, match=message):
        Manifest.from_dict(d)


def _register_file(folder: Path) -> bytes:
    """The served register file (moved aside while a test hides the BAR)."""
    f = folder / "resource0"
    return (f if f.exists() and f.stat().st_size == 4096 else folder / "saved0").read_bytes()


def _refused(served, exc, match, bar=None, manifest=None, **kw):
    """Opening fails with ``exc`` and nothing reached the board: no store announced, the
    register words software may write as they were, no memory written."""
    b = served.board
    before = _register_file(b.folder)
    with pytest.raises(exc, match=match):
        FpgaPort(bar or b.folder, manifest, **kw)
    assert b.writes_taken == 0
    after = _register_file(b.folder)
    for r in regs.REGISTERS:
        if r.access != regs.Access.RO:
            assert after[r.offset:r.offset + 4] == before[r.offset:r.offset + 4], r.name
    assert b.memory.image() == {}


def test_missing_and_malformed_manifests_refused_before_any_write(served, tmp_path):
    folder = served.board.folder
    _refused(served, ManifestError, "no bitstream manifest", manifest=tmp_path / "none.json")
    (folder / "manifest.json").rename(tmp_path / "kept.json")  # none beside the board either
    _refused(served, ManifestError, "no bitstream manifest at .*board0/manifest.json")
    (tmp_path / "kept.json").rename(folder / "manifest.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    _refused(served, ManifestError, "not valid JSON", manifest=bad)
    bad.write_text("[1, 2]")
    _refused(served, ManifestError, "must be a JSON object", manifest=bad)
    d = json.loads((folder / "manifest.json").read_text())
    d["interface"]["sha256"] = "0" * 64  # built from another tree
    bad.write_text(json.dumps(d))
    _refused(served, MismatchError, "built for device interface 0000", manifest=bad)
    d = json.loads((folder / "manifest.json").read_text())
    d["build_id"] = 1234  # the manifest of another bitstream
    d["device"]["engines"] = 2  # the fake boards have the default 4
    bad.write_text(json.dumps(d))
    _refused(served, MismatchError, r"BUILD_ID reads 0xfa4e001, manifest says 0x4d2; CAPS",
             manifest=bad)


def test_absent_small_and_foreign_bars_refused_before_any_write(served, tmp_path):
    folder = served.board.folder
    manifest = folder / "manifest.json"
    _refused(served, BarError, "no board at", bar=tmp_path / "nothing", manifest=manifest)
    # a folder that is not a PCI device
    (tmp_path / "empty").mkdir()
    _refused(served, BarError, "cannot read its vendor id", bar=tmp_path / "empty",
             manifest=manifest)
    # another vendor's device
    (folder / "vendor").write_text("0x8086\n")
    _refused(served, BarError, "is not ours: PCI 8086:4e4c")
    (folder / "vendor").write_text("0x10ee\n")
    # the register BAR absent, then too small
    (folder / "resource0").rename(folder / "saved0")
    _refused(served, BarError, "register BAR is absent")
    (folder / "resource0").write_bytes(bytes(1024))
    _refused(served, BarError, "too small: 1024 bytes")
    (folder / "resource0").unlink()
    (folder / "saved0").rename(folder / "resource0")
    # a memory BAR smaller than the device's memory and no DMA channel for the rest
    with pytest.raises(BarError, match="no DMA channel"):
        _small_mem(folder)
    assert served.board.writes_taken == 0
    FpgaPort(folder).close()  # the failed open let go of the board


def _small_mem(folder: Path) -> None:
    real = folder / "resource2"
    small = folder / "resource2_wc"  # a write-combining view is preferred when present
    small.write_bytes(bytes(1 << 20))
    try:
        FpgaPort(folder, dma=None)
    finally:
        small.unlink()
    assert real.exists()


def test_one_driver_per_board(served):
    port = FpgaPort(served.board.folder)
    try:
        with pytest.raises(BarError, match="in use by another process"):
            FpgaPort(served.board.folder)
        assert port.read_register("MAGIC") == regs.DEVICE_MAGIC  # the first one unharmed
    finally:
        port.close()
    FpgaPort(served.board.folder).close()  # free again


def test_a_bar_that_is_not_a_nelssa_device(served):
    folder = served.board.folder
    served.board.stop()
    served.thread.join(timeout=10)
    u32 = np.memmap(folder / "resource0", dtype="<u4", mode="r+")
    u32[0] = 0x1234_5678  # another design's first register
    u32.flush()
    del u32
    with pytest.raises(BarError, match="not a NELSSA device: MAGIC reads 0x12345678"):
        FpgaPort(folder)
    assert served.board.writes_taken == 0


def test_a_device_that_stops_answering(served):
    port = FpgaPort(served.board.folder, stall_timeout_s=0.5)
    try:
        dev = Device(port)
        mem = MemoryApi(dev, 1 << 20, 1 << 30)
        CommandQueue(mem, entries=4)
        # the model stops: the cycle counter stands still
        served.board.stop()
        served.thread.join(timeout=10)
        t0 = time.monotonic()
        with pytest.raises(DeviceNotAnsweringError, match="PERF_CYCLES stood at"):
            port.advance(1000)
        assert time.monotonic() - t0 < 5
        with pytest.raises(DeviceNotAnsweringError, match="did not take a register write"):
            dev.reg_write("CQ_HEAD", 0)
        # the link goes down: everything reads all ones
        served.board.fall_off_the_bus()
        with pytest.raises(DeviceNotAnsweringError, match="reads return all ones"):
            dev.reg_read("STATUS")
    finally:
        port.close()
    with pytest.raises(DeviceNotAnsweringError, match="all ones"):
        FpgaPort(served.board.folder)


def test_cli_probe_refuses_with_a_clear_message(served, tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text("{}")
    r = run_cli("fpga", "probe", "--bar", str(served.board.folder), "--manifest", str(bad))
    assert r.returncode == 2
    assert "field 'format' is missing" in r.stderr
    r = run_cli("fpga", "manifest", "--board", "u55c", "--part", "xcu55c", "--build-id", "0x42",
                "-o", str(tmp_path / "x.json"))
    assert r.returncode == 0, r.stderr
    m = Manifest.load(tmp_path / "x.json")
    assert m.build_id == 0x42 and m.interface_sha256 == interface_digest()
    for flags, message in ((["--build-id", "forty-two"], "--build-id must be an integer"),
                           (["--build-id", "0x1ffffffff"], "field 'build_id' must be in"),
                           (["--build-id", "1", "--engines", "0"],
                            "argument --engines: must be an integer in 1..15, got 0")):
        r = run_cli("fpga", "manifest", "--board", "b", "--part", "p", *flags, "-o",
                    str(tmp_path / "y.json"))
        assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "y.json").exists()
    assert served.board.writes_taken == 0


def _step_lines(out: str) -> list[str]:
    """The per-step table and the total of `nelssa decode` (emulated figures only)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("step "))
    return [line.split(" (")[0] for line in lines[start:] if line[:4].strip().isdigit()
            or line.startswith("total:")]  # minus the wall time of the total


def _fields(line: str) -> tuple[list[str], int]:
    """A step line's fields that do not depend on device time (step, batch, accuracy), and
    its device cycles."""
    words = line.split()
    if words[0] == "total:":
        return words[:1], 0
    accuracy = words.index("r1:")
    # step, the batch (its "S+ L" parts), ..., device cycles, GB/s, mJ, DDR5 (counted or the
    # average: a fake board counts no DDR5 commands), GPU by, roofline, accuracy
    return words[:accuracy - 14] + words[accuracy:], int(words[accuracy - 6].replace(",", ""))


def test_decode_on_fake_boards_equals_decode_on_model_devices(tmp_path):
    """`nelssa decode --backend fpga`: the node reaches the boards through the fpga backend in
    its own process (BARs, DMA for the KV); every step's results equal those of the same run
    on model devices, since they are the model's. Device time is the model's too, but a
    fake board's clock runs on while the host polls (as a board's does), so its batches meet
    DDR5 refresh at other points, and the board reports PERF_BUSY, which leaves out the
    doorbell and the descriptor reads: each step's cycles within a refresh window and those
    latencies per batch (hw/model/device_timing.Refresh)."""
    fake = subprocess.Popen([sys.executable, "-m", "nelssa.cli", "fpga", "fake",
                             str(tmp_path / "boards"), "--boards", "2"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert fake.stdout is not None
        for line in fake.stdout:
            if line.strip() == "serving":
                break
        # a short prompt of 16..64 tokens (default 64..512): it stays on the GPU, so its length
        # reaches no board; only the prefill it costs is less
        common = ["--short", "1", "--long", "1", "--short-len", "16..64", "--long-len",
                  "1100..1300", "--t-input", "1024", "--steps", "2",
                  "--trace", str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.png"),
                  "--overwrite"]  # the second backend's run replaces the first's files
        boards = [x for i in range(2) for x in ("--bar", str(tmp_path / "boards" / f"board{i}"))]
        runs = {}
        for backend, extra in (("fpga", boards), ("model", ["--devices", "2"])):
            r = run_cli("decode", "--backend", backend, *extra, *common, cwd=tmp_path)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            assert "-> PNM tier" in r.stdout
            runs[backend] = _step_lines(r.stdout)
        assert len(runs["fpga"]) == 3
        timing = UnitTiming.load()
        stall = Refresh.of(PRESETS[DeviceConfig().preset], timing).stall
        per_batch = stall + timing.doorbell_cycles + 8 * timing.fetch_cycles
        for fpga, model in zip(runs["fpga"], runs["model"], strict=True):
            (f, f_cycles), (m, m_cycles) = _fields(fpga), _fields(model)
            assert f == m, (fpga, model)
            # the step's batches on its busiest device: one a layer of the small model
            assert abs(f_cycles - m_cycles) <= 2 * per_batch, (fpga, model)
    finally:
        fake.terminate()
        assert fake.wait(timeout=30) == 0


def test_decode_refuses_fpga_without_boards(tmp_path):
    r = run_cli("decode", "--backend", "fpga", cwd=tmp_path)
    assert r.returncode == 2 and "--backend fpga needs --bar" in r.stderr
    r = run_cli("node", "up", "--backend", "fpga", "--bar", str(tmp_path / "nothing"),
                cwd=tmp_path)
    assert r.returncode == 2 and "no board at" in r.stderr


def test_a_board_served_as_a_remote_device(served, tmp_path):
    """`nelssa device serve --backend fpga`: a board behind a device process, reached over
    ZeroMQ like any device; a refused board makes the server exit 2 with the reason."""
    from nelssa.driver.remote import RemotePort

    endpoint = f"ipc://{tmp_path}/dev0"
    proc = subprocess.Popen([sys.executable, "-m", "nelssa.cli", "device", "serve", "--backend",
                             "fpga", "--bar", str(served.board.folder), "--endpoint", endpoint],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        remote = RemotePort(endpoint, timeout_ms=30_000)
        got = _workload(remote)
        remote.shutdown()
        remote.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    want = _workload(ModelDevice())
    want["regs"]["BUILD_ID"] = served.board.config.build_id
    assert got == want
    bad = run_cli("device", "serve", "--backend", "fpga", "--bar", str(tmp_path / "nothing"),
                  "--endpoint", endpoint)
    assert bad.returncode == 2 and "no board at" in bad.stderr
