// The smallest platform around the NELSSA device (docs/systemc.md builds and explains it): a
// host driver as a TLM initiator, the device as a target, a clock and the interrupt line. The
// driver checks the device, sets up its command rings, submits one NOP descriptor, waits for
// the completion interrupt, reads the completion record and acknowledges it.
//
//   example_platform          the Verilated RTL device, clocked (cycle-accurate)
//   example_platform model    the model device, loosely timed ($NELSSA_PYTHON: its python)
#include <cstdio>
#include <memory>
#include <string>

#include <tlm_utils/simple_initiator_socket.h>

#include "nelssa_device_tlm.h"
#include "nelssa_model_backend.h"

using nelssa::Device;

struct Driver : sc_core::sc_module {
  tlm_utils::simple_initiator_socket<Driver> socket;
  sc_core::sc_in<bool> irq;
  int failures = 0;

  SC_HAS_PROCESS(Driver);
  explicit Driver(sc_core::sc_module_name n) : sc_module(n), socket("socket"), irq("irq") {
    SC_THREAD(run);
  }

  // one blocking transaction; the time it took passes here (a loosely-timed target annotates
  // it, a clocked one has spent it already)
  void access(tlm::tlm_command cmd, uint64_t addr, void* data, unsigned len) {
    tlm::tlm_generic_payload t;
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    t.set_command(cmd);
    t.set_address(addr);
    t.set_data_ptr(static_cast<unsigned char*>(data));
    t.set_data_length(len);
    t.set_streaming_width(len);
    t.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    socket->b_transport(t, delay);
    sc_core::wait(delay);
    if (!t.is_response_ok()) {
      std::printf("error: %s at %llx\n", t.get_response_string().c_str(),
                  static_cast<unsigned long long>(addr));
      ++failures;
    }
  }
  uint32_t reg_read(size_t off) {
    uint32_t v = 0;  // (the host is little-endian, as the registers are)
    access(tlm::TLM_READ_COMMAND, Device::REG_BASE + off, &v, 4);
    return v;
  }
  void reg_write(size_t off, uint32_t v) {
    access(tlm::TLM_WRITE_COMMAND, Device::REG_BASE + off, &v, 4);
  }
  void reg_write64(size_t off, uint64_t v) {
    access(tlm::TLM_WRITE_COMMAND, Device::REG_BASE + off, &v, 8);
  }

  void run() {
    const uint32_t magic = reg_read(offsetof(nelssa_csr_t, MAGIC));
    std::printf("MAGIC %x CAPS %x\n", magic, reg_read(offsetof(nelssa_csr_t, CAPS)));
    if (magic != NELSSA_CSR__MAGIC__VALUE_reset) ++failures;
    // rings: 4 descriptors of 64 bytes at 1 MiB, 4 completions of 16 bytes after them, inside
    // a 1 MiB region; the ring registers take writes only while the device is disabled
    const uint64_t region = 1 << 20, sq = region, cq = region + 4 * 64;
    reg_write(offsetof(nelssa_csr_t, CONTROL), 0);
    reg_write64(offsetof(nelssa_csr_t, REGION_BASE), region);
    reg_write64(offsetof(nelssa_csr_t, REGION_LIMIT), 2 * region);
    reg_write64(offsetof(nelssa_csr_t, SQ_BASE), sq);
    reg_write64(offsetof(nelssa_csr_t, CQ_BASE), cq);
    reg_write(offsetof(nelssa_csr_t, SQ_SIZE), 4);
    reg_write(offsetof(nelssa_csr_t, CQ_SIZE), 4);
    uint8_t line[64] = {};
    access(tlm::TLM_WRITE_COMMAND, Device::MEM_BASE + cq, line, 64);  // completions: zero
    reg_write(offsetof(nelssa_csr_t, CONTROL), 1);
    const uint32_t status = reg_read(offsetof(nelssa_csr_t, STATUS));
    std::printf("STATUS %x\n", status);
    if ((status & 6) != 2) ++failures;  // enabled, no ring error
    // one NOP descriptor (driver/formats.py DESCRIPTOR: opcode 0, desc_id at byte 8), then
    // the doorbell
    line[8] = 1;
    access(tlm::TLM_WRITE_COMMAND, Device::MEM_BASE + sq, line, 64);
    reg_write(offsetof(nelssa_csr_t, SQ_TAIL), 1);
    const sc_core::sc_time rung = sc_core::sc_time_stamp();
    if (!irq.read()) sc_core::wait(irq.posedge_event());
    std::printf("interrupt after %s\n", (sc_core::sc_time_stamp() - rung).to_string().c_str());
    // the completion record (COMPLETION: desc_id u32, status u8, phase u8, sq_head u16)
    uint8_t c[16];
    access(tlm::TLM_READ_COMMAND, Device::MEM_BASE + cq, c, 16);
    const uint32_t id = c[0] | c[1] << 8 | c[2] << 16 | uint32_t{c[3]} << 24;
    std::printf("completion desc_id %u status %u phase %u\n", id, c[4], c[5]);
    if (id != 1 || c[4] != 0 || c[5] != 1) ++failures;
    reg_write(offsetof(nelssa_csr_t, CQ_HEAD), 1);  // acknowledged: irq falls
    sc_core::wait(irq.negedge_event());
    sc_core::sc_stop();
  }
};

int sc_main(int argc, char** argv) {
  const bool model = argc > 1 && std::string(argv[1]) == "model";
  const sc_core::sc_time period(1250, sc_core::SC_PS);  // the device's 800 MHz
  sc_core::sc_clock clk("clk", period, 0.5, period, true);
  sc_core::sc_signal<bool> irq("irq");
  std::unique_ptr<nelssa::Backend> backend;
  std::unique_ptr<Device> dev;
  if (model) {
    backend = std::make_unique<nelssa::ModelBackend>(1);  // units, as the RTL library here
    dev = std::make_unique<nelssa::LooseDevice>("nelssa", *backend, period);
  } else {
    backend = std::make_unique<nelssa::RtlBackend>();
    auto* clocked = new nelssa::ClockedDevice("nelssa", *backend);
    clocked->clk(clk);
    dev.reset(clocked);
  }
  Driver host("host");
  host.socket.bind(dev->socket);
  dev->irq(irq);
  host.irq(irq);
  sc_core::sc_start();
  std::printf("%s at cycle %llu\n", host.failures ? "FAILED" : "done",
              static_cast<unsigned long long>(dev->sync()));
  return host.failures ? 1 : 0;
}
