"""nelssa_attn_engine: bit equality with hw/model/engine.py, error bound against float64,
cycles, and malformed streams (error status, never a hang, engine usable afterwards). A long
context (4096 tokens) is tests/test_rtl_engine.py's, on the same engine through its C++
harness: some 20 s of CPU here, under a second there."""

from __future__ import annotations

import json
from dataclasses import asdict

import cocotb
import numpy as np
import pytest
from buses import clock_and_reset, wait_cycles

from nelssa.driver.status import AttnStatus
from nelssa.hw.model import fp
from nelssa.hw.model.engine import FpLatency, pack_stream
from nelssa.hw.model.engine_cycles import command_cycles
from nelssa.hw.sim.rtl_sources import FP_GATED_ARGS

from engine_tb import TB, Command, Workload, assert_error_bound

TOP = "nelssa_attn_engine"
INPUTS = ("cmd_valid_i", "cmd_head_dim_i", "cmd_num_qheads_i", "cmd_num_clusters_i",
          "cmd_scale_i", "clu_valid_i", "clu_tokens_i", "kv_valid_i", "kv_data_i", "kv_last_i",
          "res_ready_i")
WITHIN_CONTRACT = r"\.(?!breaks_)\w+$"
"""cocotb's test filter (searched in module.test): every test but the rule breakers"""


def _dims(tb: TB) -> list[int]:
    return [d for d in (64, 128) if d <= tb.params.head_dim]


def _heads(tb: TB) -> list[int]:
    return sorted({h for h in (1, 4, 8) if h <= tb.params.num_qheads} | {tb.params.num_qheads})


@cocotb.test()
async def directed_shapes(dut):
    """One token in one cluster; head_dim 64 and 128; 1, 4 and 8 query heads; full clusters."""
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(100)
    mx = tb.params.max_cluster_tokens
    for d in _dims(tb):
        for h in _heads(tb):
            for lens in ([1], [mx], [3, 1, mx, 2]):
                await tb.check_workload(Workload.random(rng, d, h, lens))


@cocotb.test()
async def logit_extremes(dut):
    """Large logits (q x 64), tiny logits (q x 1e-4) and all-equal logits (identical keys)."""
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(101)
    d, h = _dims(tb)[-1], tb.params.num_qheads
    for gain in (64.0, 1e-4):
        await tb.check_workload(Workload.random(rng, d, h, [16, 7, 16], q_gain=gain))
    wl = Workload.random(rng, d, h, [5, 9])
    wl.keys = [np.tile(wl.keys[0][:1], (k.shape[0], 1)) for k in wl.keys]
    out = await tb.check_workload(wl)
    # all 14 logits equal: O is the plain mean of the V rows
    v_mean = np.concatenate([fp.as_f32(fp.bf16_to_f32_bits(v)) for v in wl.values]).mean(0)
    assert np.abs(fp.as_f32(out.o) - v_mean).max() <= 1e-5


@cocotb.test()
async def special_values(dut):
    """NaN in q, +Inf in a key, -Inf scores and bf16 subnormals: bits equal the model's."""
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(102)
    d, h = _dims(tb)[-1], tb.params.num_qheads
    cases = []
    wl = Workload.random(rng, d, h, [4, 4])
    wl.q[0, 3] = 0x7FC0  # NaN in head 0 only
    cases.append(wl)
    wl = Workload.random(rng, d, h, [4, 4])
    wl.keys[1][2, 0] = 0x7F80  # +Inf key element
    cases.append(wl)
    wl = Workload.random(rng, d, h, [6])
    wl.q[:, :] = 0x0001  # subnormal q reads as zero: all scores 0, uniform softmax
    wl.values[0][0, :5] = 0x0003
    cases.append(wl)
    wl = Workload.random(rng, d, h, [3, 3])
    wl.keys[0][:, :] = 0xFF80  # -Inf keys: scores are +-Inf or NaN
    cases.append(wl)
    wl = Workload.random(rng, d, h, [4, 5, 6])
    wl.q[:, 0] = 0x3F80
    wl.keys[0][:, 0] = 0xFF80  # a leading cluster scored -Inf: weight 0, result finite
    cases.append(wl)
    for wl in cases:
        await tb.check_workload(wl, bound=False)
    lead = cases[-1]
    out = await tb.run(lead.command())
    assert_error_bound(Workload(lead.q, lead.keys[1:], lead.values[1:], lead.scale),
                       out.o, out.lse)
    nan_o = cases[0]
    out = await tb.run(nan_o.command())
    assert np.all(np.isnan(fp.as_f32(out.o[0]))), "NaN in q must give NaN output for that head"
    if h > 1:
        assert not np.any(np.isnan(fp.as_f32(out.o[1]))), "NaN must not leak to other heads"
        assert_error_bound(Workload(nan_o.q[1:], nan_o.keys, nan_o.values, nan_o.scale),
                           out.o[1:], out.lse[1:])


@cocotb.test()
async def constrained_random(dut):
    """Random shapes back to back, with random gaps on the stream and stalls on the results."""
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(103)
    for _ in range(12):
        d = int(rng.choice(_dims(tb)))
        h = int(rng.integers(1, tb.params.num_qheads + 1))
        lens = rng.integers(1, tb.params.max_cluster_tokens + 1, rng.integers(1, 7)).tolist()
        await tb.check_workload(Workload.random(rng, d, h, lens), rng,
                                kv_gap=float(rng.choice([0.0, 0.3])),
                                res_stall=float(rng.choice([0.0, 0.5])),
                                clu_gap=float(rng.choice([0.0, 0.5, 0.98])))


@cocotb.test()
async def cycle_counts(dut):
    """The engine's cycles for a command equal the model's (hw/model/engine_cycles.py) at the
    latencies it was built with: head_dim 64 and 128, one and all heads, clusters of 1 token,
    full ones and mixed lengths, stream never gapping and results taken as offered."""
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(106)
    mx = tb.params.max_cluster_tokens
    for d in _dims(tb):
        for h in sorted({1, tb.params.num_qheads}):
            for lens in ([1], [mx, mx], [3, 1, mx, 2, 5 % mx + 1]):
                wl = Workload.random(rng, d, h, lens)
                out = await tb.check_workload(wl)
                want = command_cycles(tb.params, d, h, lens)
                assert out.cycles == want, (
                    f"head_dim {d}, {h} heads, clusters {lens}: {out.cycles} cycles, the model "
                    f"says {want}")


def _malformed(tb: TB, rng: np.random.Generator) -> list[tuple[str, Command]]:
    d, h, mx = _dims(tb)[-1], tb.params.num_qheads, tb.params.max_cluster_tokens
    wl = Workload.random(rng, d, h, [3, 2])
    good = wl.command()
    n = len(good.beats)
    q_beats = h * d // 32
    extra = np.concatenate([good.beats, good.beats[:5]])
    return [
        ("last inside Q", Command(d, h, wl.scale, wl.cluster_lens, good.beats,
                                  last_index=q_beats - 2 if q_beats > 1 else 0)),
        ("last at end of Q", Command(d, h, wl.scale, wl.cluster_lens, good.beats,
                                     last_index=q_beats - 1)),
        ("last inside K", Command(d, h, wl.scale, wl.cluster_lens, good.beats,
                                  last_index=q_beats + 2)),
        ("last after first cluster", Command(d, h, wl.scale, wl.cluster_lens, good.beats,
                                             last_index=q_beats + 3 * 2 * d // 32 - 1)),
        ("last one beat early", Command(d, h, wl.scale, wl.cluster_lens, good.beats,
                                        last_index=n - 2)),
        ("five extra beats", Command(d, h, wl.scale, wl.cluster_lens, extra)),
        ("cluster of 0 tokens", Command(d, h, wl.scale, [3, 0], good.beats)),
        ("cluster too long", Command(d, h, wl.scale, [3, mx + 1], good.beats)),
        ("zero clusters", Command(d, h, wl.scale, [], good.beats[:q_beats], num_clusters=0)),
        ("head_dim 96", Command(96, h, wl.scale, wl.cluster_lens, good.beats)),
        ("head_dim 0", Command(0, h, wl.scale, wl.cluster_lens, good.beats)),
        ("zero query heads", Command(d, 0, wl.scale, wl.cluster_lens, good.beats)),
        ("too many query heads", Command(d, h + 1, wl.scale, wl.cluster_lens, good.beats)),
    ]


@cocotb.test()
async def malformed_streams(dut):
    """Every malformed command ends with its specific status and consumes exactly what the
    contract says; a good command right after each one gives the model's bits."""
    tb = TB(dut)
    await tb.reset()
    rng = np.random.default_rng(105)
    d, h = _dims(tb)[-1], tb.params.num_qheads
    for name, cmd in _malformed(tb, rng):
        want = cmd.expected_status(tb.params)
        assert want != AttnStatus.OK, name
        out = await tb.run(cmd, rng, clu_gap=float(rng.choice([0.0, 0.95])), max_cycles=50_000)
        assert out.status == want, f"{name}: status {out.status.name}, expected {want.name}"
        if want in (AttnStatus.ERR_BAD_HEAD_DIM, AttnStatus.ERR_BAD_QHEADS,
                    AttnStatus.ERR_NO_CLUSTERS):
            assert out.kv_consumed == 0 and out.clu_consumed == 0, f"{name}: consumed input"
        else:
            assert out.kv_consumed == cmd.last_index + 1, f"{name}: stream not drained to last"
            assert out.clu_consumed == cmd.num_clusters, f"{name}: cluster entries left"
        await tb.check_workload(Workload.random(rng, d, h, [2, 5]))


async def _offer_then_change(dut, valid: str, field: str) -> None:
    """Offer on ``valid`` with ``field`` = 1 while the engine is not ready, then change the
    field in the next cycle with the offer kept."""
    getattr(dut, valid).value = 1
    getattr(dut, field).value = 1
    await wait_cycles(dut, 1)
    getattr(dut, field).value = 2
    await wait_cycles(dut, 3)


@cocotb.test()
async def breaks_command_changed(dut):
    """A second command offered while the first waits for its stream, its scale changed before
    the engine takes it."""
    await clock_and_reset(dut, INPUTS)
    d = dut
    d.cmd_head_dim_i.value, d.cmd_num_qheads_i.value, d.cmd_num_clusters_i.value = 64, 1, 1
    d.cmd_valid_i.value = 1
    await wait_cycles(dut, 1)  # taken: the engine waits for Q now, not ready for another
    await _offer_then_change(dut, "cmd_valid_i", "cmd_scale_i")


@cocotb.test()
async def breaks_cluster_entry_changed(dut):
    """A cluster entry offered to the idle engine, its length changed while still offered."""
    await clock_and_reset(dut, INPUTS)
    await _offer_then_change(dut, "clu_valid_i", "clu_tokens_i")


@cocotb.test()
async def breaks_beat_changed(dut):
    """A beat offered to the idle engine, its data changed while still offered."""
    await clock_and_reset(dut, INPUTS)
    await _offer_then_change(dut, "kv_valid_i", "kv_data_i")


FIRES = [("breaks_command_changed", {"CmdHeld"}),
         ("breaks_cluster_entry_changed", {"CluKeptStable"}),
         ("breaks_beat_changed", {"KvKeptStable"})]


@pytest.mark.rtl
@pytest.mark.parametrize(("case", "fired"), FIRES, ids=[c for c, _ in FIRES])
def test_attn_engine_assertion_fires(case: str, fired: set[str]):
    """Each input rule of the engine, broken on purpose, fires its assertion (on the build of
    test_attn_engine_small[gated], so no build of its own)."""
    _run(SMALL, test_filter=case, expect_assertion=fired)


def _params(head_dim: int, num_qheads: int, max_cluster_tokens: int) -> dict[str, int]:
    return {"HeadDim": head_dim, "NumQHeads": num_qheads, "MaxClusterTokens": max_cluster_tokens}


SMALL = _params(64, 2, 16)
"""test_attn_engine_small's instance (the rule breakers run on its gated build)."""


PIPELINED = FpLatency(bf16_mul=1, add=3, mul=2, exp2=4, log2=4, recip=4)
"""test_attn_engine_pipelined's latencies: an adder slower than a row of head_dim 64 (the
engine waits, and takes o from the adder's output) but not of 128."""


def _run(params: dict[str, int], test_filter: str | None = None, gated: bool = True,
         expect_assertion: set[str] | None = None,
         latency: FpLatency | None = None, lanes: int = 32) -> None:
    from cocotb_runner import run_cocotb

    latency = latency or FpLatency()
    if latency != FpLatency():
        params = {**params, **latency.rtl_params()}
    if lanes != 32:
        params = {**params, "ComputeLanes": lanes}
    env = {"NELSSA_ENGINE_PARAMS": json.dumps({
        "head_dim": params["HeadDim"], "num_qheads": params["NumQHeads"],
        "max_cluster_tokens": params["MaxClusterTokens"], "latency": asdict(latency),
        "compute_lanes": lanes})}
    # -O0, one C++ file: the runs are short (the small instance's some 3 s of CPU, the full
    # one's 10 s at -Os), and so built the full engine costs some 47 s of CPU with its run
    # instead of some 70 (-Os, split), the small one some 5 s instead of some 28
    run_cocotb(TOP, "test_attn_engine", parameters=params, extra_env=env,
               test_filter=test_filter or WITHIN_CONTRACT,
               build_extra=FP_GATED_ARGS if gated else (), expect_assertion=expect_assertion,
               unoptimized=True, single_compile=True)


@pytest.mark.rtl
def test_attn_engine_full():
    """The device's engine: HeadDim 128, up to 8 query heads, clusters up to 64 tokens, built as
    every simulation builds it (NELSSA_FP_GATED: a unit outputs zero unless its en_i says the
    result is used)."""
    _run(_params(128, 8, 64))


@pytest.mark.rtl
@pytest.mark.parametrize("units", ["gated", "eager"])
def test_attn_engine_small(units):
    """A small instance (HeadDim 64, 2 query heads, clusters up to 16): parameters matter. Also
    built eager, as hardware computes (every unit always), and both builds must match the model
    bit for bit: so no unit output is read while its en_i is low. The en_i conditions do not
    depend on the parameters, so the small instance shows it for all of them."""
    _run(SMALL, test_filter="directed_shapes|constrained_random|malformed_streams|cycle_counts",
         gated=units == "gated")


@pytest.mark.rtl
@pytest.mark.parametrize("units", ["gated", "eager"])
def test_attn_engine_pipelined(units):
    """A small instance with pipelined units (PIPELINED; HeadDim 128 for both head_dims, 2
    query heads, clusters up to 8): the model's bits, the error paths, and the cycles the
    model gives for these latencies; eager too (as test_attn_engine_small), which shows that
    each enable travels with its data (no pipelined result read while its enable is low)."""
    tests = ("directed_shapes|special_values|constrained_random|malformed_streams|cycle_counts"
             if units == "gated" else "directed_shapes|constrained_random")
    _run(_params(128, 2, 8), latency=PIPELINED, test_filter=tests, gated=units == "gated")


NARROW = FpLatency(bf16_mul=1, add=9, mul=2, exp2=1, log2=2, recip=3)
"""test_attn_engine_narrow's latencies: an adder slower than a row of head_dim 64 at 8 lanes
(4 beats of 2 cycles: the engine waits, and takes o from the adder's output)."""


@pytest.mark.rtl
def test_attn_engine_narrow():
    """A narrow datapath (8 of a beat's 32 lanes a cycle: 4 cycles a K or V beat, 2 a result
    beat) with pipelined units, on a small instance (HeadDim 64, 1 query head, clusters up to
    8; the heads' datapaths are copies): the model's bits (the dot products' tree cut in
    chunks, each lane's o and l) and the cycles the model gives for these lanes and latencies;
    the error paths too (a beat's chunks still in flight when the stream ends early). Its
    build and run: 35 s of CPU (cold cache)."""
    _run(_params(64, 1, 8), latency=NARROW, lanes=8,
         test_filter="directed_shapes|special_values|malformed_streams|cycle_counts")


def _ecp5_latency() -> FpLatency:
    """The ECP5 board's latencies (the hardware description's; exp2, log2 and the reciprocal
    staged at 2, their tables read from a register)."""
    from nelssa.emu.latency.description import fp_latency
    from nelssa.hw.fpga.plan import open_flow_board

    return fp_latency(open_flow_board("ecp5-5g-versa").fp_latency)


@pytest.mark.rtl
def test_attn_engine_narrow_row_ram():
    """4 lanes (8 cycles a K or V beat, 4 a result beat) at the ECP5 board's latencies: each
    lane holds 16 words of the output row, so nelssa_attn_vacc keeps them in its RAM form
    (written-word flags for the command's clear, the result read a chunk at a time), which the
    8-lane instance does not reach: the model's bits and cycles."""
    _run(_params(64, 1, 8), latency=_ecp5_latency(), lanes=4,
         test_filter="directed_shapes|special_values|cycle_counts")


def test_pack_stream_layout():
    """Q rows, then K rows and V rows per cluster, 32 lanes per beat."""
    q = np.arange(2 * 64, dtype=np.uint16).reshape(2, 64)
    k = [np.full((1, 64), 7, np.uint16)]
    v = [np.full((1, 64), 9, np.uint16)]
    s = pack_stream(q, k, v)
    assert s.shape == (4 + 2 + 2, 32)
    assert s[1, 0] == 32 and s[4, 0] == 7 and s[6, 31] == 9
