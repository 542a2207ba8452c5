// The cycle model of one DDR5 sub-channel (hw/model/ddr5_subchannel.py, SubchannelModel.run
// without the checker), compiled, open loop: requests arrive at given cycles. The controller is
// ddr5_sub.hpp's, shared with the device's cycle model (device_cycle.cpp). Built and loaded by
// hw/model/ddr5_replay.py (g++ -O2 -shared); the timings, the controller's configuration and
// the CA slots come in from Python (one place: ddr5_timing.py, ControllerConfig,
// ddr5_checker.CA_CYCLES). tests/test_ddr5_replay.py holds it to the Python model, command
// count for command count and cycle for cycle.
#include "ddr5_sub.hpp"

#include <algorithm>
#include <vector>

using namespace ddr5;

constexpr int OUT = 1 + C_COUNT + S_COUNT;  // results per sub-channel

// Serve n requests (in arrival order) on one sub-channel. out: [0] controller cycles to the
// last data burst, [1..5] ACT, RD, WR, PRE, REF issued, [6..8] cycles stepped with the banks
// active, precharged, refreshing. Where ``log`` is given, every command's tCK, command, bank
// and row are appended to it. Returns 0; -1 past max_cycles; -2 for more than 64 banks.
static int replay(const long long* params, int n, const int* bank_group, const int* bank,
                  const long long* row, const long long* col, const unsigned char* is_write,
                  const long long* arrival, long long max_cycles, long long* out,
                  std::vector<i64>* log) {
    const i64* p = params;
    Ctl c(p);
    if (c.s.nb > 64 || p[P_TCK_PER_CYCLE] + 8 > 64) return -2;  // the bit masks' width
    c.s.log = log;
    std::vector<Req> r(n);
    for (int i = 0; i < n; ++i)
        r[i] = {bank_group[i] * c.s.bpg + bank[i], bank_group[i], row[i], col[i],
                is_write[i] != 0, arrival[i], 0, i};
    int next = 0;
    i64 last_done = 0;
    const auto done = [&](const Req&, i64 end) { last_done = std::max(last_done, end); };
    while (next < n || !c.empty()) {
        if (c.cycle >= max_cycles) return -1;
        const Req* offer = next < n && r[next].arrival <= c.cycle ? &r[next] : nullptr;
        if (c.step(offer, done)) ++next;
    }
    const i64 tpc = p[P_TCK_PER_CYCLE];
    out[0] = (last_done + tpc - 1) / tpc;
    for (int k = 0; k < C_COUNT; ++k) out[1 + k] = c.s.counts[k];
    for (int k = 0; k < S_COUNT; ++k) out[1 + C_COUNT + k] = c.residency[k];
    return 0;
}

extern "C" int ddr5_replay(const long long* params, int n, const int* bank_group,
                           const int* bank, const long long* row, const long long* col,
                           const unsigned char* is_write, const long long* arrival,
                           long long max_cycles, long long* out) {
    return replay(params, n, bank_group, bank, row, col, is_write, arrival, max_cycles, out,
                  nullptr);
}

// ddr5_replay, and its commands (tCK, command, bank, row each) into log: at most log_cap of
// them; returns how many there were (-3 where more than log_cap: call again with room), or
// ddr5_replay's negative return.
extern "C" long long ddr5_replay_log(const long long* params, int n, const int* bank_group,
                                     const int* bank, const long long* row,
                                     const long long* col, const unsigned char* is_write,
                                     const long long* arrival, long long max_cycles,
                                     long long* out, long long* log, long long log_cap) {
    std::vector<i64> got;
    const int rc = replay(params, n, bank_group, bank, row, col, is_write, arrival, max_cycles,
                          out, &got);
    if (rc != 0) return rc;
    const long long cmds = (long long)got.size() / 4;
    if (cmds > log_cap) return -3;
    std::copy(got.begin(), got.end(), log);
    return cmds;
}

// ddr5_replay on each of ``subs`` sub-channels in one call: sub-channel s has the requests
// start[s] .. start[s + 1] - 1 of the arrays, and out[OUT s .. OUT s + OUT - 1] its results
// (zeros where it has none). Returns the first nonzero return of ddr5_replay, else 0.
extern "C" int ddr5_replay_subchannels(const long long* params, int subs, const int* start,
                                       const int* bank_group, const int* bank,
                                       const long long* row, const long long* col,
                                       const unsigned char* is_write,
                                       const long long* arrival, long long max_cycles,
                                       long long* out) {
    for (int s = 0; s < subs; ++s) {
        const int a = start[s], n = start[s + 1] - start[s];
        if (n <= 0) continue;
        const int rc = ddr5_replay(params, n, bank_group + a, bank + a, row + a, col + a,
                                   is_write + a, arrival + a, max_cycles, out + OUT * s);
        if (rc != 0) return rc;
    }
    return 0;
}
