// C ABI around the Verilated PNM device (rtl/sim/nelssa_device_sim.sv), built as a shared
// library and loaded by hw/sim/device.py. Port messages are the bytes of driver/cxl.py:
// a channel byte, then the channel's little-endian fields. The harness queues pushed messages,
// drives them into the device's valid/ready ports one per channel per cycle, always accepts
// responses, and encodes them for nelssa_dev_pop. Python never toggles a signal. Opcodes go to
// the device as they are: the RTL answers undefined ones itself (as the model does).
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "Vnelssa_device_sim.h"
#include "verilated.h"
#if NELSSA_TRACE && NELSSA_TRACE_FST
#include "verilated_fst_c.h"
using TraceFile = VerilatedFstC;
#elif NELSSA_TRACE
#include "verilated_vcd_c.h"
using TraceFile = VerilatedVcdC;
#endif

namespace {

enum Channel : uint8_t { M2S_REQ = 0, M2S_RWD = 1, S2M_NDR = 2, S2M_DRS = 3, MMIO_REQ = 4,
                         MMIO_RSP = 5 };
constexpr size_t kReqBytes = 12;    // channel, opcode, tag u16, addr u64
constexpr size_t kRwdBytes = 84;    // channel, opcode, tag, addr, byte enables u64, 64 data
constexpr size_t kMmioBytes = 12;   // channel, opcode, tag, offset u32, value u32
constexpr uint8_t kMmioWrite = 1;  // posted: the only request the device does not answer

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void put_le(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

struct Device {
  std::unique_ptr<VerilatedContext> ctx;
  std::unique_ptr<Vnelssa_device_sim> top;
  std::deque<std::vector<uint8_t>> req, rwd, mmio, out;
  uint64_t cycle = 0;
  uint64_t owed = 0;  // responses the device still owes (MMIO reads, CXL.mem requests)
  std::string stopped;  // why the simulation stopped; nothing runs after it is set
  std::string error;    // the last error any call reported
#if NELSSA_TRACE
  std::unique_ptr<TraceFile> trace;
#endif
};

void dump(Device& d, uint64_t t) {
#if NELSSA_TRACE
  if (d.trace) d.trace->dump(t);
#else
  (void)d;
  (void)t;
#endif
}

std::string g_error;
int g_live = 0;  // devices alive in this process: the DPI backing store is one per process

}  // namespace

extern "C" void nelssa_store_clear();

namespace {

void step(Device& d) {
  auto& t = *d.top;
  t.mmio_valid_i = !d.mmio.empty();
  if (!d.mmio.empty()) {
    const uint8_t* m = d.mmio.front().data();
    t.mmio_opcode_i = m[1];
    t.mmio_tag_i = static_cast<uint16_t>(le(m + 2, 2));
    t.mmio_offset_i = static_cast<uint32_t>(le(m + 4, 4));
    t.mmio_wdata_i = static_cast<uint32_t>(le(m + 8, 4));
  }
  t.req_valid_i = !d.req.empty();
  if (!d.req.empty()) {
    const uint8_t* m = d.req.front().data();
    t.req_opcode_i = m[1];
    t.req_tag_i = static_cast<uint16_t>(le(m + 2, 2));
    t.req_addr_i = le(m + 4, 8);
  }
  t.rwd_valid_i = !d.rwd.empty();
  if (!d.rwd.empty()) {
    const uint8_t* m = d.rwd.front().data();
    t.rwd_opcode_i = m[1];
    t.rwd_tag_i = static_cast<uint16_t>(le(m + 2, 2));
    t.rwd_addr_i = le(m + 4, 8);
    t.rwd_be_i = le(m + 12, 8);
    for (int w = 0; w < 16; ++w) t.rwd_data_i[w] = static_cast<uint32_t>(le(m + 20 + 4 * w, 4));
  }
  t.mmio_rsp_ready_i = 1;
  t.ndr_ready_i = 1;
  t.drs_ready_i = 1;
  t.eval();
  dump(d, 2 * d.cycle);
  if (t.mmio_valid_i && t.mmio_ready_o) d.mmio.pop_front();
  if (t.req_valid_i && t.req_ready_o) d.req.pop_front();
  if (t.rwd_valid_i && t.rwd_ready_o) d.rwd.pop_front();
  if (t.mmio_rsp_valid_o) {
    std::vector<uint8_t> m{MMIO_RSP};
    put_le(m, t.mmio_rsp_tag_o, 2);
    m.push_back(t.mmio_rsp_status_o);
    put_le(m, t.mmio_rsp_data_o, 4);
    d.out.push_back(std::move(m));
    --d.owed;
  }
  if (t.ndr_valid_o) {
    std::vector<uint8_t> m{S2M_NDR, t.ndr_opcode_o};
    put_le(m, t.ndr_tag_o, 2);
    m.push_back(t.ndr_status_o);
    d.out.push_back(std::move(m));
    --d.owed;
  }
  if (t.drs_valid_o) {
    std::vector<uint8_t> m{S2M_DRS, t.drs_opcode_o};
    put_le(m, t.drs_tag_o, 2);
    m.push_back(t.drs_status_o);
    for (int w = 0; w < 16; ++w) put_le(m, t.drs_data_o[w], 4);
    d.out.push_back(std::move(m));
    --d.owed;
  }
  t.clk_i = 1;
  t.eval();
  dump(d, 2 * d.cycle + 1);
  t.clk_i = 0;
  ++d.cycle;
  if (d.ctx->gotError() || d.ctx->gotFinish()) {
    d.stopped = "the simulation stopped (an assertion or timing violation; see stderr)";
    d.error = d.stopped;
  }
}

bool busy(const Device& d) {
  return !d.req.empty() || !d.rwd.empty() || !d.mmio.empty() || d.owed > 0 || !d.top->idle_o;
}

}  // namespace

extern "C" {

// A device out of reset, or null (nelssa_dev_last_error says why).
void* nelssa_dev_create() {
  if (g_live > 0) {
    g_error = "one simulated device per process (its memory is the process's DPI store)";
    return nullptr;
  }
  nelssa_store_clear();
  ++g_live;
  auto d = std::make_unique<Device>();
  d->ctx = std::make_unique<VerilatedContext>();
  d->ctx->fatalOnError(false);
#if NELSSA_TRACE
  d->ctx->traceEverOn(true);
#endif
  d->top = std::make_unique<Vnelssa_device_sim>(d->ctx.get());
  auto& t = *d->top;
  t.clk_i = 0;
  t.rst_ni = 0;
  t.eval();
  for (int i = 0; i < 2; ++i) {
    t.clk_i = 1;
    t.eval();
    t.clk_i = 0;
    t.eval();
  }
  t.rst_ni = 1;
  return d.release();
}

void nelssa_dev_destroy(void* h) {
  auto* d = static_cast<Device*>(h);
  if (!d) return;
#if NELSSA_TRACE
  if (d->trace) d->trace->close();
#endif
  d->top->final();
  delete d;
  --g_live;
}

const char* nelssa_dev_last_error(void* h) {
  return h ? static_cast<Device*>(h)->error.c_str() : g_error.c_str();
}

// Queue one host-to-device message. 0, or -1 for a malformed message (see last_error).
int nelssa_dev_push(void* h, const uint8_t* msg, uint32_t len) {
  auto* d = static_cast<Device*>(h);
  if (len == 0) {
    d->error = "empty message";
    return -1;
  }
  const uint8_t ch = msg[0];
  std::vector<uint8_t> m(msg, msg + len);
  // (any opcode goes on: the device answers an undefined one with an error)
  if (ch == M2S_REQ && len == kReqBytes) {
    d->req.push_back(std::move(m));
    ++d->owed;
  } else if (ch == M2S_RWD && len == kRwdBytes) {
    d->rwd.push_back(std::move(m));
    ++d->owed;
  } else if (ch == MMIO_REQ && len == kMmioBytes) {
    if (msg[1] != kMmioWrite) ++d->owed;  // reads, and undefined opcodes (an error answer)
    d->mmio.push_back(std::move(m));
  } else {
    d->error = "not a host-to-device message: channel " + std::to_string(ch) + ", opcode " +
               std::to_string(len > 1 ? msg[1] : -1) + ", " + std::to_string(len) + " bytes";
    return -1;
  }
  return 0;
}

// Copy the oldest device-to-host message into buf; its length, 0 if none, -1 if buf is small.
int nelssa_dev_pop(void* h, uint8_t* buf, uint32_t cap) {
  auto* d = static_cast<Device*>(h);
  if (d->out.empty()) return 0;
  const auto& m = d->out.front();
  if (m.size() > cap) return -1;
  std::memcpy(buf, m.data(), m.size());
  const int n = static_cast<int>(m.size());
  d->out.pop_front();
  return n;
}

// Run cycles; 0, or -1 if the simulation stopped (see last_error).
int nelssa_dev_run(void* h, uint64_t cycles) {
  auto* d = static_cast<Device*>(h);
  for (uint64_t i = 0; i < cycles && d->stopped.empty(); ++i) step(*d);
  if (!d->stopped.empty()) d->error = d->stopped;
  return d->stopped.empty() ? 0 : -1;
}

// Run until nothing is queued, owed or in flight; cycles run, or -1 (stopped) or -2 (timeout).
int64_t nelssa_dev_run_until_idle(void* h, uint64_t max_cycles) {
  auto* d = static_cast<Device*>(h);
  uint64_t n = 0;
  if (!d->stopped.empty()) {
    d->error = d->stopped;
    return -1;
  }
  while (busy(*d)) {
    if (n >= max_cycles) return -2;
    step(*d);
    ++n;
    if (!d->stopped.empty()) return -1;
  }
  return static_cast<int64_t>(n);
}

// Run until idle and the DRAM controllers hold no request (every write is in the backing
// store, so a backdoor access sees and keeps what the front door wrote); cycles run, or -1
// (stopped) or -2 (timeout).
int64_t nelssa_dev_drain(void* h, uint64_t max_cycles) {
  auto* d = static_cast<Device*>(h);
  uint64_t n = 0;
  if (!d->stopped.empty()) {
    d->error = d->stopped;
    return -1;
  }
  while (busy(*d) || !d->top->mem_quiet_o) {
    if (n >= max_cycles) return -2;
    step(*d);
    ++n;
    if (!d->stopped.empty()) return -1;
  }
  return static_cast<int64_t>(n);
}

// Start writing a waveform (FST or VCD, as built) to path; 0, or -1 (see last_error).
int nelssa_dev_trace_open(void* h, const char* path) {
  auto* d = static_cast<Device*>(h);
#if NELSSA_TRACE
  if (d->trace) d->trace->close();
  d->trace = std::make_unique<TraceFile>();
  d->top->trace(d->trace.get(), 99);
  d->trace->open(path);
  if (!d->trace->isOpen()) {
    d->trace.reset();
    d->error = std::string("cannot open waveform file ") + path;
    return -1;
  }
  return 0;
#else
  (void)path;
  d->error = "this device library was built without waveform support";
  return -1;
#endif
}

// Stop writing the waveform (the file is complete after this).
void nelssa_dev_trace_close(void* h) {
#if NELSSA_TRACE
  auto* d = static_cast<Device*>(h);
  if (d->trace) {
    d->trace->close();
    d->trace.reset();
  }
#else
  (void)h;
#endif
}

uint64_t nelssa_dev_cycle(void* h) { return static_cast<Device*>(h)->cycle; }

uint32_t nelssa_dev_violations(void* h) { return static_cast<Device*>(h)->top->violations_o; }

// Each DDR5 sub-channel controller's performance counters (nelssa_ddr5_pkg::ddr5_perf_t, its
// fields in nelssa.gen.PERF_FIELDS order: commands, then residency cycles): 8 x 9 values into
// out, sub-channel 0 first. In the packed array sub-channel s holds bits [432 s, 432 s + 432);
// within it the first field is the most significant.
void nelssa_dev_ddr5_counts(void* h, uint64_t* out) {
  constexpr int kFields = 9, kWidth = 48;
  const auto& perf = static_cast<Device*>(h)->top->ddr5_perf_o;
  for (int s = 0; s < 8; ++s) {
    for (int f = 0; f < kFields; ++f) {
      const int lsb = s * kFields * kWidth + (kFields - 1 - f) * kWidth;
      uint64_t v = 0;
      for (int b = 0; b < kWidth; ++b) {
        const int bit = lsb + b;
        v |= static_cast<uint64_t>((perf[bit / 32] >> (bit % 32)) & 1u) << b;
      }
      out[s * kFields + f] = v;
    }
  }
}

}  // extern "C"
