"""The adaptive evaluation's --points filter (nelssa/experiments/adaptive_eval.py): points selected
by a piece of 'WORKLOAD at LOAD' (case-insensitive), none run or loaded for the others; a filter
matching no point refused with exit 2 naming it. Its step make-up
(emu/serving/sweeps.step_makeup): under a prefill backlog the step time is the prefill chunks'."""

from __future__ import annotations

from pathlib import Path

import pytest

from nelssa.experiments import adaptive_eval as ae


def test_points_are_selected_by_a_piece_of_their_name() -> None:
    pts = ae.points(1.0)
    names = [ae.label(w, ld) for w, ld, _, _ in pts]
    assert len(names) == len(set(names)) == 42
    got = ae.select(pts, ["SYNTHETIC, first 1200 at Poisson 3/s", "1 PNM at Poisson 8"])
    assert [ae.label(w, ld) for w, ld, _, _ in got] == [
        "synthetic, first 1200 at Poisson 3/s",
        "conversation, first 1200, disaggregated (8 prefill GPUs), 1 PNM at Poisson 8/s",
        "long-fraction 24 %, disaggregated (8 prefill GPUs), 1 PNM at Poisson 8/s"]
    assert ae.select(pts, None) == pts


def test_a_filter_matching_no_point_is_refused_naming_it(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        ae.main(["--points", "synthetic", "no such point"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--points 'no such point' matches no point" in err and "Traceback" not in err
    assert "'synthetic'" not in err


def test_step_makeup_finds_the_prefill_chunks_under_a_backlog() -> None:
    """The 200-request conversation head: at 0.2/s most step time is decode-only steps; at 4/s
    (a backlog of prompts) over 80 % is in steps carrying a chunk, and the PNM tier's part of a
    step is a small share of it."""
    from nelssa.emu.serving.config import ServingConfig
    from nelssa.emu.serving.sweeps import step_makeup
    from nelssa.emu.serving.workload import load_trace, poisson

    trace = load_trace(Path(__file__).resolve().parent / "data/mooncake_conversation_head.jsonl",
                       hash_ids=True)
    lm, cfg = ae._latency(), ServingConfig(mode="nelssa")
    calm = step_makeup(lm, poisson(trace, 0.2, 0), cfg)
    rush = step_makeup(lm, poisson(trace, 4.0, 0), cfg)
    assert calm["chunk_share"] < 0.5 < 0.8 < rush["chunk_share"]
    assert 0 < rush["pnm_ms"] < 0.5 * rush["step_ms"] and rush["gpu_attn_ms"] > 0
