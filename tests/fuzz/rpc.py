"""Fuzzer of device calls against a real device server (`nelssa device serve --backend model`
in its own process): calls of any operation (SHUTDOWN and AUTH aside), any argument, payloads of
port messages good and bad, or spoiled bytes, sent over a link client that presented the
device's token; and calls of a stranger that did not (any operation, SHUTDOWN and AUTH with a
guessed token included, random payloads: issue 44, defect 14).

Reference: driver/remote.py as documented (a call is checked whole before the device sees any
of it: a payload that does not parse, a message that is not a port message, an ADVANCE or
RUN_UNTIL_IDLE beyond MAX_CALL_CYCLES, a backdoor call shorter than its address, a read not
16 bytes or beyond MAX_DMA_BYTES, an access outside device memory is BAD_REQUEST; an unknown
operation UNKNOWN_OP; a stranger's call UNAUTHORIZED, whatever it is), and a model device in
this process that gets every call the server accepts, in the same order.

Oracles: every call answered within a bound (hang); no INTERNAL answer, the server process
alive and answering (crash); each answer as the reference says, the accepted calls' results
(RECEIVE's messages, RUN_UNTIL_IDLE's cycles, CYCLE) equal to the local model's, and a refused
call leaves no trace (wrong result).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from nelssa.driver import remote
from nelssa.driver.remote import RpcErrorCode, RpcOp, RpcStatus
from nelssa.emu.link.frame import LINK_HELLO_OP, LinkErrorCode
from nelssa.emu.link.model import link_preset
from nelssa.emu.link.service import LinkTimeoutError, RemoteError
from nelssa.emu.link.tokens import read_token, token_path
from nelssa.hw.model.device import ModelDevice
from tests.fuzz import cxl_mem
from tests.fuzz.oracle import Finding, Kind
from tests.fuzz.values import uint

ANSWER_S = 20.0
CALL_OPS = tuple(op for op in RpcOp if op not in (RpcOp.SHUTDOWN, RpcOp.WAIT, RpcOp.AUTH))
DMA_OPS = (RpcOp.DMA_WRITE, RpcOp.DMA_READ)
MEM_BYTES = ModelDevice().config.mem_bytes


@dataclass(frozen=True)
class Call:
    op: int
    arg: int
    messages: tuple[bytes, ...]
    spoil: tuple = ()
    body: bytes = b""
    """A backdoor call's bytes after its address (the data, or the length to read); a
    stranger's whole payload."""
    stranger: bool = False
    """Sent over a connection that never presented the device's token."""

    def payload(self) -> bytes:
        if self.stranger:
            return self.body
        if self.op in DMA_OPS:
            raw = (self.arg & (1 << 64) - 1).to_bytes(8, "little") + self.body
        else:
            raw = remote.encode_request(self.arg, list(self.messages))
        if not self.spoil:
            return raw
        if self.spoil[0] == "cut":
            return raw[:min(self.spoil[1], max(len(raw) - 1, 0))]
        return raw + self.spoil[1]


@dataclass(frozen=True)
class RpcCase:
    calls: tuple[Call, ...]

    @property
    def units(self) -> int:
        return len(self.calls)


_ARGS = st.one_of(st.sampled_from([0, 1, 64, 1000, remote.MAX_CALL_CYCLES,
                                   remote.MAX_CALL_CYCLES + 1, (1 << 63), (1 << 64) - 1]),
                  uint(64))
_ADDRS = st.one_of(st.sampled_from([0, 63, 1 << 20, MEM_BYTES - 64, MEM_BYTES - 1, MEM_BYTES,
                                    (1 << 64) - 1]), uint(40), uint(64))
_BODIES = st.one_of(st.binary(max_size=300),  # data to write
                    st.integers(0, 600).map(lambda n: n.to_bytes(8, "little")),  # a length
                    st.sampled_from([remote.MAX_DMA_BYTES + 1, 1 << 63]).map(
                        lambda n: n.to_bytes(8, "little")))
_MESSAGES = st.lists(st.one_of(cxl_mem.GOOD, cxl_mem.GOOD, cxl_mem.MALFORMED), max_size=6)


_STRANGER_PAYLOADS = st.one_of(
    st.binary(max_size=40), st.binary(min_size=8, max_size=8),  # a random 8 bytes stopped it
    st.binary(min_size=32, max_size=32),  # a guessed token
    _ARGS.map(lambda a: remote.encode_request(a, [])),
    st.tuples(_ADDRS, st.binary(max_size=64)).map(lambda t: t[0].to_bytes(8, "little") + t[1]))


@st.composite
def rpc_cases(draw, max_calls: int = 6) -> RpcCase:
    calls = []
    for _ in range(draw(st.integers(1, max_calls))):
        if draw(st.integers(0, 4)) == 0:  # a stranger: any operation, SHUTDOWN included
            calls.append(Call(draw(st.one_of(st.sampled_from(list(RpcOp)), uint(16).filter(
                lambda o: o != LINK_HELLO_OP))), 0, (),
                              body=draw(_STRANGER_PAYLOADS), stranger=True))
            continue
        op = draw(st.one_of(st.sampled_from(CALL_OPS), st.sampled_from(CALL_OPS),
                            st.just(RpcOp.WAIT), uint(16).filter(  # the link's own aside
                                lambda o: o not in RpcOp.__members__.values()
                                and o != LINK_HELLO_OP)))
        spoil = draw(st.one_of(st.just(()), st.just(()), st.just(()),
                               st.tuples(st.just("cut"), st.integers(0, 12)),
                               st.tuples(st.just("extend"), st.binary(min_size=1, max_size=6))))
        if op in DMA_OPS:
            calls.append(Call(op, draw(_ADDRS), (), spoil, draw(_BODIES)))
        else:
            calls.append(Call(op, draw(_ARGS), tuple(draw(_MESSAGES)), spoil))
    return RpcCase(tuple(calls))


def _accepts(call: Call) -> tuple[bool, int | None]:
    """(accepted, error code if refused) by the documented checks."""
    if call.stranger:  # refused before anything is parsed
        return False, RpcErrorCode.UNAUTHORIZED
    if call.op not in RpcOp.__members__.values():
        return False, LinkErrorCode.UNKNOWN_OP
    if call.op in DMA_OPS:
        raw = call.payload()
        if len(raw) < 8 or (call.op == RpcOp.DMA_READ and len(raw) != 16):
            return False, RpcErrorCode.BAD_REQUEST
        addr = int.from_bytes(raw[:8], "little")
        n = len(raw) - 8 if call.op == RpcOp.DMA_WRITE else int.from_bytes(raw[8:], "little")
        if n > remote.MAX_DMA_BYTES or addr + n > MEM_BYTES:
            return False, RpcErrorCode.BAD_REQUEST
        return True, None
    try:
        arg, messages = remote.decode_request(call.payload())
    except ValueError:
        return False, RpcErrorCode.BAD_REQUEST
    if call.op in (RpcOp.ADVANCE, RpcOp.RUN_UNTIL_IDLE) and arg > remote.MAX_CALL_CYCLES:
        return False, RpcErrorCode.BAD_REQUEST
    if not all(cxl_mem.well_formed(m) for m in messages):
        return False, RpcErrorCode.BAD_REQUEST
    if call.op == RpcOp.WAIT:
        return False, RpcErrorCode.BAD_REQUEST  # no call is ever left running here
    return True, None


class DeviceServer:
    """`nelssa device serve --backend model` in a process of its own, and the local model that
    gets the same accepted calls."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="nelssa-fuzz-dev-")
        self.endpoint = f"ipc://{Path(self._dir.name)}/device"
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        from nelssa.emu.link.client import LinkClient

        self.proc = subprocess.Popen([sys.executable, "-m", "nelssa.cli", "device", "serve",
                                      "--backend", "model", "--endpoint", self.endpoint],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        self.link, self.stranger = (
            LinkClient(self.endpoint, link_preset(remote.CXL_LINK), ANSWER_S,
                       retry=remote.RPC_RETRY, max_reply=remote.MAX_RPC_REPLY) for _ in range(2))
        self.model = ModelDevice()
        # the device's token, written for its endpoint as it starts (waits for it to bind)
        self.link.call(RpcOp.AUTH, read_token(self.endpoint, wait_s=ANSWER_S))

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def call(self, op: int, payload: bytes, stranger: bool = False
             ) -> tuple[RpcStatus, int, list[bytes]]:
        link = self.stranger if stranger else self.link
        status, value, out = remote.decode_reply(link.call(op, payload).payload)
        while status == RpcStatus.PENDING:
            status, value, out = remote.decode_reply(
                self.link.call(RpcOp.WAIT, remote.encode_request(0, [])).payload)
        return status, value, out

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.link.close()
            self.stranger.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # a server killed leaves its token file: the next one's must not be read for it
        token_path(self.endpoint).unlink(missing_ok=True)

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()


def _local(model: ModelDevice, call: Call) -> tuple[int, list[bytes]] | str:
    """What the in-process model gives for an accepted call: (value, messages), or
    "busy"/"error: ..." where the device refuses it."""
    if call.op in DMA_OPS:
        raw = call.payload()
        addr = int.from_bytes(raw[:8], "little")
        if call.op == RpcOp.DMA_WRITE:
            model.dma_write(addr, raw[8:])
            return 0, []
        return 0, [model.dma_read(addr, int.from_bytes(raw[8:], "little"))]
    _, messages = remote.decode_request(call.payload())
    try:
        for m in messages:
            model.send(m)
        if call.op == RpcOp.RECEIVE:
            return 0, model.receive()
        if call.op == RpcOp.ADVANCE:
            model.advance(call.arg)
        elif call.op == RpcOp.RUN_UNTIL_IDLE:
            return model.run_until_idle(call.arg), []
        elif call.op == RpcOp.CYCLE:
            return model.cycle, []
        elif call.op == RpcOp.CLOCK:
            return model.clock_hz, []
    except TimeoutError:
        return "busy"
    except ValueError as e:
        return f"error: {e}"
    return 0, []


def run_rpc_case(case: RpcCase, server: DeviceServer) -> list[Finding]:
    findings: list[Finding] = []
    if not server.alive:
        server.restart()
    for i, call in enumerate(case.calls):
        accepted, code = _accepts(call)
        want = _local(server.model, call) if accepted else None
        what = (f"call {i} ({call.op}, arg {call.arg}, {len(call.messages)} messages"
                f"{', a stranger' if call.stranger else ''})")
        t0 = time.monotonic()
        try:
            _, value, out = server.call(call.op, call.payload(), call.stranger)
            got: object = (value, out)
        except RemoteError as e:
            got = ("error", e.code)
        except (LinkTimeoutError, TimeoutError):
            findings.append(Finding(Kind.HANG if server.alive else Kind.CRASH,
                                    f"{what}: no answer within {time.monotonic() - t0:.0f} s"))
            break
        if got == ("error", LinkErrorCode.INTERNAL):
            findings.append(Finding(Kind.CRASH, f"{what}: INTERNAL (a failure no check "
                                                "foresaw)"))
        elif not accepted:
            if got != ("error", code):
                findings.append(Finding(Kind.WRONG, f"{what}: answered {got!r}, expected "
                                                    f"error {code}"))
        elif want == "busy":
            if got != ("error", RpcErrorCode.DEVICE_BUSY):
                findings.append(Finding(Kind.WRONG, f"{what}: answered {got!r}, expected "
                                                    "DEVICE_BUSY"))
        elif isinstance(want, str):
            if got != ("error", RpcErrorCode.DEVICE_ERROR):
                findings.append(Finding(Kind.WRONG, f"{what}: answered {got!r}, the model "
                                                    f"says {want}"))
        elif got != want:
            findings.append(Finding(Kind.WRONG, f"{what}: answered {str(got)[:120]}, the "
                                                f"model gives {str(want)[:120]}"))
    if not server.alive:
        findings.append(Finding(Kind.CRASH, f"the device server exited with status "
                                            f"{server.proc.returncode if server.proc else '?'}"))
    if findings:
        server.restart()  # the local model and the served one may no longer agree
    return findings
