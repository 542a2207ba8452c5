// Sparse backing store of the simulated DRAM, reached from SystemVerilog through DPI-C and from
// Python (the backdoor: hw/sim/device.py RtlDevice.dma_write) through the same C interface. It
// holds pages of the 64 lines of one (sub-channel, row, bank group, bank), allocated when first
// written, so a device address space of tens of GB costs what is used, and a bulk write of KV is
// a memcpy per line. Unwritten lines read as zero; a bitmap per page says which lines were
// written, so the store counts and dumps written lines exactly as a map of lines would.
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "svdpi.h"

namespace {

constexpr int LINE_BYTES = 64;
constexpr int PAGE_LINES = 64;  // the column field of a key: a page is one bank row

struct Page {
  std::array<uint8_t, PAGE_LINES * LINE_BYTES> bytes{};
  uint64_t written = 0;  // bit c: line c was written
};

struct Store {
  std::unordered_map<uint64_t, std::unique_ptr<Page>> pages;
  uint64_t lines = 0;       // written lines
  uint64_t last_key = ~0ull;  // the page looked up last (bulk writes stay in one page a while)
  Page* last = nullptr;

  Page* find(uint64_t page_key) {
    if (page_key == last_key) return last;
    const auto it = pages.find(page_key);
    if (it == pages.end()) return nullptr;
    last_key = page_key;
    last = it->second.get();
    return last;
  }

  Page& get(uint64_t page_key) {
    if (Page* p = find(page_key)) return *p;
    auto& slot = pages[page_key];
    slot = std::make_unique<Page>();
    last_key = page_key;
    last = slot.get();
    return *last;
  }

  uint8_t* line_for_write(uint64_t key) {
    Page& p = get(key / PAGE_LINES);
    const uint64_t bit = 1ull << (key % PAGE_LINES);
    if (!(p.written & bit)) {
      p.written |= bit;
      ++lines;
    }
    return p.bytes.data() + (key % PAGE_LINES) * LINE_BYTES;
  }

  void clear() {
    pages.clear();
    lines = 0;
    last_key = ~0ull;
    last = nullptr;
  }
};

Store& store() {
  static Store s;
  return s;
}

}  // namespace

extern "C" {

// Write the bytes of `data` (64 bytes, little-endian) whose bit in `strobe` is set.
void nelssa_store_write(long long key, const svBitVecVal* data, const svBitVecVal* strobe) {
  uint8_t* dst = store().line_for_write(static_cast<uint64_t>(key));
  const auto* src = reinterpret_cast<const uint8_t*>(data);
  for (int byte = 0; byte < LINE_BYTES; ++byte) {
    if ((strobe[byte / 32] >> (byte % 32)) & 1u) dst[byte] = src[byte];
  }
}

void nelssa_store_read(long long key, svBitVecVal* data) {
  const auto k = static_cast<uint64_t>(key);
  const Page* p = store().find(k / PAGE_LINES);
  if (p == nullptr) {
    std::memset(data, 0, LINE_BYTES);
  } else {
    std::memcpy(data, p->bytes.data() + (k % PAGE_LINES) * LINE_BYTES, LINE_BYTES);
  }
}

// Whole lines at once (the backdoor): `n` keys and 64 bytes of data each.
void nelssa_store_write_lines(const long long* keys, const uint8_t* data, long long n) {
  Store& s = store();
  for (long long i = 0; i < n; ++i) {
    std::memcpy(s.line_for_write(static_cast<uint64_t>(keys[i])), data + i * LINE_BYTES,
                LINE_BYTES);
  }
}

void nelssa_store_read_lines(const long long* keys, uint8_t* data, long long n) {
  Store& s = store();
  for (long long i = 0; i < n; ++i) {
    const auto k = static_cast<uint64_t>(keys[i]);
    const Page* p = s.find(k / PAGE_LINES);
    if (p == nullptr) {
      std::memset(data + i * LINE_BYTES, 0, LINE_BYTES);
    } else {
      std::memcpy(data + i * LINE_BYTES, p->bytes.data() + (k % PAGE_LINES) * LINE_BYTES,
                  LINE_BYTES);
    }
  }
}

long long nelssa_store_lines() { return static_cast<long long>(store().lines); }

// Copy up to `max` written lines out, in no particular order: their keys (sub-channel << 40 |
// row << 11 | bank group, bank << 6 | column, as nelssa_ddr5_dram makes them) and 64 bytes of
// data each. Returns how many lines the store holds (call again with more room if above max).
long long nelssa_store_dump(long long* keys, uint8_t* data, long long max) {
  long long n = 0;
  for (const auto& [page_key, page] : store().pages) {
    for (uint64_t bits = page->written; bits != 0 && n < max; bits &= bits - 1) {
      const int column = __builtin_ctzll(bits);
      keys[n] = static_cast<long long>(page_key * PAGE_LINES + column);
      std::memcpy(data + LINE_BYTES * n, page->bytes.data() + column * LINE_BYTES, LINE_BYTES);
      ++n;
    }
    if (n >= max) break;
  }
  return static_cast<long long>(store().lines);
}

void nelssa_store_clear() { store().clear(); }

}  // extern "C"
