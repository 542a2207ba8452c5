"""The request-level read path of the counted estimate (:mod:`nelssa.hw.model.ddr5_estimate`,
used where the compiled replay is not at hand): a read-only sub-channel whose rows switch often,
served request by request as the controller serves it."""

from __future__ import annotations

import numpy as np

from nelssa.hw.model.ddr5_subchannel import TCK_PER_CYCLE, ControllerConfig
from nelssa.hw.model.ddr5_timing import DDR5Timing

QUEUE_DEPTH = ControllerConfig().read_queue
"""Requests the controller holds (its read queue)."""


READ_PATH_ACTS = 0.75
"""Row openings per request above which a read-only sub-channel is timed request by request
(:func:`read_path`): where nearly every request opens a row, the bus, the ACT rate and the
banks' tRC tie, and no count of the bounds tells how much of the banks' work the 32-entry queue
hides (K and V of small clusters, random lines: the counted bounds were 10 points off)."""


def read_path_wanted(t: DDR5Timing, bank_acts: np.ndarray, reqs: int,
                      bank_tck: np.ndarray) -> bool:
    """Whether a read-only sub-channel is timed by :func:`read_path`: its row openings per
    request reach READ_PATH_ACTS, or its busiest bank's counted visits exceed the data bus
    (a bank the queue fills with its requests serves more of them a visit than the windows
    count: hot rows)."""
    return bool(bank_acts.sum() >= READ_PATH_ACTS * reqs
                or bank_tck.max() > reqs * t.burst_cycles)


def read_path(t: DDR5Timing, bank: np.ndarray, row: np.ndarray, arrival_tck: np.ndarray,
               ) -> float:
    """The last column command (tCK) of a read-only stream served request by request as the
    controller serves it: QUEUE_DEPTH requests queued, entering a cycle apart (and after their
    arrival) as served ones leave; each step serves the queued request whose column command can
    issue first (the oldest of those in the same controller cycle): a row hit when its bank has
    its row open, else a row opening (PRE where another row is open and no queued request wants
    it, after tRAS, tRTP and, for a row left idle, ``close_idle``; then tRP; ACT tRC after the
    bank's last, tRRD_S/tRRD_L after the sub-channel's/bank group's last, four per tFAW; READ
    tRCD after the ACT); every READ tCCD_S after the last, tCCD_L after its bank group's. The
    bank-level rules hold request by request, so this sees what the counts cannot: how many of
    a bank's requests the queue gathers into a visit, and how many banks it leaves to hide a
    row switch behind."""
    n = bank.size
    bpg = t.banks_per_group
    banks, rows, arr = bank.tolist(), row.tolist(), arrival_tck.tolist()
    cyc = TCK_PER_CYCLE
    idle = ControllerConfig().close_idle
    never = -1e18
    act_ok = [never] * t.banks  # last ACT + tRC
    pre_at = [never] * t.banks  # earliest PRE of the open row
    used = [never] * t.banks  # last READ of the open row
    open_row: list[int | None] = [None] * t.banks
    opened = [never] * t.banks  # ACT of the open row
    grp_act = [never] * t.bank_groups
    grp_rd = [never] * t.bank_groups
    faw = [never] * 4
    last_act = last_rd = last_entry = never
    queue: list[tuple[int, float]] = []  # (request, cycle it may be served from, in tCK)
    nxt, end = 0, 0.0
    while nxt < n and len(queue) < QUEUE_DEPTH:
        last_entry = max(arr[nxt], last_entry + cyc)
        queue.append((nxt, last_entry + cyc))
        nxt += 1
    while queue:
        act_rate = max(last_act + t.nRRD_S, faw[0] + t.nFAW)
        wanted = {banks[i] for i, _ in queue if open_row[banks[i]] == rows[i]}
        best = 1e18
        cand: list[tuple[float, int, float | None]] = []
        for k, (i, ready) in enumerate(queue):
            b = banks[i]
            g = b // bpg
            col = max(last_rd + t.nCCD_S, grp_rd[g] + t.nCCD_L, ready)
            if open_row[b] == rows[i]:
                act = None
                rd = max(col, opened[b] + t.nRCD)
            elif b in wanted:
                continue  # the open row is served first
            else:
                pre = (max(pre_at[b], min(ready, used[b] + idle)) + t.nRP
                       if open_row[b] is not None else never)
                act = max(act_ok[b], pre, ready, act_rate, grp_act[g] + t.nRRD_L)
                rd = max(col, act + t.nRCD)
            cand.append((rd, k, act))
            best = min(best, rd)
        first_cycle_end = (best // cyc + 1) * cyc
        rd, k, act = next(c for c in cand if c[0] < first_cycle_end)
        i, _ = queue.pop(k)
        b = banks[i]
        g = b // bpg
        if act is not None:
            last_act = grp_act[g] = opened[b] = act
            faw = [*faw[1:], act]
            act_ok[b] = act + t.nRC
            open_row[b] = rows[i]
            pre_at[b] = act + t.nRAS
        last_rd = grp_rd[g] = used[b] = rd
        pre_at[b] = max(pre_at[b], rd + t.nRTP)
        end = max(end, rd)
        if nxt < n:
            last_entry = max(arr[nxt], rd + cyc, last_entry + cyc)
            queue.append((nxt, last_entry + cyc))
            nxt += 1
    return end
