// C++ harness of the Verilated memory subsystem (rtl/sim/nelssa_ddr5_bench_top.sv): plays a
// request file through the sub-channel controllers, one request per sub-channel per cycle in
// file order, and writes what it measured. Formats: hw/sim/ddr5.py (DDR5_IN / DDR5_OUT).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <vector>

#include "Vnelssa_ddr5_bench_top.h"
#include "verilated.h"

namespace {

constexpr uint32_t kMagicIn = 0x4d44534e;   // "NSDM"
constexpr uint32_t kMagicOut = 0x5244534e;  // "NSDR"
constexpr int kMaxSub = 8;

#pragma pack(push, 1)
struct InHeader {
  uint32_t magic, version, num_sub, num_requests, ncl, ncwl, burst;
  uint64_t max_cycles;
};
struct Request {
  uint8_t sub, write, bg, bank;
  uint16_t row;
  uint8_t col, pad;
  uint32_t arrival;
};
struct OutHeader {
  uint32_t magic, num_sub, violations, reserved;
  uint64_t cycles, simulated_cycles;
  double sim_seconds;
};
struct SubStats {
  uint64_t served, last_done_tck;
};
#pragma pack(pop)

// Bit-field access that works whatever C++ type Verilator picked for a port (it depends on the
// port's width, so on NumSub): plain integers up to 64 bits, VlWide above.
template <typename T>
void clear(T& sig) {
  sig = 0;
}
template <std::size_t N>
void clear(VlWide<N>& sig) {
  for (std::size_t w = 0; w < N; ++w) sig[w] = 0;
}
template <typename T>
void put(T& sig, unsigned lsb, uint64_t value) {
  sig |= static_cast<T>(value << lsb);
}
template <std::size_t N>
void put(VlWide<N>& sig, unsigned lsb, uint64_t value) {
  // fields never straddle more than three 32-bit words (width <= 64)
  const unsigned w = lsb / 32, s = lsb % 32;
  sig[w] |= static_cast<uint32_t>(value << s);
  if (w + 1 < N) sig[w + 1] |= static_cast<uint32_t>((value << s) >> 32);
  if (s && w + 2 < N) sig[w + 2] |= static_cast<uint32_t>(value >> (64 - s));
}
template <typename T>
uint64_t get(const T& sig, unsigned lsb, unsigned width) {
  const uint64_t v = static_cast<uint64_t>(sig) >> lsb;
  return width >= 64 ? v : v & ((uint64_t(1) << width) - 1);
}
template <std::size_t N>
uint64_t get(const VlWide<N>& sig, unsigned lsb, unsigned width) {
  const unsigned w = lsb / 32, s = lsb % 32;
  uint64_t v = sig[w] >> s;
  if (w + 1 < N) v |= static_cast<uint64_t>(sig[w + 1]) << (32 - s);
  if (s && w + 2 < N) v |= static_cast<uint64_t>(sig[w + 2]) << (64 - s);
  return width >= 64 ? v : v & ((uint64_t(1) << width) - 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN_FILE OUT_FILE\n", argv[0]);
    return 2;
  }
  FILE* in = std::fopen(argv[1], "rb");
  InHeader h{};
  if (!in || std::fread(&h, sizeof h, 1, in) != 1 || h.magic != kMagicIn || h.version != 1 ||
      h.num_sub == 0 || h.num_sub > kMaxSub) {
    std::fprintf(stderr, "%s: not a version-1 memory request file\n", argv[1]);
    return 2;
  }
  std::vector<std::deque<Request>> queues(h.num_sub);
  for (uint32_t i = 0; i < h.num_requests; ++i) {
    Request r{};
    if (std::fread(&r, sizeof r, 1, in) != 1 || r.sub >= h.num_sub) {
      std::fprintf(stderr, "%s: request %u truncated or for a missing sub-channel\n", argv[1], i);
      return 2;
    }
    queues[r.sub].push_back(r);
  }
  std::fclose(in);

  auto ctx = std::make_unique<VerilatedContext>();
  auto top = std::make_unique<Vnelssa_ddr5_bench_top>(ctx.get());
  top->clk_i = 0;
  top->rst_ni = 0;
  top->req_valid_i = 0;
  top->eval();
  for (int i = 0; i < 2; ++i) {
    top->clk_i = 1;
    top->eval();
    top->clk_i = 0;
    top->eval();
  }
  top->rst_ni = 1;

  std::vector<SubStats> stats(h.num_sub);
  uint64_t remaining = h.num_requests, cycle = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (remaining > 0) {
    if (h.max_cycles && cycle >= h.max_cycles) {
      std::fprintf(stderr, "memory subsystem did not finish in %llu cycles\n",
                   static_cast<unsigned long long>(h.max_cycles));
      return 3;
    }
    uint32_t valid = 0;
    clear(top->req_write_i);
    clear(top->req_bg_i);
    clear(top->req_bank_i);
    clear(top->req_row_i);
    clear(top->req_col_i);
    for (uint32_t s = 0; s < h.num_sub; ++s) {
      if (queues[s].empty() || queues[s].front().arrival > cycle) continue;
      const Request& r = queues[s].front();
      valid |= 1u << s;
      put(top->req_write_i, s, r.write);
      put(top->req_bg_i, 3 * s, r.bg);
      put(top->req_bank_i, 2 * s, r.bank);
      put(top->req_row_i, 16 * s, r.row);
      put(top->req_col_i, 6 * s, r.col);
    }
    top->req_valid_i = valid;
    top->eval();
    const uint32_t ready = top->req_ready_o;
    const uint32_t served = top->served_o;
    for (uint32_t s = 0; s < h.num_sub; ++s) {
      if ((valid >> s) & (ready >> s) & 1) queues[s].pop_front();
      if ((served >> s) & 1) {
        const uint64_t tck = get(top->served_tck_o, 64 * s, 64);
        const bool wr = (top->served_write_o >> s) & 1;
        const uint64_t done = tck + (wr ? h.ncwl : h.ncl) + h.burst;
        stats[s].served++;
        if (done > stats[s].last_done_tck) stats[s].last_done_tck = done;
        --remaining;
      }
    }
    top->clk_i = 1;
    top->eval();
    top->clk_i = 0;
    ++cycle;
  }
  OutHeader out{};
  out.magic = kMagicOut;
  out.num_sub = h.num_sub;
  out.sim_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.simulated_cycles = cycle;
  top->eval();
  out.violations = top->violations_o;
  for (const auto& s : stats) {
    const uint64_t c = (s.last_done_tck + 3) / 4;
    if (c > out.cycles) out.cycles = c;
  }
  top->final();
  FILE* f = std::fopen(argv[2], "wb");
  if (!f) return 2;
  std::fwrite(&out, sizeof out, 1, f);
  std::fwrite(stats.data(), sizeof(SubStats), stats.size(), f);
  std::fclose(f);
  return 0;
}
