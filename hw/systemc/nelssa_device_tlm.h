// The NELSSA PNM device as a SystemC TLM-2.0 target (docs/systemc.md). One target socket maps
// the two windows the board's PCIe BARs map (rtl/top/nelssa_fpga_top.sv):
//   [REG_BASE, REG_BASE + REG_BYTES)  the register file (include/nelssa_csr.h), 32-bit loads and
//                                     stores; a 64-bit access is two, low word first;
//   [MEM_BASE, MEM_BASE + MEM_WINDOW) the HDM window: device memory through the device's own
//                                     CXL.mem front end (64-byte lines, byte enables; an
//                                     access that spans lines is split into lines, in order);
//                                     the device answers beyond MEM_SIZE with an address error.
// Behind it, the Verilated RTL device (rtl/sim/nelssa_device_sim.sv in the shared library
// hw/sim/device_harness.cpp builds; its C ABI below), stepped once per rising edge of `clk`:
// cycle-accurate, a transaction takes the device cycles it takes. `irq` rises when the device
// has gone quiet after a doorbell (every submitted descriptor's completion written) and falls
// when the host writes CQ_HEAD: a completion interrupt coalesced per doorbell, as a driver
// expects (the RTL has no interrupt pin; this is its idle output, as the harness sees it).
#ifndef NELSSA_DEVICE_TLM_H
#define NELSSA_DEVICE_TLM_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/simple_target_socket.h>

#include "nelssa_csr.h"

extern "C" {
void* nelssa_dev_create();
void nelssa_dev_destroy(void* h);
const char* nelssa_dev_last_error(void* h);
int nelssa_dev_push(void* h, const uint8_t* msg, uint32_t len);
int nelssa_dev_pop(void* h, uint8_t* buf, uint32_t cap);
int nelssa_dev_run(void* h, uint64_t cycles);
int64_t nelssa_dev_run_until_idle(void* h, uint64_t max_cycles);
uint64_t nelssa_dev_cycle(void* h);
uint32_t nelssa_dev_violations(void* h);
long long nelssa_store_dump(long long* keys, uint8_t* data, long long max);
}

namespace nelssa {

class Device : public sc_core::sc_module {
 public:
  static constexpr uint64_t REG_BASE = 0;
  static constexpr uint64_t REG_BYTES = 0x1000;
  static constexpr uint64_t MEM_WINDOW = uint64_t{1} << 40;  // device addresses are 40 bits
  static constexpr uint64_t MEM_BASE = MEM_WINDOW;            // above the registers
  static constexpr unsigned LINE = 64;

  tlm_utils::simple_target_socket<Device> socket;
  sc_core::sc_in<bool> clk;
  sc_core::sc_out<bool> irq;

  SC_HAS_PROCESS(Device);
  explicit Device(sc_core::sc_module_name name) : sc_module(name), socket("socket"),
                                                  clk("clk"), irq("irq") {
    h_ = nelssa_dev_create();
    if (!h_) throw std::runtime_error(nelssa_dev_last_error(nullptr));
    socket.register_b_transport(this, &Device::b_transport);
    socket.register_get_direct_mem_ptr(this, &Device::get_direct_mem_ptr);
    SC_METHOD(tick);
    sensitive << clk.pos();
    dont_initialize();
  }
  ~Device() override { nelssa_dev_destroy(h_); }

  uint64_t cycle() const { return nelssa_dev_cycle(h_); }
  uint32_t violations() const { return nelssa_dev_violations(h_); }
  // Every line of device memory ever written, as the DRAM store keeps it (its key: the DRAM
  // coordinates; hw/sim/device.py maps keys back to addresses).
  void dump_store(std::vector<long long>& keys, std::vector<uint8_t>& data) const {
    long long n = nelssa_store_dump(nullptr, nullptr, 0);
    keys.resize(n);
    data.resize(n * LINE);
    nelssa_store_dump(keys.data(), data.data(), n);
  }

 private:
  enum : uint8_t { M2S_REQ = 0, M2S_RWD = 1, S2M_NDR = 2, S2M_DRS = 3, MMIO_REQ = 4,
                   MMIO_RSP = 5 };
  struct Rsp {
    bool done = false;
    uint8_t status = 0;
    uint32_t value = 0;
    uint8_t data[LINE] = {};
  };

  void* h_;
  std::deque<std::vector<uint8_t>> queued_;  // messages for the next rising edge
  std::map<uint16_t, Rsp> waiting_;          // by tag
  uint16_t next_tag_ = 0;
  sc_core::sc_event answered_;
  bool doorbell_ = false;
  bool ack_ = false;  // the host wrote CQ_HEAD since the last edge

  static void put(std::vector<uint8_t>& m, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) m.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  static uint64_t get(const uint8_t* p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }

  // one device cycle per rising edge: the messages queued since the last edge go in, the
  // device runs a cycle, its answers wake the transactions waiting for them
  void tick() {
    for (auto& m : queued_) {
      if (nelssa_dev_push(h_, m.data(), static_cast<uint32_t>(m.size())) != 0)
        SC_REPORT_FATAL("nelssa", nelssa_dev_last_error(h_));
    }
    queued_.clear();
    if (nelssa_dev_run(h_, 1) != 0) SC_REPORT_FATAL("nelssa", nelssa_dev_last_error(h_));
    uint8_t buf[128];
    bool any = false;
    while (int n = nelssa_dev_pop(h_, buf, sizeof buf)) {
      if (n < 0) SC_REPORT_FATAL("nelssa", "device message larger than its buffer");
      const bool mmio = buf[0] == MMIO_RSP;
      auto it = waiting_.find(static_cast<uint16_t>(get(buf + (mmio ? 1 : 2), 2)));
      if (it == waiting_.end()) SC_REPORT_FATAL("nelssa", "device answered an unknown tag");
      Rsp& r = it->second;
      r.done = true;
      r.status = buf[mmio ? 3 : 4];
      if (mmio) r.value = static_cast<uint32_t>(get(buf + 4, 4));
      if (buf[0] == S2M_DRS) std::memcpy(r.data, buf + 5, LINE);
      any = true;
    }
    if (any) answered_.notify(sc_core::SC_ZERO_TIME);
    if (ack_) {
      ack_ = false;
      irq.write(false);
    }
    // quiet: nothing queued, owed or in flight (the harness's run_until_idle runs no cycle)
    if (doorbell_ && nelssa_dev_run_until_idle(h_, 0) == 0) {
      doorbell_ = false;
      irq.write(true);
    }
  }

  uint16_t send(std::vector<uint8_t> m, bool answered) {
    const uint16_t tag = next_tag_++;
    m[2] = static_cast<uint8_t>(tag);
    m[3] = static_cast<uint8_t>(tag >> 8);
    if (answered) waiting_[tag] = Rsp{};
    queued_.push_back(std::move(m));
    return tag;
  }
  Rsp await(uint16_t tag) {
    while (!waiting_[tag].done) sc_core::wait(answered_);
    Rsp r = waiting_[tag];
    waiting_.erase(tag);
    return r;
  }

  static tlm::tlm_response_status status_of(uint8_t s) {
    return s == 0 ? tlm::TLM_OK_RESPONSE
                  : s == 1 ? tlm::TLM_ADDRESS_ERROR_RESPONSE : tlm::TLM_COMMAND_ERROR_RESPONSE;
  }

  tlm::tlm_response_status reg_access(bool write, uint32_t off, uint8_t* p) {
    if (write) {
      std::vector<uint8_t> m{MMIO_REQ, 1, 0, 0};
      put(m, off, 4);
      put(m, get(p, 4), 4);
      send(std::move(m), false);  // posted, as PCIe MMIO writes are
      if (off == offsetof(nelssa_csr_t, SQ_TAIL)) doorbell_ = true;
      if (off == offsetof(nelssa_csr_t, CQ_HEAD)) ack_ = true;  // irq falls at the edge
      return tlm::TLM_OK_RESPONSE;
    }
    std::vector<uint8_t> m{MMIO_REQ, 0, 0, 0};
    put(m, off, 4);
    put(m, 0, 4);
    Rsp r = await(send(std::move(m), true));
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(r.value >> (8 * i));
    return status_of(r.status);
  }

  tlm::tlm_response_status line_access(bool write, uint64_t line, unsigned off, unsigned n,
                                       uint8_t* p, const uint8_t* be, unsigned be_len) {
    if (write) {
      std::vector<uint8_t> m{M2S_RWD, 0, 0, 0};
      uint64_t enable = 0;
      uint8_t data[LINE] = {};
      for (unsigned i = 0; i < n; ++i) {
        if (be && be[i % be_len] != TLM_BYTE_ENABLED) continue;
        enable |= uint64_t{1} << (off + i);
        data[off + i] = p[i];
      }
      m[1] = enable == ~uint64_t{0} ? 1 : 2;  // MEM_WR, or MEM_WR_PTL
      put(m, line, 8);
      put(m, enable, 8);
      m.insert(m.end(), data, data + LINE);
      return status_of(await(send(std::move(m), true)).status);
    }
    std::vector<uint8_t> m{M2S_REQ, 1, 0, 0};
    put(m, line, 8);
    Rsp r = await(send(std::move(m), true));
    for (unsigned i = 0; i < n; ++i)
      if (!be || be[i % be_len] == TLM_BYTE_ENABLED) p[i] = r.data[off + i];
    return status_of(r.status);
  }

  void b_transport(tlm::tlm_generic_payload& t, sc_core::sc_time& delay) {
    // a loosely-timed initiator's offset is honoured by waiting it out first: this target is
    // clocked, it takes requests on its clock's edges
    if (delay != sc_core::SC_ZERO_TIME) {
      sc_core::wait(delay);
      delay = sc_core::SC_ZERO_TIME;
    }
    const bool write = t.is_write();
    if (!write && !t.is_read()) {
      t.set_response_status(tlm::TLM_OK_RESPONSE);  // TLM_IGNORE_COMMAND
      return;
    }
    const uint64_t a = t.get_address();
    const unsigned len = t.get_data_length();
    uint8_t* p = t.get_data_ptr();
    const uint8_t* be = t.get_byte_enable_ptr();
    const unsigned be_len = t.get_byte_enable_length();
    tlm::tlm_response_status s = tlm::TLM_OK_RESPONSE;
    if (a >= REG_BASE && a + len <= REG_BASE + REG_BYTES) {
      const uint32_t off = static_cast<uint32_t>(a - REG_BASE);
      if ((len != 4 && len != 8) || off % 4 || be || t.get_streaming_width() < len) {
        t.set_response_status(tlm::TLM_BURST_ERROR_RESPONSE);
        return;
      }
      for (unsigned w = 0; w < len / 4 && s == tlm::TLM_OK_RESPONSE; ++w)
        s = reg_access(write, off + 4 * w, p + 4 * w);
    } else if (a >= MEM_BASE && a + len <= MEM_BASE + MEM_WINDOW && len > 0) {
      if (t.get_streaming_width() < len) {
        t.set_response_status(tlm::TLM_BURST_ERROR_RESPONSE);
        return;
      }
      uint64_t dev = a - MEM_BASE;
      unsigned done = 0;
      while (done < len && s == tlm::TLM_OK_RESPONSE) {
        const unsigned off = dev % LINE;
        const unsigned n = std::min<unsigned>(LINE - off, len - done);
        s = line_access(write, dev - off, off, n, p + done, be ? be + done % be_len : nullptr,
                        be_len);
        done += n;
        dev += n;
      }
    } else {
      s = tlm::TLM_ADDRESS_ERROR_RESPONSE;
    }
    t.set_response_status(s);
  }

  // device memory lives in the simulated DRAM (a store keyed by DRAM coordinates, reached only
  // through the memory controllers): no direct pointer to give
  bool get_direct_mem_ptr(tlm::tlm_generic_payload&, tlm::tlm_dmi& dmi) {
    dmi.allow_none();
    return false;
  }
};

}  // namespace nelssa

#endif  // NELSSA_DEVICE_TLM_H
