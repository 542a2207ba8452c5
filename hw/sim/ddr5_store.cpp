// Sparse backing store of the simulated DRAM, reached from SystemVerilog through DPI-C: only
// written 64-byte lines take memory, so a device address space of tens of GB costs what is used.
// Unwritten lines read as zero.
#include <array>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "svdpi.h"

namespace {

using Line = std::array<uint32_t, 16>;

std::unordered_map<uint64_t, Line>& lines() {
  static std::unordered_map<uint64_t, Line> store;
  return store;
}

}  // namespace

extern "C" {

// Write the bytes of `data` (64 bytes, little-endian) whose bit in `strobe` is set.
void nelssa_store_write(long long key, const svBitVecVal* data, const svBitVecVal* strobe) {
  Line& line = lines()[static_cast<uint64_t>(key)];
  const auto* src = reinterpret_cast<const uint8_t*>(data);
  auto* dst = reinterpret_cast<uint8_t*>(line.data());
  for (int byte = 0; byte < 64; ++byte) {
    if ((strobe[byte / 32] >> (byte % 32)) & 1u) dst[byte] = src[byte];
  }
}

void nelssa_store_read(long long key, svBitVecVal* data) {
  const auto it = lines().find(static_cast<uint64_t>(key));
  if (it == lines().end()) {
    std::memset(data, 0, 64);
  } else {
    std::memcpy(data, it->second.data(), 64);
  }
}

long long nelssa_store_lines() { return static_cast<long long>(lines().size()); }

// Copy up to `max` written lines out, in no particular order: their keys (sub-channel << 40 |
// row << 11 | bank group, bank << 6 | column, as nelssa_ddr5_dram makes them) and 64 bytes of
// data each. Returns how many lines the store holds (call again with more room if above max).
long long nelssa_store_dump(long long* keys, uint8_t* data, long long max) {
  long long n = 0;
  for (const auto& [key, line] : lines()) {
    if (n >= max) break;
    keys[n] = static_cast<long long>(key);
    std::memcpy(data + 64 * n, line.data(), 64);
    ++n;
  }
  return static_cast<long long>(lines().size());
}

void nelssa_store_clear() { lines().clear(); }

}  // extern "C"
