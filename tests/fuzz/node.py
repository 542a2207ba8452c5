"""Fuzzer of node requests against a real node (`nelssa node up --backend model`, its device
processes, real ZeroMQ sockets): requests of every operation with fields at their edges or
bytes spoiled, sent by the session's owner or by a stranger on another connection, at any
emulated time; unknown operations; SHUTDOWN with a guessed admin token.

Each input opens a session S for its owner (head-wise, so that every KV head lies whole on one
device and its attention is bit-exact with one model device), writes clustered KV into it, then
runs its requests: the owner's go to a second session of its own or to none, the stranger's to
its own session, to S, or to any handle. Then the owner attends S.

Oracles: every request answered within a bound (hang); no INTERNAL answer (a failure no check
foresaw) and the node process alive with every device up (crash); a payload that does not parse
as its operation's struct refused (``REFUSALS``), an unknown operation UNKNOWN_OP, anything the
stranger names S with refused as for an unknown session, and the owner's last ATTEND bit for
bit as one model device computes it (wrong result).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from construct import ConstructError
from hypothesis import strategies as st

from nelssa.emu.link.frame import LINK_HELLO_OP, LinkErrorCode
from nelssa.emu.link.model import DEFAULT_GPU_PNM_LINK
from nelssa.emu.link.service import LinkTimeoutError, RemoteError
from nelssa.host.pnm_node import protocol as p
from nelssa.host.pnm_node.protocol import NodeErrorCode, NodeOp
from nelssa.hw.model.fp import f32_to_bf16_bits
from tests.fuzz.oracle import Finding, Kind, guarded
from tests.fuzz.values import uint

log = logging.getLogger(__name__)

ANSWER_S = 20.0
"""Wall time a request may take (the link client retransmits within it)."""
HEADS = (0, 1)
CLUSTERS = 6
REQUESTS = {
    NodeOp.OPEN_SESSION: p.OPEN_SESSION_REQ, NodeOp.CLOSE_SESSION: p.SESSION_REQ,
    NodeOp.ALLOC_KV: p.ALLOC_KV_REQ, NodeOp.FREE_KV: p.FREE_KV_REQ,
    NodeOp.WRITE_KV: p.WRITE_KV_REQ, NodeOp.ATTEND: p.ATTEND_REQ,
    NodeOp.SHUTDOWN: p.SHUTDOWN_REQ,
}
"""Each operation's request struct: the reference of what parses."""
LATE_PS = 10**9
"""An accepted request sent this close to the node's horizon may leave the sender's link queue
busy past it (its next requests are then refused, rightly)."""
REFUSALS = (NodeErrorCode.BAD_REQUEST, NodeErrorCode.UNKNOWN_SESSION,
            NodeErrorCode.NOT_ALLOCATED, NodeErrorCode.LIMIT_EXCEEDED)
"""What a request that does not parse may draw: BAD_REQUEST, or a refusal the node reached
from the fixed start of the request before the rest (never success, never INTERNAL)."""
FUZZED_OPS = tuple(NodeOp)
"""SHUTDOWN too: only the node's operator holds its token, so no client's SHUTDOWN may stop
it."""


@dataclass(frozen=True)
class Workload:
    seed: int
    head_dim: int
    group: int
    tokens: tuple[int, ...]
    """Tokens of each cluster (the same for every KV head)."""
    selected: tuple[int, ...]
    """The clusters the owner's last ATTEND selects, per KV head."""

    def arrays(self):
        rng = np.random.default_rng(self.seed)

        def bf16(shape):
            return f32_to_bf16_bits(rng.standard_normal(shape).astype(np.float32))
        keys = {h: [bf16((t, self.head_dim)) for t in self.tokens] for h in HEADS}
        values = {h: [bf16((t, self.head_dim)) for t in self.tokens] for h in HEADS}
        q = {h: bf16((self.group, self.head_dim)) for h in HEADS}
        return keys, values, q


@dataclass(frozen=True)
class Action:
    who: str
    """owner or stranger."""
    op: int
    target: str
    """Whose session the request names: own (a second session of the sender), victim (the
    owner's session S), any (a handle drawn here)."""
    fields: dict
    spoil: tuple = ()
    """("cut", n), ("extend", bytes), ("flip", offset, xor): done to the built payload."""
    send_ps: int | None = None


@dataclass(frozen=True)
class NodeCase:
    workload: Workload
    actions: tuple[Action, ...]

    @property
    def units(self) -> int:
        return len(self.actions) + 1


_FIELD_VALUES: dict[str, st.SearchStrategy] = {
    "partition": st.one_of(st.integers(0, 1), uint(8)),
    "head_dim": st.one_of(st.sampled_from([64, 128, 0, 32, 256]), uint(16)),
    "group": st.one_of(st.integers(1, 8), st.sampled_from([0, 9, 255])),
    "layer": st.one_of(st.integers(0, 3), uint(16)),
    "max_clusters": st.one_of(st.integers(1, 64), uint(32)),
    "max_tokens": st.one_of(st.integers(1, 4096), uint(32)),
    "kv_heads": st.lists(st.one_of(st.integers(0, 3), uint(16)), max_size=4),
    "kv_head": st.one_of(st.integers(0, 3), uint(16)),
    "tokens": st.lists(st.one_of(st.integers(1, 64), st.sampled_from([0, 65, 0xFFFF_FFFF])),
                       min_size=0, max_size=4),
    "ids": st.lists(st.one_of(st.integers(0, CLUSTERS + 1), uint(32)), max_size=8),
    "q_heads": st.one_of(st.integers(1, 8), st.sampled_from([0, 9, 255])),
    "scale": st.one_of(st.sampled_from([0.0, 0.125, -1.0, float("nan"), float("inf"),
                                        1e-45, 3.0e38]), st.floats(width=32)),
    "session": uint(64),
}


@st.composite
def _action(draw) -> Action:
    who = draw(st.sampled_from(["owner", "stranger", "stranger"]))
    op = draw(st.one_of(st.sampled_from(FUZZED_OPS), uint(16).filter(  # the link's own aside
        lambda o: o not in NodeOp.__members__.values() and o != LINK_HELLO_OP)))
    target = draw(st.sampled_from(["own", "victim", "any"] if who == "stranger"
                                  else ["own", "any"]))
    names = draw(st.lists(st.sampled_from(sorted(_FIELD_VALUES)), max_size=3, unique=True))
    fields = {n: draw(_FIELD_VALUES[n]) for n in names}
    spoil = draw(st.one_of(st.just(()), st.just(()),
                           st.tuples(st.just("cut"), st.integers(0, 64)),
                           st.tuples(st.just("extend"), st.binary(min_size=1, max_size=16)),
                           st.tuples(st.just("flip"), st.integers(0, 64), st.integers(1, 255))))
    # far-future times only from the stranger: one client's clock must not move another's
    # results (a time the owner sends moves its own link queue, legitimately)
    send_ps = None if who == "owner" else draw(st.one_of(st.none(), st.sampled_from(
        [0, 1 << 40, p.MAX_ARRIVE_PS, p.MAX_ARRIVE_PS + 1, (1 << 62) - 1]), uint(62)))
    return Action(who, op, target, fields, spoil, send_ps)


@st.composite
def node_cases(draw, max_actions: int = 6) -> NodeCase:
    tokens = tuple(draw(st.lists(st.integers(1, 16), min_size=CLUSTERS, max_size=CLUSTERS)))
    w = Workload(draw(st.integers(0, 2**32 - 1)), draw(st.sampled_from([64, 128])),
                 draw(st.integers(1, 8)), tokens,
                 tuple(draw(st.lists(st.integers(0, CLUSTERS - 1), min_size=1, max_size=8))))
    return NodeCase(w, tuple(draw(st.lists(_action(), max_size=max_actions))))


def _payload(a: Action, w: Workload, session: int) -> bytes:
    """The request of ``a`` (well formed where its fields allow) before it is spoiled."""
    f = dict(a.fields)
    f.setdefault("session", session)
    hd, qh = f.get("head_dim", w.head_dim), f.get("q_heads", w.group)
    rng = np.random.default_rng(w.seed + 1)
    op = a.op
    if op == NodeOp.OPEN_SESSION:
        return p.OPEN_SESSION_REQ.build({"partition": f.get("partition", 0),
                                         "head_dim": hd, "group": f.get("group", w.group)})
    if op == NodeOp.CLOSE_SESSION:
        return p.SESSION_REQ.build({"session": f["session"]})
    if op == NodeOp.ALLOC_KV:
        heads = f.get("kv_heads", [2])
        return p.ALLOC_KV_REQ.build({"session": f["session"], "layer": f.get("layer", 1),
                                     "max_clusters": f.get("max_clusters", 8),
                                     "max_tokens": f.get("max_tokens", 128),
                                     "count": len(heads), "kv_heads": heads})
    if op == NodeOp.FREE_KV:
        return p.FREE_KV_REQ.build({"session": f["session"], "layer": f.get("layer", 1)})
    if op == NodeOp.WRITE_KV:
        tokens = f.get("tokens", [4, 2])
        n = sum(min(t, 64) for t in tokens) * hd * 2 * 2
        return p.WRITE_KV_REQ.build({
            "session": f["session"], "layer": f.get("layer", 0),
            "kv_head": f.get("kv_head", 0), "count": len(tokens),
            "tokens": np.asarray(tokens, dtype="<u4").tobytes(),
            "data": rng.integers(0, 1 << 16, n // 2, dtype=np.uint16).tobytes()})
    if op == NodeOp.ATTEND:
        ids = f.get("ids", [0, 1])
        return p.ATTEND_REQ.build({
            "session": f["session"], "layer": f.get("layer", 0), "q_heads": qh, "head_dim": hd,
            "scale": f.get("scale", 0.0), "count": 1, "groups": [{
                "kv_head": f.get("kv_head", 0), "num_ids": len(ids),
                "ids": np.asarray(ids, dtype="<u4").tobytes(),
                "q": rng.integers(0, 1 << 16, qh * hd, dtype=np.uint16).tobytes()}]})
    if op == NodeOp.SHUTDOWN:  # a guessed token
        return p.SHUTDOWN_REQ.build({"token": rng.bytes(p.ADMIN_TOKEN_BYTES)})
    return rng.integers(0, 256, 12, dtype=np.uint8).tobytes()


def _spoil(raw: bytes, spoil: tuple) -> bytes:
    if not spoil:
        return raw
    if spoil[0] == "cut":
        return raw[:min(spoil[1], max(len(raw) - 1, 0))]
    if spoil[0] == "extend":
        return raw + spoil[1]
    if not raw:
        return raw
    i = spoil[1] % len(raw)
    return raw[:i] + bytes([raw[i] ^ spoil[2]]) + raw[i + 1:]


def parses(op: int, payload: bytes) -> bool:
    """Whether ``payload`` parses as the request struct of ``op`` (the protocol, whole)."""
    struct = REQUESTS.get(op)
    if struct is None:
        return True
    try:
        struct.parse(payload)
    except (ConstructError, UnicodeDecodeError, ValueError, OverflowError):
        return False
    return True


# -- the node -----------------------------------------------------------------------------------
class NodeUnderTest:
    """A node of ``devices`` model devices started as `nelssa node up` would be."""

    def __init__(self, devices: int = 2) -> None:
        from nelssa.emu.launcher import NodeLauncher

        self._dir = tempfile.TemporaryDirectory(prefix="nelssa-fuzz-node-")
        self.endpoint = f"ipc://{Path(self._dir.name)}/node"
        self.devices = devices
        self.launcher = NodeLauncher(self.endpoint, devices, "model", DEFAULT_GPU_PNM_LINK, 300.0)
        self.restarts = 0

    @property
    def alive(self) -> bool:
        return self.launcher.proc.poll() is None

    def restart(self) -> None:
        from nelssa.emu.launcher import NodeLauncher

        self.stop()
        self.launcher = NodeLauncher(self.endpoint, self.devices, "model",
                                     DEFAULT_GPU_PNM_LINK, 300.0)
        self.restarts += 1

    def client(self):
        from nelssa.host.pnm_node.client import NodeClient

        return NodeClient(self.endpoint, timeout_s=ANSWER_S)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.launcher.stop()

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()


def reference_attend(w: Workload, devices: int) -> dict[int, tuple[bytes, bytes]]:
    """(O, LSE) bits per KV head from in-process model devices through the driver, as a
    head-wise node of ``devices`` computes them: KV head h on device h mod ``devices``, each
    device's heads cut over its units and merged (host/pnm_node/aggregate.attend_split)."""
    from nelssa.driver.command import AttnRequest, CommandQueue
    from nelssa.driver.device import Device
    from nelssa.driver.memory import MemoryApi
    from nelssa.host.pnm_node.aggregate import attend_split
    from nelssa.hw.model.device import ModelDevice

    keys, values, q = w.arrays()
    want = {}
    for index in range(devices):
        heads = [h for h in HEADS if h % devices == index]
        if not heads:
            continue
        dev = Device(ModelDevice())
        mem = MemoryApi(dev, 1 << 20, 1 << 32)
        cq = CommandQueue(mem, entries=8)
        reqs = []
        for h in heads:
            region = mem.alloc_kv(0, 0, h, w.head_dim, CLUSTERS, sum(w.tokens))
            mem.write_clusters(region, keys[h], values[h])
            reqs.append(AttnRequest(region, q[h], list(w.selected)))
        for h, (o, lse) in zip(heads, attend_split(cq, reqs), strict=True):
            want[h] = (o.tobytes(), lse.tobytes())
    return want


def _call(client, op: int, payload: bytes, send_ps: int | None):
    return client._link().call(op, payload, send_ps)


def _answer(findings: list[Finding], what: str, fn: Callable[[], object]) -> tuple[str, object]:
    """("ok", reply) or ("error", code); a hang or an unforeseen failure becomes a finding
    and ("failed", None)."""
    t0 = time.monotonic()
    try:
        return "ok", fn()
    except RemoteError as e:
        if e.code == LinkErrorCode.INTERNAL:
            findings.append(Finding(Kind.CRASH, f"{what}: INTERNAL error (a failure no check "
                                                f"foresaw): {e}"))
        return "error", e.code
    except (LinkTimeoutError, TimeoutError) as e:
        findings.append(Finding(Kind.HANG, f"{what}: no answer within "
                                           f"{time.monotonic() - t0:.0f} s: {e}"))
        return "failed", None
    except ValueError as e:  # the client refused to send it (a field it cannot encode)
        return "unsent", str(e)


def run_node_case(case: NodeCase, node: NodeUnderTest) -> list[Finding]:
    findings: list[Finding] = []
    if not node.alive:
        node.restart()
    w = case.workload
    keys, values, q = w.arrays()
    owner, stranger = node.client(), node.client()
    opened: list[tuple[object, int]] = []
    accepted_late = False
    try:
        with guarded(findings, 4 * ANSWER_S, "owner's setup") as g:
            s = owner.open_session(w.head_dim, w.group, "head")
            opened.append((owner, s))
            owner.alloc_kv(s, 0, list(HEADS), CLUSTERS, sum(w.tokens))
            for h in HEADS:
                owner.write_kv(s, 0, h, keys[h], values[h])
            own = {"owner": owner.open_session(w.head_dim, w.group, "cluster"),
                   "stranger": stranger.open_session(w.head_dim, w.group, "head")}
            opened += [(owner, own["owner"]), (stranger, own["stranger"])]
        if not g.passed:
            return findings
        for i, a in enumerate(case.actions):
            client = owner if a.who == "owner" else stranger
            session = {"own": own[a.who], "victim": s}.get(a.target, a.fields.get("session",
                                                                                   s + 1))
            fields = dict(a.fields)
            if a.target != "any":
                fields.pop("session", None)
            raw = _spoil(_payload(Action(a.who, a.op, a.target, fields), w, session), a.spoil)
            what = f"action {i} ({a.who}, {_op_name(a.op)}, {a.target}, {len(raw)} bytes)"
            kind, got = _answer(findings, what, lambda c=client, a=a, raw=raw: _call(
                c, a.op, raw, a.send_ps))
            _judge(findings, what, a, raw, session == s and a.who == "stranger", kind, got)
            accepted_late |= (kind == "ok" and a.send_ps is not None
                              and a.send_ps > p.MAX_ARRIVE_PS - LATE_PS)
            if kind == "ok" and a.op == NodeOp.OPEN_SESSION:
                with contextlib.suppress(Exception):
                    opened.append((client, int(p.OPEN_SESSION_REP.parse(got.payload).session)))
            if kind == "failed":
                break
        _check_owner(findings, owner, s, w, q, node.devices)
        _check_self(findings, stranger, accepted_late)
        _check_node(findings, node, owner)
    finally:
        for c, sid in opened:
            with contextlib.suppress(Exception):
                c.close_session(sid)
        owner.close()
        stranger.close()
    return findings


def _op_name(op: int) -> str:
    return NodeOp(op).name if op in NodeOp.__members__.values() else f"op {op}"


def _judge(findings: list[Finding], what: str, a: Action, raw: bytes, victim: bool, kind: str,
           got: object) -> None:
    if kind in ("failed", "unsent"):
        return
    if a.op not in NodeOp.__members__.values():
        if not (kind == "error" and got == LinkErrorCode.UNKNOWN_OP):
            findings.append(Finding(Kind.WRONG, f"{what}: answered {kind} {got}, expected "
                                                "UNKNOWN_OP"))
        return
    if a.op == NodeOp.SHUTDOWN and kind == "ok":
        findings.append(Finding(Kind.WRONG, f"{what}: a client's SHUTDOWN with a guessed "
                                            "token was taken"))
        return
    if not parses(a.op, raw):
        if not (kind == "error" and got in REFUSALS):
            findings.append(Finding(Kind.WRONG, f"{what}: a payload that does not parse as "
                                                f"{_op_name(a.op)} answered {kind} {got}, "
                                                "expected BAD_REQUEST"))
        return
    # a refusal on other grounds is no oracle as long as an unknown session draws the same
    refused = kind == "error" and got in (NodeErrorCode.UNKNOWN_SESSION,
                                          NodeErrorCode.BAD_REQUEST,
                                          NodeErrorCode.LIMIT_EXCEEDED)
    if victim and a.op in REQUESTS and a.op != NodeOp.OPEN_SESSION and not refused:
        findings.append(Finding(Kind.WRONG, f"{what}: a stranger reached the owner's "
                                                f"session: answered {kind} {got}"))


def _check_owner(findings: list[Finding], owner, s: int, w: Workload, q,
                 devices: int) -> None:
    kind, got = _answer(findings, "owner's ATTEND", lambda: owner.attend(
        s, 0, {h: q[h] for h in HEADS}, {h: list(w.selected) for h in HEADS}))
    if kind != "ok":
        if kind == "error":
            findings.append(Finding(Kind.WRONG, f"owner's ATTEND on its own session failed "
                                                f"with code {got}"))
        return
    want = reference_attend(w, devices)
    for h in HEADS:
        o, lse = got.o[h].tobytes(), got.lse[h].tobytes()  # type: ignore[attr-defined]
        if (o, lse) != want[h]:
            findings.append(Finding(Kind.WRONG, f"owner's ATTEND, KV head {h}: O/LSE differ "
                                                "from one model device's"))


def _check_self(findings: list[Finding], stranger, accepted_late: bool) -> None:
    """A refused request changes nothing: after its requests, the stranger's own STATUS (sent at
    its clock) is answered, unless one of its accepted requests left its link queue busy up to
    the node's horizon."""
    kind, got = _answer(findings, "stranger's STATUS", stranger.status)
    if kind == "error" and not accepted_late:
        findings.append(Finding(Kind.WRONG, f"the stranger's STATUS after its requests was "
                                            f"refused with code {got}: a refused request left "
                                            "a trace"))


def _check_node(findings: list[Finding], node: NodeUnderTest, owner) -> None:
    if not node.alive:
        findings.append(Finding(Kind.CRASH, f"the node exited with status "
                                            f"{node.launcher.proc.returncode}"))
        return
    kind, got = _answer(findings, "STATUS", owner.status)
    if kind == "ok":
        down = [d.index for d in got.devices if not d.alive]  # type: ignore[attr-defined]
        if down:
            findings.append(Finding(Kind.CRASH, f"devices {down} marked down"))
    elif kind == "error":
        findings.append(Finding(Kind.WRONG, f"STATUS failed with code {got}"))
