// One DDR5 sub-channel controller, the policy of hw/model/ddr5_subchannel.py (SubchannelModel,
// command-identical to the RTL controller) step for step: its bank state (Sub) and its queues
// (Ctl, one controller cycle per step). Shared by the open-loop replay (ddr5_replay.cpp) and
// the device's cycle model (device_cycle.cpp), so the policy is written once.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace ddr5 {

using i64 = long long;
constexpr i64 NEVER = -1000000000000LL;

enum Param {
    P_CL, P_CWL, P_RCD, P_RP, P_RAS, P_RC, P_RTP, P_CCD_S, P_CCD_L, P_CCD_L_WR, P_RRD_S,
    P_RRD_L, P_FAW, P_RFC, P_REFI, P_BURST, P_RD_TO_WR, P_WR_TO_RD_L, P_WR_TO_RD_S, P_WR_TO_PRE,
    P_GROUPS, P_BANKS_PER_GROUP, P_READ_QUEUE, P_WRITE_QUEUE, P_WRITE_HIGH, P_WRITE_LOW,
    P_CLOSE_IDLE, P_REFRESH, P_TCK_PER_CYCLE, P_ROW_CMDS, P_CA_ACT, P_CA_RD, P_CA_WR, P_CA_PRE,
    P_CA_REF, P_ROW_GUARD, P_ARBITER, P_COUNT
};
// How a cycle's commands are chosen (ddr5_subchannel.Arbiter): a column command, then up to
// P_ROW_CMDS row commands, each at its earliest tCK (the RTL's), or one command a tCK, the
// oldest request whose next command is ready (Ramulator 2's FR-FCFS).
enum Arbiter { A_CYCLE, A_TCK };
// What keeps an open row from a PRE for another row of its bank (ddr5_subchannel.RowGuard):
// any queued request that wants it (the RTL's policy), only the request whose ACT opened it
// until its column command (Ramulator 2's active buffer), or nothing.
enum Guard { G_QUEUE, G_OPENER, G_NONE };
enum Cmd { C_ACT, C_RD, C_WR, C_PRE, C_REF, C_COUNT };
// the banks' state at a cycle's start (ddr5_subchannel.BankState, the RTL's perf_o residencies)
enum State { S_ACTIVE, S_PRECHARGED, S_REFRESH, S_COUNT };

struct Sub {
    const i64* p;
    int nb, ng, bpg;
    std::vector<i64> open_row, row_used, last_act, last_pre, last_rd, last_wr;
    std::vector<i64> group_act, group_rd, group_wr;
    i64 any_rd = NEVER, acts[4] = {NEVER, NEVER, NEVER, NEVER};
    i64 ref_tck = NEVER, next_refresh;
    uint64_t ca = 0;  // bit k: tCK lo + k of the CA bus taken
    i64 lo = 0;
    i64 counts[C_COUNT] = {0, 0, 0, 0, 0};
    uint64_t opener = 0;   // G_OPENER: banks whose opening request is not served yet ...
    i64 opener_seq[64] = {};  // ... and which request that is
    std::vector<i64>* log = nullptr;  // where given: tCK, command, bank, row of each command

    explicit Sub(const i64* params) : p(params) {
        ng = (int)p[P_GROUPS];
        bpg = (int)p[P_BANKS_PER_GROUP];
        nb = ng * bpg;
        for (auto* v : {&open_row}) v->assign(nb, -1);
        for (auto* v : {&row_used}) v->assign(nb, 0);
        for (auto* v : {&last_act, &last_pre, &last_rd, &last_wr}) v->assign(nb, NEVER);
        for (auto* v : {&group_act, &group_rd, &group_wr}) v->assign(ng, NEVER);
        next_refresh = p[P_REFI];
    }

    // the latest of the other bank groups' commands: the two latest of all, kept up to date
    struct Top2 {
        i64 first = NEVER, second = NEVER;
        int at = -1;
        void put(i64 v, int g) {
            if (g == at) {
                first = v;  // times only grow
            } else if (v >= first) {
                second = first, first = v, at = g;
            } else if (v > second) {
                second = v;
            }
        }
        i64 other(int g) const { return g == at ? second : first; }
    } top_act, top_rd, top_wr;
    i64 earliest_act(int b, int g) const {
        return std::max({last_pre[b] + p[P_RP], last_act[b] + p[P_RC], ref_tck + p[P_RFC],
                         group_act[g] + p[P_RRD_L], top_act.other(g) + p[P_RRD_S],
                         acts[0] + p[P_FAW]});
    }
    i64 earliest_col(bool write, int b, int g) const {
        if (write)
            return std::max({last_act[b] + p[P_RCD], group_wr[g] + p[P_CCD_L_WR],
                             top_wr.other(g) + p[P_CCD_S], any_rd + p[P_RD_TO_WR]});
        return std::max({last_act[b] + p[P_RCD], group_rd[g] + p[P_CCD_L],
                         top_rd.other(g) + p[P_CCD_S], group_wr[g] + p[P_WR_TO_RD_L],
                         top_wr.other(g) + p[P_WR_TO_RD_S]});
    }
    i64 earliest_pre(int b) const {
        return std::max({last_act[b] + p[P_RAS], last_rd[b] + p[P_RTP],
                         last_wr[b] + p[P_WR_TO_PRE]});
    }
    int ca_cycles(int cmd) const { return (int)p[P_CA_ACT + cmd]; }
    // the first tCK in [max(earliest, lo), hi] whose CA slots are free, or -1
    i64 place(i64 earliest, int cmd, i64 hi) const {
        for (i64 tck = std::max(earliest, lo); tck <= hi; ++tck) {
            bool free = true;
            for (int k = 0; k < ca_cycles(cmd); ++k)
                if (ca >> (tck - lo + k) & 1) free = false;
            if (free) return tck;
        }
        return -1;
    }
    void issue(i64 tck, int cmd, int b = 0, i64 row = 0) {
        int g = b / bpg;
        for (int k = 0; k < ca_cycles(cmd); ++k) ca |= 1ULL << (tck - lo + k);
        counts[cmd] += 1;
        if (log) log->insert(log->end(), {tck, (i64)cmd, (i64)b, row});
        switch (cmd) {
        case C_ACT:
            open_row[b] = row;
            row_used[b] = tck;
            last_act[b] = group_act[g] = tck;
            top_act.put(tck, g);
            acts[0] = acts[1]; acts[1] = acts[2]; acts[2] = acts[3]; acts[3] = tck;
            break;
        case C_RD:
            last_rd[b] = group_rd[g] = any_rd = tck;
            top_rd.put(tck, g);
            row_used[b] = tck;
            break;
        case C_WR:
            last_wr[b] = group_wr[g] = tck;
            top_wr.put(tck, g);
            row_used[b] = tck;
            break;
        case C_PRE:
            open_row[b] = -1;
            last_pre[b] = tck;
            break;
        case C_REF:
            ref_tck = tck;
            next_refresh += p[P_REFI];
            break;
        }
    }
};

struct Req {
    int bank, group;
    i64 row, col;
    bool write;
    i64 arrival;
    int port;  // who asked (the device model's memory port) ...
    i64 tag;   // ... and what for: carried to the column command
    i64 seq = 0;  // order of entry into the controller (G_OPENER's request identity)
};

// Whether a PRE may close bank b's open row for another row: ``wanted``, a queued request of
// the served queue wants the open row.
inline bool guard_allows_pre(const Sub& s, int b, bool wanted) {
    switch (s.p[P_ROW_GUARD]) {
    case G_OPENER: return !(s.opener >> b & 1);
    case G_NONE: return true;
    default: return !wanted;
    }
}

inline bool row_command(Sub& s, const std::vector<Req>& active, bool refreshing, i64 hi) {
    const i64* p = s.p;
    if (refreshing) {
        int best = -1;
        i64 best_pre = 0;
        for (int b = 0; b < s.nb; ++b)
            if (s.open_row[b] >= 0 && (best < 0 || s.earliest_pre(b) < best_pre))
                best = b, best_pre = s.earliest_pre(b);
        if (best >= 0) {
            i64 tck = s.place(best_pre, C_PRE, hi);
            if (tck >= 0) s.issue(tck, C_PRE, best);
            return tck >= 0;
        }
        i64 pre = *std::max_element(s.last_pre.begin(), s.last_pre.end());
        i64 tck = s.place(std::max(pre + p[P_RP], s.ref_tck + p[P_RFC]), C_REF, hi);
        if (tck >= 0) s.issue(tck, C_REF);
        return tck >= 0;
    }
    // per bank: whether the active queue holds a request of it, and one of its open row
    uint64_t has_req = 0, wants_open = 0;
    for (const Req& q : active) {
        has_req |= 1ULL << q.bank;
        if (s.open_row[q.bank] == q.row) wants_open |= 1ULL << q.bank;
    }
    auto wants = [&](int b, i64 row) {
        return ((row < 0 ? has_req : wants_open) >> b & 1) != 0;
    };
    uint64_t tried = 0;  // banks whose command could not be placed: the same again
    for (const Req& q : active) {  // oldest first
        int b = q.bank;
        if (tried >> b & 1) continue;
        if (s.open_row[b] < 0) {
            tried |= 1ULL << b;
            i64 tck = s.place(s.earliest_act(b, q.group), C_ACT, hi);
            if (tck >= 0) {
                s.issue(tck, C_ACT, b, q.row);
                s.opener |= 1ULL << b;
                s.opener_seq[b] = q.seq;
                return true;
            }
        } else if (s.open_row[b] != q.row && guard_allows_pre(s, b, wants(b, s.open_row[b]))) {
            tried |= 1ULL << b;
            i64 tck = s.place(s.earliest_pre(b), C_PRE, hi);
            if (tck >= 0) {
                s.issue(tck, C_PRE, b);
                return true;
            }
        }
    }
    for (int b = 0; b < s.nb; ++b) {  // close rows left idle
        if (s.open_row[b] >= 0 && !wants(b, -1) && s.lo - s.row_used[b] >= p[P_CLOSE_IDLE]) {
            i64 tck = s.place(s.earliest_pre(b), C_PRE, hi);
            if (tck >= 0) {
                s.issue(tck, C_PRE, b);
                return true;
            }
        }
    }
    return false;
}


// A sub-channel controller: its queues and one step per controller cycle, in the order of
// SubchannelModel.run (the column command, the row commands, then the request taken).
struct Ctl {
    Sub s;
    std::vector<Req> rq, wq;
    bool draining = false;
    i64 cycle = 0;  // the cycle the next step serves
    i64 taken = 0;  // requests taken so far
    i64 residency[S_COUNT] = {0, 0, 0};  // cycles stepped (or skipped), by State

    explicit Ctl(const i64* params) : s(params) {}
    bool empty() const { return rq.empty() && wq.empty(); }
    bool any_open() const {
        for (int b = 0; b < s.nb; ++b)
            if (s.open_row[b] >= 0) return true;
        return false;
    }

    // One cycle. ``offer``: the request presented this cycle (null: none); returns whether it
    // was taken. ``done(req, tck)`` for each column command issued, at the tCK its burst ends.
    template <class Done>
    bool step(const Req* offer, Done&& done) {
        const i64* p = s.p;
        const i64 tpc = p[P_TCK_PER_CYCLE];
        const i64 lo = cycle * tpc, hi = lo + tpc - 1;
        if (cycle) s.ca >>= tpc;
        s.lo = lo;
        residency[s.ref_tck + p[P_RFC] > lo ? S_REFRESH : any_open() ? S_ACTIVE : S_PRECHARGED]++;
        const bool room_r = (i64)rq.size() < p[P_READ_QUEUE];
        const bool room_w = (i64)wq.size() < p[P_WRITE_QUEUE];
        bool blocked = false;
        if (offer)
            for (const Req& q : offer->write ? rq : wq)
                if (q.bank == offer->bank && q.row == offer->row && q.col == offer->col)
                    blocked = true;
        if ((i64)wq.size() >= p[P_WRITE_HIGH] || (!wq.empty() && rq.empty()))
            draining = true;
        else if ((i64)wq.size() <= p[P_WRITE_LOW] && !rq.empty())
            draining = false;
        std::vector<Req>& active = draining ? wq : rq;
        const bool refreshing = p[P_REFRESH] && lo >= s.next_refresh;
        if (p[P_ARBITER] == A_TCK && !refreshing) {
            tck_arbiter(active, lo, hi, done);
        } else {
            cycle_arbiter(active, refreshing, hi, done);
        }
        const bool take = offer && (offer->write ? room_w : room_r) && !blocked;
        if (take) {
            (offer->write ? wq : rq).push_back(*offer);
            (offer->write ? wq : rq).back().seq = taken++;
        }
        ++cycle;
        return take;
    }

    // The RTL's cycle: the oldest request whose row is open gets the column command, then up
    // to P_ROW_CMDS row commands (row_command), each at its earliest tCK of the cycle.
    template <class Done>
    void cycle_arbiter(std::vector<Req>& active, bool refreshing, i64 hi, Done&& done) {
        const i64* p = s.p;
        if (!refreshing || any_open()) {  // column command: the oldest whose row is open
            uint64_t tried = 0;  // banks whose column command could not be placed
            for (size_t k = 0; k < active.size(); ++k) {
                const Req& q = active[k];
                if (s.open_row[q.bank] != q.row || (tried >> q.bank & 1)) continue;
                const int cmd = q.write ? C_WR : C_RD;
                i64 tck = s.place(s.earliest_col(q.write, q.bank, q.group), cmd, hi);
                if (tck < 0) {
                    tried |= 1ULL << q.bank;  // one queue: the same direction, the same answer
                    continue;
                }
                s.issue(tck, cmd, q.bank, q.row);
                if ((s.opener >> q.bank & 1) && s.opener_seq[q.bank] == q.seq)
                    s.opener &= ~(1ULL << q.bank);
                done(q, tck + (q.write ? p[P_CWL] : p[P_CL]) + p[P_BURST]);
                active.erase(active.begin() + (long)k);
                break;
            }
        }
        for (i64 k = 0; k < p[P_ROW_CMDS]; ++k)
            if (!row_command(s, active, refreshing, hi)) break;
    }

    // Ramulator 2's GenericDRAMController with FR-FCFS, one command a tCK: first the requests
    // whose own ACT issued (its active buffer), the oldest whose next command is ready; else
    // the other requests', the oldest ready; a PRE the row guard refuses issues nothing.
    template <class Done>
    void tck_arbiter(std::vector<Req>& active, i64 lo, i64 hi, Done&& done) {
        const i64* p = s.p;
        for (i64 t = lo; t <= hi; ++t) {
            const auto next = [&](const Req& q) {
                if (s.open_row[q.bank] == q.row) return q.write ? (int)C_WR : (int)C_RD;
                return s.open_row[q.bank] < 0 ? (int)C_ACT : (int)C_PRE;
            };
            const auto ready = [&](const Req& q, int cmd) {
                const i64 at = cmd == C_ACT   ? s.earliest_act(q.bank, q.group)
                               : cmd == C_PRE ? s.earliest_pre(q.bank)
                                              : s.earliest_col(q.write, q.bank, q.group);
                if (at > t) return false;
                for (int k = 0; k < s.ca_cycles(cmd); ++k)
                    if (s.ca >> (t - lo + k) & 1) return false;
                return true;
            };
            const auto opened = [&](const Req& q) {
                return (s.opener >> q.bank & 1) && s.opener_seq[q.bank] == q.seq;
            };
            long pick = -1;
            int cmd = -1;
            for (int pass = 0; pass < 2 && pick < 0; ++pass)
                for (size_t k = 0; k < active.size(); ++k) {
                    if (opened(active[k]) != (pass == 0)) continue;
                    const int c = next(active[k]);
                    if (ready(active[k], c)) {
                        pick = (long)k, cmd = c;
                        break;
                    }
                }
            if (pick < 0) continue;
            const Req q = active[(size_t)pick];
            if (cmd == C_PRE) {
                bool wanted = false;
                for (const Req& o : active)
                    if (o.bank == q.bank && o.row == s.open_row[q.bank]) wanted = true;
                if (!guard_allows_pre(s, q.bank, wanted)) continue;
            }
            s.issue(t, cmd, q.bank, q.row);
            if (cmd == C_ACT) {
                s.opener |= 1ULL << q.bank;
                s.opener_seq[q.bank] = q.seq;
            } else if (cmd == C_RD || cmd == C_WR) {
                if (opened(q)) s.opener &= ~(1ULL << q.bank);
                done(q, t + (q.write ? p[P_CWL] : p[P_CL]) + p[P_BURST]);
                active.erase(active.begin() + pick);
            }
        }
    }

    // The first cycle at or after ``cycle`` that a refresh is due in.
    i64 refresh_cycle() const {
        const i64 tpc = s.p[P_TCK_PER_CYCLE];
        return std::max(cycle, (s.next_refresh + tpc - 1) / tpc);
    }

    // Idle (queues empty, every row closed): jump to ``to``, short of the next refresh due,
    // as stepping there would (nothing is issued on the way).
    void skip(i64 to) {
        const i64 tpc = s.p[P_TCK_PER_CYCLE];
        if (to <= cycle) return;
        // every row closed: refreshing up to the end of the last REF's nRFC, then precharged
        const i64 ref_end = s.ref_tck + s.p[P_RFC];  // cycles c with c * tpc < ref_end refresh
        const i64 refreshing = std::clamp((ref_end + tpc - 1) / tpc - cycle, (i64)0, to - cycle);
        residency[S_REFRESH] += refreshing;
        residency[S_PRECHARGED] += to - cycle - refreshing;
        const i64 shift = (to - cycle) * tpc;
        if (cycle == 0) {  // step 0 does not shift: the mask starts at tCK 0
            s.ca = shift - tpc >= 64 ? 0 : s.ca >> (shift - tpc);
        } else {
            s.ca = shift >= 64 ? 0 : s.ca >> shift;
        }
        cycle = to;
        s.lo = (cycle - 1) * tpc;
    }
};

}  // namespace ddr5
