// C++ harness around the Verilated nelssa_attn_engine (in nelssa_engine_bench_top): reads one
// command (header, cluster lengths, 64-byte beats) from a file, plays it through the engine
// `repeat` times back to back, and writes the status, cycle counts and result beats of the last
// run. Python never toggles signals on this path. File formats: hw/sim/engine.py (HARNESS_IN /
// HARNESS_OUT).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "Vnelssa_engine_bench_top.h"
#include "verilated.h"

namespace {

constexpr uint32_t kMagicIn = 0x45534c4e;   // "NLSE"
constexpr uint32_t kMagicOut = 0x52534c4e;  // "NLSR"
constexpr int kBeatWords = 16;              // 512-bit beat as 32-bit words

struct InHeader {
  uint32_t magic, version, head_dim, num_qheads, num_clusters, scale_bits;
  uint32_t num_lens, num_beats, last_index, repeat, kv_gap_period, max_cycles;
};

struct OutHeader {
  uint32_t magic, status, num_result_beats, kv_consumed, clu_consumed, reserved;
  uint64_t cycles, kv_span, total_cycles;
  double sim_seconds;
};

bool read_all(FILE* f, void* p, size_t n) { return std::fread(p, 1, n, f) == n; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN_FILE OUT_FILE\n", argv[0]);
    return 2;
  }
  FILE* in = std::fopen(argv[1], "rb");
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", argv[1]);
    return 2;
  }
  InHeader h{};
  if (!read_all(in, &h, sizeof h) || h.magic != kMagicIn || h.version != 1) {
    std::fprintf(stderr, "%s: not a version-1 engine command file\n", argv[1]);
    return 2;
  }
  std::vector<uint32_t> lens(h.num_lens);
  std::vector<uint32_t> beats(static_cast<size_t>(h.num_beats) * kBeatWords);
  if (!read_all(in, lens.data(), lens.size() * 4) ||
      !read_all(in, beats.data(), beats.size() * 4)) {
    std::fprintf(stderr, "%s: truncated\n", argv[1]);
    return 2;
  }
  std::fclose(in);

  auto ctx = std::make_unique<VerilatedContext>();
  auto top = std::make_unique<Vnelssa_engine_bench_top>(ctx.get());
  // nelssa_engine_bench_top registers the engine's inputs, so what is applied before a rising
  // edge is what the engine sees in the cycle after it, and the engine's outputs depend only on
  // registers: the datapath is evaluated once per cycle, after the rising edge. (The falling
  // edge is evaluated too, so that the model sees the next rising one; nothing runs there.)
  auto tick = [&]() {
    top->clk_i = 1;
    top->eval();
    top->clk_i = 0;
    top->eval();
  };
  // what the engine sees in a cycle
  struct Inputs {
    bool cmd_valid = false, clu_valid = false, kv_valid = false;
  };
  auto apply = [&](const Inputs& in, uint32_t clu_i, uint32_t kv_i) {
    top->cmd_valid_i = in.cmd_valid;
    top->cmd_head_dim_i = h.head_dim;
    top->cmd_num_qheads_i = h.num_qheads;
    top->cmd_num_clusters_i = h.num_clusters;
    top->cmd_scale_i = h.scale_bits;
    top->clu_valid_i = in.clu_valid;
    top->clu_tokens_i = in.clu_valid ? lens[clu_i] : 0;
    top->kv_valid_i = in.kv_valid;
    if (kv_i < h.num_beats) {
      for (int w = 0; w < kBeatWords; ++w) {
        top->kv_data_i[w] = beats[static_cast<size_t>(kv_i) * kBeatWords + w];
      }
      top->kv_last_i = (kv_i == h.last_index);
    }
    top->res_ready_i = 1;
  };
  top->clk_i = 0;
  top->rst_ni = 0;
  apply(Inputs{}, 0, h.num_beats);
  top->eval();
  for (int i = 0; i < 3; ++i) tick();
  top->rst_ni = 1;
  tick();

  OutHeader out{};
  out.magic = kMagicOut;
  std::vector<uint32_t> results;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t rep = 0; rep < h.repeat; ++rep) {
    bool cmd_pending = true;
    uint32_t clu_i = 0, kv_i = 0;
    uint64_t cycles = 0, accepted_at = 0, first_kv = 0, last_kv = 0;
    bool any_kv = false, done = false;
    results.clear();
    auto offer = [&](uint64_t cycle) {
      const bool gap = h.kv_gap_period && (cycle % h.kv_gap_period) == h.kv_gap_period - 1;
      Inputs in;
      in.cmd_valid = cmd_pending;
      in.clu_valid = clu_i < h.num_lens;
      in.kv_valid = kv_i < h.num_beats && !gap;
      apply(in, clu_i, kv_i);
      return in;
    };
    Inputs cur = offer(0);  // reaches the engine after one edge, at which it is idle
    tick();
    ++out.total_cycles;
    while (!done) {
      if (cur.cmd_valid && top->cmd_ready_o) {
        cmd_pending = false;
        accepted_at = cycles;
      }
      if (cur.clu_valid && top->clu_ready_o) ++clu_i;
      if (cur.kv_valid && top->kv_ready_o) {
        if (!any_kv) first_kv = cycles;
        any_kv = true;
        last_kv = cycles;
        ++kv_i;
      }
      if (top->res_valid_o) {
        for (int w = 0; w < kBeatWords; ++w) results.push_back(top->res_data_o[w]);
      }
      if (top->done_o) {
        done = true;
        out.status = top->status_o;
      }
      if (done) {
        cur = Inputs{};
        apply(cur, 0, h.num_beats);
      } else {
        cur = offer(cycles + 1);
      }
      tick();
      ++cycles;
      ++out.total_cycles;
      if (h.max_cycles && cycles >= h.max_cycles) {
        std::fprintf(stderr, "engine hung: no done_o after %u cycles\n", h.max_cycles);
        return 3;
      }
    }
    out.cycles = cycles - accepted_at;
    out.kv_span = any_kv ? last_kv - first_kv + 1 : 0;
    out.kv_consumed = kv_i;
    out.clu_consumed = clu_i;
  }
  out.sim_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.num_result_beats = static_cast<uint32_t>(results.size() / kBeatWords);
  top->final();

  FILE* f = std::fopen(argv[2], "wb");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", argv[2]);
    return 2;
  }
  std::fwrite(&out, sizeof out, 1, f);
  std::fwrite(results.data(), 4, results.size(), f);
  std::fclose(f);
  return 0;
}
