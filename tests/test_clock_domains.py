"""Clock domains of a PNM node (host/pnm_node/domains.py): a bad ticket is refused, members'
ATTENDs start in emulated time order under conservative synchronization, K members each waiting
on a reply never deadlock, a member that leaves or stalls stops holding the others, and a
stranger's times do not move with a domain's load."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from node_helpers import FakeSlot, NodeProcess

from nelssa.emu.link.transport import ServiceError, ServiceRequest
from nelssa.experiments.node_sharing import load_head
from nelssa.host.pnm_node.client import NodeClient
from nelssa.host.pnm_node.config import NodeConfig
from nelssa.host.pnm_node.dispatch import DeviceQueues, DeviceWork
from nelssa.host.pnm_node.domains import DomainTable, MemberState
from nelssa.host.pnm_node.errors import ClockDomainError
from nelssa.host.pnm_node.protocol import NodeErrorCode, NodeOp

LOOKAHEAD = 1_500_000  # roce: 1.5 us




class _Domain:
    """A domain table over one fake device; ``attend`` plays an ATTEND's arrival and hold."""

    def __init__(self, members: int, stall_s: float = 600.0) -> None:
        self.slot = FakeSlot(0)
        self.dispatcher = DeviceQueues([self.slot], 1 << 30)  # type: ignore[list-item]
        cfg = NodeConfig(devices=("x",), domain_stall_s=stall_s)
        self.table = DomainTable(cfg, LOOKAHEAD, self.dispatcher)
        self.ticket = self.table.open(b"owner", members)
        self.started: list[str] = []  # in the order the device ran them
        self.committed: list[str] = []  # in the order their emulated times were committed

    def attend(self, client: bytes, sent: int, name: str) -> Any:
        r = ServiceRequest(NodeOp.ATTEND, b"", sent + LOOKAHEAD, sent, client)
        got = self.table.arrived(client, r)
        assert got is not None
        domain, member = got
        part = DeviceWork(self.slot, lambda _: self.started.append(name), 0)  # type: ignore[arg-type]
        return domain.hold(member, r.arrive_ps, [part], lambda _: self.committed.append(name))


def test_a_bad_ticket_is_refused_and_a_late_join_too() -> None:
    d = _Domain(1)
    with pytest.raises(ServiceError, match="unknown clock-domain ticket") as e:
        d.table.join(b"a", b"\0" * 16)
    assert e.value.code == NodeErrorCode.DOMAIN_REFUSED
    d.table.join(b"a", d.ticket)
    with pytest.raises(ServiceError, match="already in a clock domain"):
        d.table.join(b"a", d.ticket)
    with pytest.raises(ServiceError, match="has started"):  # the domain has its one member
        d.table.join(b"b", d.ticket)
    with pytest.raises(ServiceError, match="not in a clock domain"):
        d.table.leave(b"b")
    with pytest.raises(ServiceError, match=r"1\.\.64"):
        d.table.open(b"owner", 0)


def test_members_work_starts_in_emulated_time_order() -> None:
    d = _Domain(2)
    d.table.join(b"a", d.ticket)
    d.table.join(b"b", d.ticket)
    late = d.attend(b"a", 5_000_000, "a@5us")  # a is ahead: held, b may still send earlier
    time.sleep(0.05)
    assert not late.future.done() and d.started == []
    early = d.attend(b"b", 1_000_000, "b@1us")  # starts: a promised nothing before 5 us
    early.future.result(5)
    assert not late.future.done()  # b may still send something before 5 us
    d.attend(b"b", 7_000_000, "b@7us")  # b's next is past it: a's starts, b's waits on a
    late.future.result(5)
    time.sleep(0.05)
    assert d.started == ["b@1us", "a@5us"] and d.committed == d.started
    with pytest.raises(ServiceError, match="went back"):  # a member's stamps never decrease
        d.table.arrived(b"b", ServiceRequest(NodeOp.ATTEND, b"", 2 * LOOKAHEAD, LOOKAHEAD, b"b"))
    d.table.leave(b"a")  # a leaves: b's waits on no one
    time.sleep(0.05)
    assert d.started == ["b@1us", "a@5us", "b@7us"]


def test_k_members_each_waiting_on_a_reply_do_not_deadlock() -> None:
    """K members, each sending an ATTEND, waiting for its reply, then sending the next a step
    of its own later (rounds of them), two of them at equal stamps, then leaving: every ATTEND
    starts, in emulated time order (ties by join rank)."""
    k, rounds = 4, 5
    d = _Domain(k)
    names = [bytes([65 + i]) for i in range(k)]
    for n in names:
        d.table.join(n, d.ticket)
    clock = dict(zip(names, [9_000_000, 7_000_000, 3_000_000, 3_000_000], strict=True))
    step = dict(zip(names, [2_000_000, 5_000_000, 3_000_000, 3_000_000], strict=True))
    sent = {n: 1 for n in names}
    jobs = {n: d.attend(n, clock[n], f"{n.decode()}@{clock[n]}") for n in names}
    deadline = time.monotonic() + 10
    while jobs:  # each member sends its next once its reply came
        assert time.monotonic() < deadline, f"deadlock: {d.started}"
        for n, job in list(jobs.items()):
            if not job.future.done():
                continue
            if sent[n] == rounds:
                del jobs[n]
                d.table.leave(n)
                continue
            clock[n] += step[n]
            sent[n] += 1
            jobs[n] = d.attend(n, clock[n], f"{n.decode()}@{clock[n]}")
        time.sleep(0.005)
    time.sleep(0.05)
    assert len(d.started) == k * rounds and d.committed == d.started
    key = [(int(x.split("@")[1]), names.index(x[0].encode())) for x in d.started]
    assert key == sorted(key)


def test_a_member_that_stalls_stops_holding_the_others() -> None:
    d = _Domain(2, stall_s=0.2)
    d.table.join(b"a", d.ticket)
    d.table.join(b"b", d.ticket)
    job = d.attend(b"a", 1_000_000, "a")  # waits on b, which never sends
    time.sleep(0.3)
    assert not job.future.done()
    d.table.tick()
    job.future.result(5)
    member = d.table._of[b"b"][1]
    assert member.state is MemberState.EXPELLED
    with pytest.raises(ServiceError, match="removed from its clock domain"):
        d.table.arrived(b"b", ServiceRequest(NodeOp.ATTEND, b"", 9 * LOOKAHEAD, LOOKAHEAD, b"b"))


def test_a_promise_releases_others() -> None:
    d = _Domain(2)
    d.table.join(b"a", d.ticket)
    d.table.join(b"b", d.ticket)
    job = d.attend(b"a", 4_000_000, "a")
    time.sleep(0.05)
    assert not job.future.done()
    d.table.promise(b"b", ServiceRequest(NodeOp.DOMAIN_PROMISE, b"", 4_000_000, 3_000_000, b"b"))
    time.sleep(0.05)  # b may still arrive from 3 us + 1.5 us of link: before a's 5.5 us
    assert not job.future.done()
    d.table.promise(b"b", ServiceRequest(NodeOp.DOMAIN_PROMISE, b"", 6_000_000, 4_500_000, b"b"))
    job.future.result(5)  # nothing of b arrives before 6 us now


def test_a_strangers_times_do_not_move_with_a_domains_load(tmp_path: Path) -> None:
    """Two members and a stranger on one device, the same request each at the same emulated
    time: the members queue behind each other in emulated time; the stranger does not."""
    node = NodeProcess(f"ipc://{tmp_path}/node", 1, "model")
    try:
        with NodeClient(node.endpoint, timeout_s=120) as owner, \
                NodeClient(node.endpoint, timeout_s=120) as a, \
                NodeClient(node.endpoint, timeout_s=120) as b, \
                NodeClient(node.endpoint, timeout_s=120) as stranger:
            ticket = owner.domain_open(2)
            with pytest.raises(ClockDomainError, match="unknown clock-domain ticket"):
                stranger.domain_join(bytes(16))
            a.domain_join(ticket)
            b.domain_join(ticket)
            heads = {c: load_head(c, 0, 16, 32, seed=1) for c in (a, b, stranger)}
            ids = {0: list(range(16))}
            send = 10**9  # after everyone's set-up
            fs = {c: c.attend_async(s, 0, {0: q}, ids, send_ps=send)
                  for c, (s, q) in heads.items()}
            res = {c: f.result() for c, f in fs.items()}
            alone = res[stranger].timing
            assert alone.queue_ps == 0
            first, second = sorted((res[a].timing, res[b].timing), key=lambda t: t.queue_ps)
            assert first.queue_ps == 0
            # the second member's request starts when the first's ends on the device
            assert second.queue_ps == pytest.approx(first.cxl_ps + first.device_ps, abs=2000)
            # the stranger ran on the same device at the same emulated time, in its own timeline
            assert alone.total_ps < second.total_ps
            a.domain_leave()
            b.domain_leave()
    finally:
        node.stop()


def test_no_client_takes_every_clock_domain() -> None:
    """Issue 44, defect 18: the node's clock domains were bounded for all clients together, so
    one client opening max_clients of them left none for anyone else. Each client may have
    max_client_domains open; others still open theirs."""
    slot = FakeSlot(0)
    cfg = NodeConfig(devices=("x",), max_clients=8)
    table = DomainTable(cfg, LOOKAHEAD, DeviceQueues([slot], 1 << 30))  # type: ignore[list-item]
    mine = []
    with pytest.raises(ServiceError, match="max_client") as e:
        for _ in range(cfg.max_clients + 1):  # as many as the node lets one client open
            mine.append(table.open(b"flood", 1))
    assert e.value.code == NodeErrorCode.LIMIT_EXCEEDED
    theirs = table.open(b"other", 1)  # another client still opens one, and joins it
    table.join(b"other", theirs)
    assert "max_client_domains" in str(e.value) and len(mine) < cfg.max_clients
    # a domain whose members have all left is closed: its opener may open another
    table.join(b"m", mine[0])
    table.leave(b"m")
    table.open(b"flood", 1)
