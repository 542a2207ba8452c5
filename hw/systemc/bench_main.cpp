// SystemC testbench of the TLM device (nelssa_device_tlm.h): an initiator runs a host program
// (hw/sim/systemc.py writes it from the driver's own calls) through the target socket and checks
// every answer against the program's expected bytes; tests/test_systemc.py compares the rest
// (the memory image this writes, the cycle of each mark) with the other backends.
//
//   nelssa_sc_bench rtl|rtl-loose|model PROGRAM STORE_DUMP UNITS
// rtl: the Verilated device, clocked (ClockedDevice); rtl-loose: the same device loosely timed
// (LooseDevice); model: the model device, loosely timed (LooseDevice, ModelBackend;
// $NELSSA_PYTHON names its interpreter). UNITS: attention units (the model's; the Verilated
// library has its own, built in).
//
// A program is text, one operation a line (numbers in hex):
//   CLOCK_PS n               the device clock's period (first line)
//   W32 off value            register store (posted)
//   R32 off expect|-         register load through nb_transport_fw ('-': not checked)
//   WL addr enables data     line store (64-bit byte enables, 64 data bytes) via b_transport
//   RL addr expect           line load via b_transport, checked
//   ADV n                    let n device cycles pass
//   IRQ                      wait for the completion interrupt
//   MARK                     print the device cycle ("mark INDEX CYCLE")
//   PIPE n                   the next n operations (RL) all in flight at once (nb_transport_fw)
// Prints "mismatch ..." for each difference and exits 1 if any, 2 for a bad program. The memory
// image goes to STORE_DUMP: int64 count, int64 keyed (1: DRAM store keys, 0: addresses), the
// keys or addresses, the lines.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <tlm_utils/simple_initiator_socket.h>

#include "nelssa_device_tlm.h"
#include "nelssa_model_backend.h"

namespace {

struct Op {
  std::string kind;
  uint64_t a = 0, b = 0;
  bool check = true;
  std::vector<uint8_t> data;
  int line = 0;
};

std::vector<uint8_t> hex_bytes(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) out.push_back(std::stoul(s.substr(i, 2), 0, 16));
  return out;
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += {d[p[i] >> 4], d[p[i] & 15]};
  return s;
}

[[noreturn]] void bad(const char* path, int line, const std::string& why) {
  std::fprintf(stderr, "%s:%d: %s\n", path, line, why.c_str());
  std::exit(2);
}

std::vector<Op> load(const char* path, uint64_t& clock_ps) {
  std::ifstream in(path);
  if (!in) bad(path, 0, "cannot read the program");
  std::vector<Op> ops;
  std::string text;
  int n = 0;
  while (std::getline(in, text)) {
    ++n;
    std::istringstream f(text);
    Op op;
    op.line = n;
    std::string x, y, z;
    if (!(f >> op.kind)) continue;
    try {
      if (op.kind == "CLOCK_PS" && f >> x) {
        clock_ps = std::stoull(x, 0, 16);
        continue;
      } else if (op.kind == "W32" && f >> x >> y) {
        op.a = std::stoull(x, 0, 16);
        op.b = std::stoull(y, 0, 16);
      } else if (op.kind == "R32" && f >> x >> y) {
        op.a = std::stoull(x, 0, 16);
        op.check = y != "-";
        if (op.check) op.b = std::stoull(y, 0, 16);
      } else if (op.kind == "WL" && f >> x >> y >> z && z.size() == 128) {
        op.a = std::stoull(x, 0, 16);
        op.b = std::stoull(y, 0, 16);
        op.data = hex_bytes(z);
      } else if (op.kind == "RL" && f >> x >> z && z.size() == 128) {
        op.a = std::stoull(x, 0, 16);
        op.data = hex_bytes(z);
      } else if ((op.kind == "ADV" || op.kind == "PIPE") && f >> x) {
        op.a = std::stoull(x, 0, 16);
      } else if (op.kind != "IRQ" && op.kind != "MARK") {
        bad(path, n, "not an operation: " + text);
      }
    } catch (const std::exception&) {
      bad(path, n, "bad number in: " + text);
    }
    ops.push_back(std::move(op));
  }
  if (!clock_ps) bad(path, 1, "no CLOCK_PS line");
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != "PIPE") continue;
    for (uint64_t k = 1; k <= ops[i].a; ++k)
      if (i + k >= ops.size() || ops[i + k].kind != "RL")
        bad(path, ops[i].line, "PIPE n: the next n operations must be line loads (RL)");
  }
  return ops;
}

struct Host : sc_core::sc_module {
  tlm_utils::simple_initiator_socket<Host> socket;
  sc_core::sc_in<bool> irq;
  sc_core::sc_in<bool> clk;
  nelssa::Device* dev = nullptr;
  sc_core::sc_time period;
  bool clocked = true;
  std::vector<Op> ops;
  int mismatches = 0, irqs = 0;
  sc_core::sc_event nb_event;  // a response or an END_REQ came back
  int outstanding = 0;         // nb requests without their response
  bool req_open = false;       // an nb request without its END_REQ
  bool finished = false;

  SC_HAS_PROCESS(Host);
  explicit Host(sc_core::sc_module_name n) : sc_module(n), socket("socket") {
    socket.register_nb_transport_bw(this, &Host::nb_transport_bw);
    SC_THREAD(run);
  }

  tlm::tlm_sync_enum nb_transport_bw(tlm::tlm_generic_payload&, tlm::tlm_phase& phase,
                                     sc_core::sc_time& delay) {
    nb_event.notify(delay);
    if (phase == tlm::BEGIN_RESP) {  // (it ends the request phase too)
      --outstanding;
      req_open = false;
      phase = tlm::END_RESP;
      return tlm::TLM_COMPLETED;
    }
    if (phase == tlm::END_REQ) req_open = false;
    return tlm::TLM_ACCEPTED;
  }

  // start a transaction on the four-phase protocol; returns once the target took the request
  void begin(tlm::tlm_generic_payload& t) {
    tlm::tlm_phase phase = tlm::BEGIN_REQ;
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    ++outstanding;
    const tlm::tlm_sync_enum s = socket->nb_transport_fw(t, phase, delay);
    if (s == tlm::TLM_COMPLETED) {
      --outstanding;
    } else if (s == tlm::TLM_UPDATED && phase == tlm::BEGIN_RESP) {
      --outstanding;
      phase = tlm::END_RESP;
      socket->nb_transport_fw(t, phase, delay);
    } else if (s == tlm::TLM_ACCEPTED) {
      req_open = true;
      while (req_open) sc_core::wait(nb_event);
    }
  }
  void wait_all() {
    while (outstanding) sc_core::wait(nb_event);
  }
  static void setup(tlm::tlm_generic_payload& t, tlm::tlm_command cmd, uint64_t addr,
                    uint8_t* p, unsigned n, uint8_t* be) {
    t.set_command(cmd);
    t.set_address(addr);
    t.set_data_ptr(p);
    t.set_data_length(n);
    t.set_streaming_width(n);
    t.set_byte_enable_ptr(be);
    t.set_byte_enable_length(be ? n : 0);
    t.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
  }

  void mismatch(const Op& op, const std::string& what) {
    ++mismatches;
    std::printf("mismatch line %d (%s %llx): %s\n", op.line, op.kind.c_str(),
                static_cast<unsigned long long>(op.a), what.c_str());
  }

  // a transaction through b_transport (lines) or the four-phase nb_transport (registers)
  void transact(tlm::tlm_command cmd, uint64_t addr, uint8_t* p, unsigned n, uint8_t* be,
                bool nb, const Op& op) {
    tlm::tlm_generic_payload t;
    setup(t, cmd, addr, p, n, be);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    if (nb) {
      begin(t);
      wait_all();
    } else {
      socket->b_transport(t, delay);
      if (delay != sc_core::SC_ZERO_TIME) sc_core::wait(delay);  // the time it took
    }
    if (!t.is_response_ok()) mismatch(op, "response " + t.get_response_string());
  }

  // the next n operations, line loads, all in flight at once on the four-phase protocol
  void pipe(size_t first, uint64_t n) {
    std::vector<tlm::tlm_generic_payload> t(n);
    std::vector<uint8_t> data(64 * n);
    for (size_t k = 0; k < n; ++k)
      setup(t[k], tlm::TLM_READ_COMMAND, nelssa::Device::MEM_BASE + ops[first + k].a,
            &data[64 * k], 64, nullptr);
    for (size_t k = 0; k < n; ++k) begin(t[k]);
    wait_all();
    for (size_t k = 0; k < n; ++k) {
      const Op& op = ops[first + k];
      if (!t[k].is_response_ok()) mismatch(op, "response " + t[k].get_response_string());
      if (std::memcmp(&data[64 * k], op.data.data(), 64) != 0)
        mismatch(op, "read " + hex(&data[64 * k], 64));
    }
  }

  void run() {
    for (size_t i = 0; i < ops.size(); ++i) {
      Op& op = ops[i];
      uint8_t word[4], line[64], be[64];
      if (op.kind == "W32") {
        for (int k = 0; k < 4; ++k) word[k] = static_cast<uint8_t>(op.b >> (8 * k));
        transact(tlm::TLM_WRITE_COMMAND, nelssa::Device::REG_BASE + op.a, word, 4, nullptr,
                 false, op);
      } else if (op.kind == "R32") {
        transact(tlm::TLM_READ_COMMAND, nelssa::Device::REG_BASE + op.a, word, 4, nullptr,
                 true, op);
        const uint32_t got = word[0] | word[1] << 8 | word[2] << 16 | uint32_t{word[3]} << 24;
        if (op.check && got != op.b) mismatch(op, "read " + std::to_string(got));
      } else if (op.kind == "WL") {
        for (int k = 0; k < 64; ++k) be[k] = (op.b >> k & 1) ? TLM_BYTE_ENABLED
                                                             : TLM_BYTE_DISABLED;
        std::memcpy(line, op.data.data(), 64);
        transact(tlm::TLM_WRITE_COMMAND, nelssa::Device::MEM_BASE + op.a, line, 64,
                 op.b == ~uint64_t{0} ? nullptr : be, false, op);
      } else if (op.kind == "RL") {
        transact(tlm::TLM_READ_COMMAND, nelssa::Device::MEM_BASE + op.a, line, 64, nullptr,
                 false, op);
        if (std::memcmp(line, op.data.data(), 64) != 0)
          mismatch(op, "read " + hex(line, 64));
      } else if (op.kind == "PIPE") {
        pipe(i + 1, op.a);
        i += op.a;
      } else if (op.kind == "ADV" && clocked) {
        for (uint64_t k = 0; k < op.a; ++k) sc_core::wait(clk.posedge_event());
        sc_core::wait(sc_core::SC_ZERO_TIME);  // after the device's own edge
      } else if (op.kind == "ADV") {
        sc_core::wait(static_cast<double>(op.a) * period);
      } else if (op.kind == "IRQ") {
        if (!irq.read()) sc_core::wait(irq.posedge_event());
        ++irqs;
      } else if (op.kind == "MARK") {
        std::printf("mark %zu %llu\n", i, static_cast<unsigned long long>(dev->sync()));
      }
    }
    finished = true;
    sc_core::sc_stop();
  }
};

}  // namespace

int sc_main(int argc, char** argv) {
  const std::string form = argc == 5 ? argv[1] : "";
  if (form != "rtl" && form != "rtl-loose" && form != "model") {
    std::fprintf(stderr, "usage: %s rtl|rtl-loose|model PROGRAM STORE_DUMP UNITS\n", argv[0]);
    return 2;
  }
  uint64_t clock_ps = 0;
  std::vector<Op> ops = load(argv[2], clock_ps);
  // the first rising edge one period in: what the host does at time 0 meets the device's first
  // cycle, as a host's first message meets the device behind its C ABI
  const sc_core::sc_time period(static_cast<double>(clock_ps), sc_core::SC_PS);
  sc_core::sc_clock clk("clk", period, 0.5, period, true);
  sc_core::sc_signal<bool> irq("irq");
  std::unique_ptr<nelssa::Backend> backend;
  std::unique_ptr<nelssa::Device> dev;
  if (form == "rtl") {
    backend = std::make_unique<nelssa::RtlBackend>();
    auto* d = new nelssa::ClockedDevice("nelssa", *backend);
    d->clk(clk);
    dev.reset(d);
  } else {
    if (form == "model")
      backend = std::make_unique<nelssa::ModelBackend>(std::atoi(argv[4]));
    else
      backend = std::make_unique<nelssa::RtlBackend>();
    dev = std::make_unique<nelssa::LooseDevice>("nelssa", *backend, period);
  }
  Host host("host");
  host.ops = std::move(ops);
  host.dev = dev.get();
  host.period = period;
  host.clocked = form == "rtl";
  host.socket.bind(dev->socket);
  dev->irq(irq);
  host.clk(clk);
  host.irq(irq);
  sc_core::sc_start();
  if (!host.finished) {
    std::printf("the program did not finish (simulation stopped at %s)\n",
                sc_core::sc_time_stamp().to_string().c_str());
    return 1;
  }
  std::vector<long long> keys;
  std::vector<uint8_t> data;
  bool keyed = false;
  backend->image(keys, data, keyed);
  std::FILE* f = std::fopen(argv[3], "wb");
  const long long head[2] = {static_cast<long long>(keys.size()), keyed};
  if (!f || std::fwrite(head, 8, 2, f) != 2 ||
      std::fwrite(keys.data(), 8, keys.size(), f) != keys.size() ||
      std::fwrite(data.data(), 1, data.size(), f) != data.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", argv[3]);
    return 2;
  }
  std::printf("end %llu cycles, %d interrupts, %u violations, %d mismatches, %s\n",
              static_cast<unsigned long long>(dev->sync()), host.irqs, dev->violations(),
              host.mismatches, sc_core::sc_time_stamp().to_string().c_str());
  return host.mismatches || dev->violations() ? 1 : 0;
}
