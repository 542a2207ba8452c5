// The NELSSA PNM device as a SystemC TLM-2.0 target (docs/systemc.md). One target socket maps
// the two windows the board's PCIe BARs map (rtl/top/nelssa_fpga_top.sv):
//   [REG_BASE, REG_BASE + REG_BYTES)  the register file (include/nelssa_csr.h), 32-bit loads and
//                                     stores; a 64-bit access is two, low word first;
//   [MEM_BASE, MEM_BASE + MEM_WINDOW) the HDM window: device memory through the device's own
//                                     CXL.mem front end (64-byte lines, byte enables; an
//                                     access that spans lines is split into lines, in order);
//                                     the device answers beyond MEM_SIZE with an address error.
// Two forms behind the same socket and signal (nelssa::Device):
//   ClockedDevice  the Verilated RTL (RtlBackend: the shared library hw/sim/device_harness.cpp
//                  builds, its C ABI below), stepped once per rising edge of `clk`:
//                  cycle-accurate, a transaction takes the device cycles it takes;
//   LooseDevice    any backend, loosely timed: a transaction is served at once at the
//                  initiator's local time (sc_time_stamp() + delay), the device run up to it,
//                  and the cycles it took are added to `delay`; with ModelBackend
//                  (nelssa_model_backend.h) it is the model device, whose timing is the
//                  compiled cycle model (hw/model/device_cycle.cpp).
// `irq` rises when the device has gone quiet after a doorbell (every submitted descriptor's
// completion written) and falls when the host writes CQ_HEAD: a completion interrupt coalesced
// per doorbell, as a driver expects (the RTL has no interrupt pin; this is its idle output).
#ifndef NELSSA_DEVICE_TLM_H
#define NELSSA_DEVICE_TLM_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/peq_with_get.h>
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

// A device behind its port messages (driver/cxl.py's bytes), as hw/sim/device.py and the model
// backend take them.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual void push(const std::vector<uint8_t>& msg) = 0;
  virtual int pop(uint8_t* buf, uint32_t cap) = 0;  // length, 0 if none
  virtual void run(uint64_t cycles) = 0;
  virtual bool quiet() = 0;  // nothing queued, owed or in flight
  virtual uint64_t run_until_quiet() {  // the cycle it went quiet at
    while (!quiet()) run(1);
    return cycle();
  }
  virtual uint64_t cycle() = 0;
  virtual uint32_t violations() { return 0; }
  // every line of device memory not all zero; keyed: addr holds the DRAM store's keys (the
  // Verilated device's: hw/sim/device.py store_image maps them to addresses)
  virtual void image(std::vector<long long>& addr, std::vector<uint8_t>& data, bool& keyed) = 0;
};

// The Verilated device (one per process: its DRAM backing store is the process's).
class RtlBackend : public Backend {
 public:
  RtlBackend() : h_(nelssa_dev_create()) {
    if (!h_) throw std::runtime_error(nelssa_dev_last_error(nullptr));
  }
  ~RtlBackend() override { nelssa_dev_destroy(h_); }
  void push(const std::vector<uint8_t>& m) override {
    if (nelssa_dev_push(h_, m.data(), static_cast<uint32_t>(m.size())) != 0) fail();
  }
  int pop(uint8_t* buf, uint32_t cap) override { return nelssa_dev_pop(h_, buf, cap); }
  void run(uint64_t cycles) override {
    if (nelssa_dev_run(h_, cycles) != 0) fail();
  }
  bool quiet() override { return nelssa_dev_run_until_idle(h_, 0) == 0; }  // runs no cycle
  uint64_t cycle() override { return nelssa_dev_cycle(h_); }
  uint32_t violations() override { return nelssa_dev_violations(h_); }
  void image(std::vector<long long>& keys, std::vector<uint8_t>& data, bool& keyed) override {
    const long long n = nelssa_store_dump(nullptr, nullptr, 0);
    keys.resize(n);
    data.resize(n * 64);
    nelssa_store_dump(keys.data(), data.data(), n);
    keyed = true;
  }

 private:
  void* h_;
  [[noreturn]] void fail() { throw std::runtime_error(nelssa_dev_last_error(h_)); }
};

// The socket, the address map, the interrupt; the forms differ in when messages meet the device.
class Device : public sc_core::sc_module {
 public:
  static constexpr uint64_t REG_BASE = 0;
  static constexpr uint64_t REG_BYTES = 0x1000;
  static constexpr uint64_t MEM_WINDOW = uint64_t{1} << 40;  // device addresses are 40 bits
  static constexpr uint64_t MEM_BASE = MEM_WINDOW;            // above the registers
  static constexpr unsigned LINE = 64;

  tlm_utils::simple_target_socket<Device> socket;
  sc_core::sc_out<bool> irq;

  uint64_t cycle() { return be_.cycle(); }
  uint32_t violations() { return be_.violations(); }
  Backend& backend() { return be_; }
  // bring the device's time up to the simulation's (a loosely-timed device runs only when
  // called); its cycle then
  virtual uint64_t sync() { return be_.cycle(); }

 protected:
  enum : uint8_t { M2S_REQ = 0, M2S_RWD = 1, S2M_NDR = 2, S2M_DRS = 3, MMIO_REQ = 4,
                   MMIO_RSP = 5 };
  struct Rsp {
    bool done = false;
    uint8_t status = 0;
    uint32_t value = 0;
    uint8_t data[LINE] = {};
  };

  Device(sc_core::sc_module_name name, Backend& be)
      : sc_module(name), socket("socket"), irq("irq"), be_(be) {
    socket.register_b_transport(this, &Device::b_transport);
    socket.register_get_direct_mem_ptr(this, &Device::get_direct_mem_ptr);
  }

  // a message that is answered (its tag set here): the answer, `delay` grown by what it took
  virtual Rsp exchange(std::vector<uint8_t> m, sc_core::sc_time& delay) = 0;
  // a posted register store
  virtual void post(std::vector<uint8_t> m, sc_core::sc_time& delay) = 0;
  virtual void doorbell(sc_core::sc_time& delay) = 0;
  virtual void acknowledge(sc_core::sc_time& delay) = 0;

  Backend& be_;
  std::map<uint16_t, Rsp> waiting_;  // by tag
  uint16_t next_tag_ = 0;

  uint16_t tag(std::vector<uint8_t>& m, bool answered) {
    const uint16_t t = next_tag_++;
    m[2] = static_cast<uint8_t>(t);
    m[3] = static_cast<uint8_t>(t >> 8);
    if (answered) waiting_[t] = Rsp{};
    return t;
  }
  // every answer the device has, filed under its tag; whether there was any
  bool collect() {
    uint8_t buf[128];
    bool any = false;
    while (int n = be_.pop(buf, sizeof buf)) {
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
    return any;
  }
  Rsp take(uint16_t t) {
    Rsp r = waiting_[t];
    waiting_.erase(t);
    return r;
  }

  static void put(std::vector<uint8_t>& m, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) m.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  static uint64_t get(const uint8_t* p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }

 protected:
  // one device message of a transaction, and what its answer does to the payload
  struct Part {
    std::vector<uint8_t> msg;
    bool answered = true;  // false: a posted register store
    uint32_t reg = ~0u;    // the register a store goes to
    std::function<tlm::tlm_response_status(const Rsp&)> done;
  };

  static tlm::tlm_response_status status_of(uint8_t s) {
    return s == 0 ? tlm::TLM_OK_RESPONSE
                  : s == 1 ? tlm::TLM_ADDRESS_ERROR_RESPONSE : tlm::TLM_COMMAND_ERROR_RESPONSE;
  }

  // the messages a transaction makes, in order; a transaction that makes none answers with
  // what is returned (an address or burst error; TLM_OK_RESPONSE for TLM_IGNORE_COMMAND)
  tlm::tlm_response_status parts_of(tlm::tlm_generic_payload& t, std::vector<Part>& parts) {
    const bool write = t.is_write();
    if (!write && !t.is_read()) return tlm::TLM_OK_RESPONSE;
    const uint64_t a = t.get_address();
    const unsigned len = t.get_data_length();
    uint8_t* p = t.get_data_ptr();
    const uint8_t* be = t.get_byte_enable_ptr();
    const unsigned be_len = t.get_byte_enable_length();
    if (t.get_streaming_width() < len) return tlm::TLM_BURST_ERROR_RESPONSE;
    if (a >= REG_BASE && a + len <= REG_BASE + REG_BYTES) {
      const uint32_t off = static_cast<uint32_t>(a - REG_BASE);
      if ((len != 4 && len != 8) || off % 4 || be) return tlm::TLM_BURST_ERROR_RESPONSE;
      for (unsigned w = 0; w < len / 4; ++w) reg_part(write, off + 4 * w, p + 4 * w, parts);
      return tlm::TLM_OK_RESPONSE;
    }
    if (a < MEM_BASE || a + len > MEM_BASE + MEM_WINDOW || len == 0)
      return tlm::TLM_ADDRESS_ERROR_RESPONSE;
    uint64_t dev = a - MEM_BASE;
    for (unsigned done = 0; done < len;) {
      const unsigned off = dev % LINE;
      const unsigned n = std::min<unsigned>(LINE - off, len - done);
      line_part(write, dev - off, off, n, p + done, be, be_len, done, parts);
      done += n;
      dev += n;
    }
    return tlm::TLM_OK_RESPONSE;
  }

 private:
  void reg_part(bool write, uint32_t off, uint8_t* p, std::vector<Part>& parts) {
    Part part;
    part.msg = {MMIO_REQ, write ? uint8_t{1} : uint8_t{0}, 0, 0};
    put(part.msg, off, 4);
    put(part.msg, write ? get(p, 4) : 0, 4);
    if (write) {  // posted, as PCIe MMIO writes are
      part.answered = false;
      part.reg = off;
    } else {
      part.done = [p](const Rsp& r) {
        for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(r.value >> (8 * i));
        return status_of(r.status);
      };
    }
    parts.push_back(std::move(part));
  }

  void line_part(bool write, uint64_t line, unsigned off, unsigned n, uint8_t* p,
                 const uint8_t* be, unsigned be_len, unsigned be_at, std::vector<Part>& parts) {
    auto on = [=](unsigned i) { return !be || be[(be_at + i) % be_len] == TLM_BYTE_ENABLED; };
    Part part;
    if (write) {
      part.msg = {M2S_RWD, 0, 0, 0};
      uint64_t enable = 0;
      uint8_t data[LINE] = {};
      for (unsigned i = 0; i < n; ++i) {
        if (!on(i)) continue;
        enable |= uint64_t{1} << (off + i);
        data[off + i] = p[i];
      }
      part.msg[1] = enable == ~uint64_t{0} ? 1 : 2;  // MEM_WR, or MEM_WR_PTL
      put(part.msg, line, 8);
      put(part.msg, enable, 8);
      part.msg.insert(part.msg.end(), data, data + LINE);
      part.done = [](const Rsp& r) { return status_of(r.status); };
    } else {
      part.msg = {M2S_REQ, 1, 0, 0};
      put(part.msg, line, 8);
      part.done = [=](const Rsp& r) {
        for (unsigned i = 0; i < n; ++i)
          if (on(i)) p[i] = r.data[off + i];
        return status_of(r.status);
      };
    }
    parts.push_back(std::move(part));
  }

  // one part after the other, each answer awaited; the first error ends the transaction
  void b_transport(tlm::tlm_generic_payload& t, sc_core::sc_time& delay) {
    std::vector<Part> parts;
    tlm::tlm_response_status s = parts_of(t, parts);
    for (size_t i = 0; i < parts.size() && s == tlm::TLM_OK_RESPONSE; ++i) {
      Part& part = parts[i];
      if (part.answered) {
        s = part.done(exchange(std::move(part.msg), delay));
        continue;
      }
      post(std::move(part.msg), delay);
      if (part.reg == offsetof(nelssa_csr_t, SQ_TAIL)) doorbell(delay);
      if (part.reg == offsetof(nelssa_csr_t, CQ_HEAD)) acknowledge(delay);
    }
    t.set_response_status(s);
  }

  // device memory lives in the simulated DRAM (the Verilated device's store is keyed by DRAM
  // coordinates and reached through the memory controllers; the model's is sparse): no direct
  // pointer that would keep the device's timing and counters
  bool get_direct_mem_ptr(tlm::tlm_generic_payload&, tlm::tlm_dmi& dmi) {
    dmi.allow_none();
    return false;
  }
};

// Cycle-accurate: one device cycle per rising edge of clk. The messages queued since the last
// edge go in, the device runs a cycle, its answers complete the transactions waiting for them.
// Besides b_transport it takes the four-phase nb_transport_fw natively: a request is accepted
// at once (END_REQ), its messages enter at the next edge, and BEGIN_RESP follows once the
// device has answered them all (responses in the order they complete, one BEGIN_RESP at a
// time), so an initiator may keep many requests in flight.
class ClockedDevice : public Device {
 public:
  sc_core::sc_in<bool> clk;

  SC_HAS_PROCESS(ClockedDevice);
  ClockedDevice(sc_core::sc_module_name name, Backend& be)
      : Device(name, be), clk("clk"), requests_("requests") {
    using Fw = tlm::tlm_sync_enum (Device::*)(tlm::tlm_generic_payload&, tlm::tlm_phase&,
                                              sc_core::sc_time&);
    socket.register_nb_transport_fw(this, static_cast<Fw>(&ClockedDevice::nb_transport_fw));
    SC_METHOD(tick);
    sensitive << clk.pos();
    dont_initialize();
    SC_METHOD(accept);
    sensitive << requests_.get_event();
    dont_initialize();
  }

 private:
  struct Job {
    tlm::tlm_generic_payload* t;
    std::vector<Part> parts;
    std::vector<uint16_t> tags;  // of the answered parts, in order
  };
  std::deque<std::vector<uint8_t>> queued_;  // messages for the next rising edge
  sc_core::sc_event answered_;
  bool doorbell_ = false;
  bool ack_ = false;  // the host wrote CQ_HEAD since the last edge
  tlm_utils::peq_with_get<tlm::tlm_generic_payload> requests_;  // nb requests at their time
  std::deque<Job> jobs_;                                         // nb requests in flight
  std::deque<tlm::tlm_generic_payload*> responses_;              // answered, BEGIN_RESP due
  bool responding_ = false;  // a BEGIN_RESP waits for its END_RESP

  void tick() {
    for (auto& m : queued_) be_.push(m);
    queued_.clear();
    be_.run(1);
    if (collect()) {
      answered_.notify(sc_core::SC_ZERO_TIME);
      finish_jobs();
    }
    if (ack_) {
      ack_ = false;
      irq.write(false);
    }
    if (doorbell_ && be_.quiet()) {
      doorbell_ = false;
      irq.write(true);
    }
  }

  uint16_t queue(Part& part) {
    const uint16_t t = tag(part.msg, part.answered);
    if (part.reg == offsetof(nelssa_csr_t, SQ_TAIL)) doorbell_ = true;
    if (part.reg == offsetof(nelssa_csr_t, CQ_HEAD)) ack_ = true;  // irq falls at the edge
    queued_.push_back(part.msg);
    return t;
  }

  // a clocked target takes requests on its clock's edges: an initiator's time offset is
  // waited out first
  void settle(sc_core::sc_time& delay) {
    if (delay != sc_core::SC_ZERO_TIME) {
      sc_core::wait(delay);
      delay = sc_core::SC_ZERO_TIME;
    }
  }
  Rsp exchange(std::vector<uint8_t> m, sc_core::sc_time& delay) override {
    settle(delay);
    const uint16_t t = tag(m, true);
    queued_.push_back(std::move(m));
    while (!waiting_[t].done) sc_core::wait(answered_);
    return take(t);
  }
  void post(std::vector<uint8_t> m, sc_core::sc_time& delay) override {
    settle(delay);
    tag(m, false);
    queued_.push_back(std::move(m));
  }
  void doorbell(sc_core::sc_time&) override { doorbell_ = true; }
  void acknowledge(sc_core::sc_time&) override { ack_ = true; }

  tlm::tlm_sync_enum nb_transport_fw(tlm::tlm_generic_payload& t, tlm::tlm_phase& phase,
                                     sc_core::sc_time& delay) {
    if (phase == tlm::BEGIN_REQ) {
      requests_.notify(t, delay);
      phase = tlm::END_REQ;
      return tlm::TLM_UPDATED;
    }
    if (phase == tlm::END_RESP) {
      responding_ = false;
      respond();
      return tlm::TLM_COMPLETED;
    }
    SC_REPORT_ERROR("nelssa", "nb_transport_fw: a phase the base protocol does not send");
    return tlm::TLM_COMPLETED;
  }

  // requests whose time has come: their messages queued for the next edge
  void accept() {
    while (tlm::tlm_generic_payload* t = requests_.get_next_transaction()) {
      Job job{t, {}, {}};
      const tlm::tlm_response_status s = parts_of(*t, job.parts);
      for (Part& part : job.parts) {
        const uint16_t tg = queue(part);
        if (part.answered) job.tags.push_back(tg);
      }
      if (s != tlm::TLM_OK_RESPONSE || job.tags.empty()) {  // nothing to wait for
        t->set_response_status(s);
        responses_.push_back(t);
      } else {
        jobs_.push_back(std::move(job));
      }
    }
    respond();
  }

  // requests the device has answered whole: their payloads filled in, their responses due
  void finish_jobs() {
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      bool done = true;
      for (uint16_t tg : it->tags) done = done && waiting_[tg].done;
      if (!done) {
        ++it;
        continue;
      }
      tlm::tlm_response_status s = tlm::TLM_OK_RESPONSE;
      size_t k = 0;
      for (Part& part : it->parts) {
        if (!part.answered) continue;
        const Rsp r = take(it->tags[k++]);
        if (s == tlm::TLM_OK_RESPONSE) s = part.done(r);
      }
      it->t->set_response_status(s);
      responses_.push_back(it->t);
      it = jobs_.erase(it);
    }
    respond();
  }

  void respond() {
    while (!responding_ && !responses_.empty()) {
      tlm::tlm_generic_payload* t = responses_.front();
      responses_.pop_front();
      tlm::tlm_phase phase = tlm::BEGIN_RESP;
      sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
      const tlm::tlm_sync_enum r = socket->nb_transport_bw(*t, phase, delay);
      responding_ = !(r == tlm::TLM_COMPLETED || (r == tlm::TLM_UPDATED && phase == tlm::END_RESP));
    }
  }
};

// Loosely timed: no clock; the device is run up to each transaction's time and through it,
// and the cycles it took go into the transaction's delay (period: one device cycle).
class LooseDevice : public Device {
 public:
  SC_HAS_PROCESS(LooseDevice);
  LooseDevice(sc_core::sc_module_name name, Backend& be, sc_core::sc_time period)
      : Device(name, be), period_(period) {
    SC_METHOD(drive_irq);
    sensitive << irq_change_;
    dont_initialize();
  }
  uint64_t sync() override { return catch_up(sc_core::SC_ZERO_TIME); }
  sc_core::sc_time period() const { return period_; }

 private:
  sc_core::sc_time period_;
  sc_core::sc_event irq_change_;
  bool irq_level_ = false;

  void drive_irq() { irq.write(irq_level_); }
  // the device's cycle at the initiator's local time (it never runs backwards: a transaction
  // from behind the device's time is served at the device's time)
  uint64_t catch_up(const sc_core::sc_time& delay) {
    const uint64_t at = static_cast<uint64_t>((sc_core::sc_time_stamp() + delay) / period_);
    if (at > be_.cycle()) be_.run(at - be_.cycle());
    return be_.cycle();
  }
  // the delay that puts the initiator at the device's cycle
  void annotate(sc_core::sc_time& delay) {
    const sc_core::sc_time now = be_.cycle() * period_;
    if (now > sc_core::sc_time_stamp()) delay = std::max(delay, now - sc_core::sc_time_stamp());
  }
  Rsp exchange(std::vector<uint8_t> m, sc_core::sc_time& delay) override {
    catch_up(delay);
    const uint16_t t = tag(m, true);
    be_.push(m);
    while (collect(), !waiting_[t].done) be_.run(1);
    annotate(delay);
    return take(t);
  }
  void post(std::vector<uint8_t> m, sc_core::sc_time& delay) override {
    catch_up(delay);
    tag(m, false);
    be_.push(m);
  }
  void doorbell(sc_core::sc_time&) override {
    // the device runs ahead to the doorbell's end; irq rises at that time
    const uint64_t done = be_.run_until_quiet();
    irq_level_ = true;
    irq_change_.notify(done * period_ - sc_core::sc_time_stamp());
  }
  void acknowledge(sc_core::sc_time& delay) override {
    irq_level_ = false;
    irq_change_.notify(delay);
  }
};

}  // namespace nelssa

#endif  // NELSSA_DEVICE_TLM_H
