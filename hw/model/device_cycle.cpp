// The model device's timing, cycle by cycle: the RTL device's command queue (nelssa_cmdq), its
// attention units (nelssa_attn_unit, their line readers and the engine's beat handshakes),
// the host's CXL.mem port, the memory front end (nelssa_ddr5_frontend: one request per
// sub-channel per cycle, round robin, the host's port last) and the eight sub-channel
// controllers (ddr5_sub.hpp, the policy of the RTL controller). No data moves: ModelDevice
// computes the results; this says when each descriptor's completion is written. The unit's
// own costs that the RTL spends outside these handshakes (its read pipeline, the engine's
// turns and output) are parameters, fitted by scripts/calibrate_device.py.
//
// Built with ddr5_replay.cpp into one library (hw/model/ddr5_replay.py); driven by
// hw/model/device_cycle.py.
#include <algorithm>
#include <deque>
#include <queue>

#include "ddr5_sub.hpp"

using namespace ddr5;

namespace {

// the device's parameters, in the order of device_cycle.py's DEVICE_PARAMS
enum DevParam {
    D_UNITS, D_ORDER_DEPTH, D_READ_DEPTH, D_HOST_SHARE, D_DOORBELL, D_READ_LATENCY,
    D_KV_TURN, D_CLUSTER_GAP, D_FINAL, D_OUT_BEAT, D_START, D_FINAL_FIXED, D_V_ROW, D_BEAT,
    D_COUNT
};
constexpr int SUBS = 8;
constexpr int HOST_PORT = 0, CMDQ_PORT = 1, FIRST_UNIT_PORT = 2;

struct Line {
    int sub;
    Req r;
};

struct Desc {
    i64 key;
    bool nop, engine;  // the queue completes it alone; the stream reaches the engine
    Line ring, cq;     // its ring slot (the queue's read) and its completion's line
    std::vector<Line> ids, dir, stream, out;
    std::vector<int> k_beats;  // per selected cluster: K beats (as many V beats follow)
    int q_lines = 0, q_heads = 1;
    i64 arrived = 0;  // the cycle the command queue sees its doorbell
};

enum UnitState { U_IDLE, U_IDS, U_DIR, U_WAIT, U_RUN, U_DRAIN, U_DONE };
enum EngState { E_CMD, E_Q, E_CLU, E_K, E_TURN, E_V, E_FINAL, E_OUT, E_END };

struct Unit {
    int state = U_IDLE;
    int desc = -1;
    // line reader: sequence numbers issued and delivered; which have their data
    i64 issued = 0, delivered = 0;
    std::vector<char> have;
    int gen = 0, use = 0;  // lines of the phase asked for, taken
    // engine
    int eng = E_CMD, cluster = 0, beat = 0, wait = 0, outs = 0, writes = 0, cpls = 0;
    bool cpl_next = false;  // a write was taken last cycle: its completion comes now
};

enum CmdqState { Q_IDLE, Q_READ, Q_READ_WAIT, Q_WRITE, Q_WRITE_WAIT };

struct Arrival {
    i64 cycle;
    int port;
    i64 tag;
    bool operator>(const Arrival& o) const { return cycle > o.cycle; }
};

struct Device {
    const std::vector<i64> mem_params, dev;
    std::vector<Ctl> ctl;
    std::vector<Unit> units;
    std::vector<Desc> descs;  // every descriptor added, by index
    size_t next_fetch = 0;    // the first not yet read from the ring
    std::deque<int> order;    // fetched, not yet completed: desc index
    std::vector<int> unit_of; // per desc: its unit (-1: none)
    std::vector<char> owed;   // per unit: done, its completion not yet written
    std::vector<char> assigned;
    int cmdq = Q_IDLE, cmdq_unit = -1;
    bool cmdq_cpl_next = false;
    std::deque<std::pair<i64, Line>> host;  // host lines: arrival, line (its tag in r.tag)
    std::vector<std::pair<i64, i64>> host_done;  // tag, cycle its response may leave
    std::priority_queue<Arrival, std::vector<Arrival>, std::greater<Arrival>> arrivals;
    std::vector<std::pair<i64, i64>> finished;  // key, cycle its completion was written
    i64 now = 0, busy = 0;
    std::vector<std::vector<i64>> logs;  // per sub-channel, where logging: its commands

    Device(const i64* mp, int mp_n, const i64* dp)
        : mem_params(mp, mp + mp_n), dev(dp, dp + D_COUNT) {
        for (int s = 0; s < SUBS; ++s) ctl.emplace_back(mem_params.data());
        units.resize((size_t)dev[D_UNITS]);
        for (Unit& u : units) u.have.assign((size_t)dev[D_READ_DEPTH], 0);
        owed.assign(units.size(), 0);
        assigned.assign(units.size(), 0);
    }
    // Ctl holds a pointer into mem_params: a copy points it at its own
    Device(const Device& o)
        : mem_params(o.mem_params), dev(o.dev), ctl(o.ctl), units(o.units), descs(o.descs),
          next_fetch(o.next_fetch), order(o.order), unit_of(o.unit_of), owed(o.owed),
          assigned(o.assigned), cmdq(o.cmdq), cmdq_unit(o.cmdq_unit),
          cmdq_cpl_next(o.cmdq_cpl_next), host(o.host),
          arrivals(o.arrivals), finished(o.finished), host_done(o.host_done), now(o.now),
          busy(o.busy) {
        for (Ctl& c : ctl) {
            c.s.p = mem_params.data();
            c.s.log = nullptr;  // a clone looks ahead: its commands are not the run's
        }
    }

    bool any_busy() const {
        for (const Unit& u : units)
            if (u.state != U_IDLE) return true;
        return false;
    }
    bool idle() const {
        return next_fetch == descs.size() && order.empty() && cmdq == Q_IDLE && !any_busy() &&
               host.empty() && arrivals.empty() && !cmdq_cpl_next;
    }

    // ---- what each port asks this cycle ----------------------------------------------------
    const std::vector<Line>* phase_lines(const Unit& u) const {
        const Desc& d = descs[(size_t)u.desc];
        if (u.state == U_IDS) return &d.ids;
        if (u.state == U_DIR) return &d.dir;
        if (u.state == U_RUN) return &d.stream;
        return nullptr;
    }
    // a unit's request: its result write first, else its next read (tag: sequence number)
    bool unit_request(const Unit& u, Line& line, bool& write) const {
        if (u.state == U_RUN && u.eng == E_OUT) {
            const Desc& d = descs[(size_t)u.desc];
            if (u.wait > 0 || u.outs >= (int)d.out.size()) return false;
            line = d.out[(size_t)u.outs];
            write = true;
            return true;
        }
        const std::vector<Line>* lines = phase_lines(u);
        if (!lines || u.gen >= (int)lines->size()) return false;
        if (u.issued - u.delivered >= dev[D_READ_DEPTH]) return false;
        line = (*lines)[(size_t)u.gen];
        write = false;
        return true;
    }

    // ---- one cycle ---------------------------------------------------------------------------
    void step() {
        const int ports = (int)units.size() + 2;
        bool valid[8] = {};
        Line want[8];
        bool is_write[8] = {};
        const bool units_busy = any_busy();
        if (units_busy) ++busy;
        // host port: CXL.mem offers its next line to the memory only in cycles it is not
        // held (nelssa_device's host_hold while units run), and takes it only if the memory
        // does in that cycle (nelssa_cxl_mem_slave): else it waits for its next turn
        if (!host.empty() && host.front().first <= now &&
            !(units_busy && now % dev[D_HOST_SHARE] != 0)) {
            valid[HOST_PORT] = true;
            want[HOST_PORT] = host.front().second;
            is_write[HOST_PORT] = want[HOST_PORT].r.write;
        }
        if (cmdq == Q_READ || cmdq == Q_WRITE) {
            const Desc& d = descs[cmdq == Q_READ ? next_fetch : (size_t)order.front()];
            valid[CMDQ_PORT] = true;
            want[CMDQ_PORT] = cmdq == Q_READ ? d.ring : d.cq;
            is_write[CMDQ_PORT] = cmdq == Q_WRITE;
        }
        for (size_t k = 0; k < units.size(); ++k) {
            const int p = FIRST_UNIT_PORT + (int)k;
            valid[p] = unit_request(units[k], want[p], is_write[p]);
        }
        // front end: per sub-channel the port after the last winner first, the host's last
        bool taken[8] = {};
        const int rr = (int)(now % ports);
        for (int s = 0; s < SUBS; ++s) {
            int grant = -1;
            for (int pass = 0; pass < 2 && grant < 0; ++pass)
                for (int n = 0; n < ports && grant < 0; ++n) {
                    const int p = (rr + n) % ports;
                    if (valid[p] && want[p].sub == s && (p == HOST_PORT) == (pass == 1))
                        grant = p;
                }
            Req offer{};
            if (grant >= 0) {
                offer = want[grant].r;
                offer.write = is_write[grant];
                offer.port = grant;
                offer.tag = grant >= FIRST_UNIT_PORT ? units[(size_t)(grant - 2)].issued
                                                 : want[grant].r.tag;
            }
            const i64 tpc = mem_params[P_TCK_PER_CYCLE];
            const i64 latency = dev[D_READ_LATENCY];
            const bool took = ctl[(size_t)s].step(grant >= 0 ? &offer : nullptr,
                                                  [&](const Req& q, i64 end_tck) {
                if (!q.write)
                    arrivals.push({(end_tck + tpc - 1) / tpc + latency, q.port, q.tag});
            });
            if (took) taken[grant] = true;
        }
        // read data that reaches its port this cycle
        bool cmdq_data = false;
        while (!arrivals.empty() && arrivals.top().cycle <= now) {
            const Arrival a = arrivals.top();
            arrivals.pop();
            if (a.port == CMDQ_PORT) {
                cmdq_data = true;
            } else if (a.port == HOST_PORT) {
                host_done.emplace_back(a.tag, now + 1);
            } else if (a.port >= FIRST_UNIT_PORT) {
                Unit& u = units[(size_t)(a.port - FIRST_UNIT_PORT)];
                u.have[(size_t)(a.tag % dev[D_READ_DEPTH])] = 1;
            }
        }
        // state updates, from what was asked and taken
        if (taken[HOST_PORT]) {  // a write completes the cycle after it is taken
            if (host.front().second.r.write) host_done.emplace_back(host.front().second.r.tag,
                                                                   now + 1);
            host.pop_front();
        }
        for (size_t k = 0; k < units.size(); ++k) update_unit(k, taken[FIRST_UNIT_PORT + k]);
        update_cmdq(taken[CMDQ_PORT], cmdq_data);
        ++now;
    }

    void update_unit(size_t k, bool taken) {
        Unit& u = units[k];
        if (u.cpl_next) {
            ++u.cpls;
            u.cpl_next = false;
        }
        if (u.state == U_IDLE) return;
        const Desc& d = descs[(size_t)u.desc];
        if (u.state == U_DONE) {
            u.state = U_IDLE;
            owed[k] = 1;
            return;
        }
        if (u.state == U_WAIT) {
            u.state = d.engine ? U_RUN : U_DRAIN;
            return;
        }
        const bool writing = u.state == U_RUN && u.eng == E_OUT;
        if (taken && writing) {
            ++u.outs;
            ++u.writes;
            u.cpl_next = true;
            u.wait = (int)dev[D_OUT_BEAT];
        } else if (writing && u.wait > 0) {
            --u.wait;
        } else if (taken) {
            ++u.gen;
            ++u.issued;
        }
        // the data in order: the reader's head line, when it is in
        const bool head_in = u.delivered < u.issued &&
                             u.have[(size_t)(u.delivered % dev[D_READ_DEPTH])];
        auto take_head = [&]() {
            u.have[(size_t)(u.delivered % dev[D_READ_DEPTH])] = 0;
            ++u.delivered;
        };
        const std::vector<Line>* lines = phase_lines(u);
        switch (u.state) {
        case U_IDS:
        case U_DIR:
            if (head_in) {
                take_head();
                if (++u.use == (int)lines->size()) next_phase(u);
            } else if (lines->empty()) {
                next_phase(u);
            }
            break;
        case U_DRAIN:
            if (head_in) take_head();
            if (u.delivered == u.issued) u.state = U_DONE;
            break;
        case U_RUN:
            run_engine(u, d, head_in, take_head);
            if (u.eng == E_END && u.cpls == u.writes && !u.cpl_next &&
                u.delivered == u.issued)
                u.state = U_DONE;
            break;
        default:
            break;
        }
    }

    void next_phase(Unit& u) {
        u.gen = u.use = 0;
        if (u.state == U_IDS) {
            u.state = U_DIR;
        } else {
            u.state = U_WAIT;
            u.eng = E_CMD;
            u.cluster = u.beat = u.outs = u.writes = u.cpls = 0;
            u.wait = (int)dev[D_START];
        }
    }

    template <class Take>
    void run_engine(Unit& u, const Desc& d, bool head_in, Take&& take_head) {
        // the head line taken as a beat, if in; true when it is the n-th of the run
        auto beats_done = [&](int n) {
            if (!head_in) return false;
            take_head();
            if (++u.beat < n) return false;
            u.beat = 0;
            return true;
        };
        switch (u.eng) {
        case E_CMD:  // the command handshake, and the engine's start
            if (u.wait-- <= 0) u.eng = E_Q;
            break;
        case E_Q:
            if (beats_done(d.q_lines)) {
                u.eng = E_CLU;
                u.wait = 1;
            }
            break;
        case E_CLU:  // the cluster's length handed over
            if (--u.wait <= 0) u.eng = E_K;
            break;
        case E_K:
            // a K beat takes D_BEAT cycles (the engine's chunks of its lanes): the engine
            // waits after each
            if (u.wait > 0) {
                --u.wait;
                break;
            }
            if (beats_done(d.k_beats[(size_t)u.cluster])) {
                u.eng = E_TURN;
                u.wait = (int)(dev[D_KV_TURN] + dev[D_BEAT] - 1);
            } else if (head_in) {
                u.wait = (int)(dev[D_BEAT] - 1);
            }
            break;
        case E_TURN:  // the cluster's scores and max settle before its V rows
            if (--u.wait <= 0) u.eng = E_V;
            break;
        case E_V: {
            // a beat takes D_BEAT cycles, a row at least D_V_ROW (a pipelined adder's o and
            // l): the engine waits after each beat, the longer after a row's last
            const int bpr = std::max(1, d.q_lines / std::max(1, d.q_heads));
            const i64 beat = dev[D_BEAT];
            if (u.wait > 0) {
                --u.wait;
                break;
            }
            const bool row_end = head_in && (u.beat + 1) % bpr == 0;
            if (!beats_done(d.k_beats[(size_t)u.cluster])) {
                if (head_in)
                    u.wait = (int)(row_end ? std::max<i64>(beat - 1,
                                                           dev[D_V_ROW] - (bpr - 1) * beat - 1)
                                           : beat - 1);
                break;
            }
            {
                if (++u.cluster == (int)d.k_beats.size()) {
                    u.eng = E_FINAL;
                    u.wait = (int)(dev[D_FINAL] * d.q_heads + dev[D_FINAL_FIXED] + beat - 1);
                } else if (dev[D_CLUSTER_GAP] > 0) {
                    u.eng = E_CLU;
                    u.wait = (int)(dev[D_CLUSTER_GAP] + beat - 1);
                } else {
                    u.eng = E_K;
                    u.wait = (int)(beat - 1);
                }
            }
            break;
        }
        case E_FINAL:  // normalisation, head by head
            if (--u.wait <= 0) {
                u.eng = d.out.empty() ? E_END : E_OUT;
                u.wait = 0;
            }
            break;
        case E_OUT:  // result beats: one a write, D_OUT_BEAT cycles apart
            if (u.outs == (int)d.out.size()) u.eng = E_END;
            break;
        default:
            break;
        }
    }

    void update_cmdq(bool taken, bool data) {
        if (cmdq_cpl_next) {  // the completion written: its unit is free
            cmdq_cpl_next = false;
            const int i = order.front();
            order.pop_front();
            if (unit_of[(size_t)i] >= 0) {
                owed[(size_t)unit_of[(size_t)i]] = 0;
                assigned[(size_t)unit_of[(size_t)i]] = 0;
            }
            finished.emplace_back(descs[(size_t)i].key, now + 1);  // seen from the next cycle
            release(descs[(size_t)i]);
            cmdq = Q_IDLE;
            return;
        }
        switch (cmdq) {
        case Q_IDLE: {
            if (!order.empty()) {
                const int i = order.front();
                if (descs[(size_t)i].nop || owed[(size_t)unit_of[(size_t)i]]) {
                    cmdq = Q_WRITE;
                    break;
                }
            }
            const bool pending = next_fetch < descs.size() && descs[next_fetch].arrived <= now;
            if (pending && free_unit() >= 0 && (i64)order.size() < dev[D_ORDER_DEPTH])
                cmdq = Q_READ;
            break;
        }
        case Q_READ:
            if (taken) cmdq = Q_READ_WAIT;
            break;
        case Q_READ_WAIT:
            if (data) {
                const int i = (int)next_fetch++;
                const Desc& d = descs[(size_t)i];
                int k = -1;
                if (!d.nop) {
                    k = free_unit();
                    assigned[(size_t)k] = 1;
                    start_unit((size_t)k, i);
                }
                unit_of[(size_t)i] = k;
                order.push_back(i);
                cmdq = Q_IDLE;
            }
            break;
        case Q_WRITE:
            if (taken) {
                cmdq = Q_WRITE_WAIT;
                cmdq_cpl_next = true;
            }
            break;
        default:
            break;
        }
    }

    // a completed descriptor's lines are not needed again: a long run keeps only its record
    static void release(Desc& d) {
        for (std::vector<Line>* v : {&d.ids, &d.dir, &d.stream, &d.out})
            std::vector<Line>().swap(*v);
        std::vector<int>().swap(d.k_beats);
    }

    int free_unit() const {
        for (size_t k = 0; k < units.size(); ++k)
            if (!assigned[k] && units[k].state == U_IDLE) return (int)k;
        return -1;
    }

    void start_unit(size_t k, int i) {
        Unit& u = units[k];
        const Desc& d = descs[(size_t)i];
        u.desc = i;
        u.gen = u.use = 0;
        u.eng = E_CMD;
        const bool static_fail = d.ids.empty() && d.dir.empty() && d.stream.empty();
        u.state = static_fail ? U_DONE : U_IDS;
    }

    // ---- time ------------------------------------------------------------------------------
    bool can_skip() const {
        if (!idle()) return false;
        for (const Ctl& c : ctl)
            if (!c.empty() || c.any_open()) return false;
        return true;
    }

    void run(i64 until, bool stop_at_done) {
        const size_t done_before = finished.size();
        while (now < until) {
            if (stop_at_done && finished.size() > done_before) return;
            if (can_skip()) {
                i64 to = until;
                for (const Ctl& c : ctl) to = std::min(to, c.refresh_cycle());
                // the mask of CA slots spans a few cycles: leave them to be stepped
                if (to > now + 4) {
                    for (Ctl& c : ctl) c.skip(to - 2);
                    now = to - 2;
                    continue;
                }
            }
            step();
        }
    }
};

// The first ``max`` pairs of ``from``, moved out into two arrays; how many.
int take(std::vector<std::pair<i64, i64>>& from, long long* first, long long* second, int max) {
    const int n = std::min(max, (int)from.size());
    for (int k = 0; k < n; ++k) {
        first[k] = from[(size_t)k].first;
        second[k] = from[(size_t)k].second;
    }
    from.erase(from.begin(), from.begin() + n);
    return n;
}

// A line from its five coordinates (sub-channel, bank group, bank in the group, row, column).
Line line_at(const i64* c, int banks_per_group, bool write) {
    Line l;
    l.sub = (int)c[0];
    l.r = Req{};
    l.r.group = (int)c[1];
    l.r.bank = (int)c[2] + l.r.group * banks_per_group;  // the controller's bank index
    l.r.row = c[3];
    l.r.col = c[4];
    l.r.write = write;
    return l;
}

}  // namespace

extern "C" {

// null for a unit count the front end's 8 ports cannot serve, or banks the masks cannot hold
void* dc_new(const long long* mem_params, int mem_n, const long long* dev_params) {
    if (dev_params[D_UNITS] < 1 || dev_params[D_UNITS] + 2 > 8 ||
        mem_params[P_GROUPS] * mem_params[P_BANKS_PER_GROUP] > 64 ||
        mem_params[P_TCK_PER_CYCLE] + 8 > 64)
        return nullptr;
    return new Device(mem_params, mem_n, dev_params);
}

void dc_free(void* h) { delete static_cast<Device*>(h); }

void* dc_clone(void* h) { return new Device(*static_cast<Device*>(h)); }

// One descriptor on the ring, seen ``doorbell`` cycles from now. ``lines``: five numbers each
// (sub-channel, bank group, bank, row, column) for its ring slot, its completion's line, then
// its id, directory and stream reads and its result writes (n_ids, n_dir, n_stream, n_out).
// ``k_beats``: the K beats of each selected cluster (n_clusters).
void dc_add(void* h, long long key, int nop, int engine, int q_lines, int q_heads, int n_ids,
            int n_dir, int n_stream, int n_out, const int* k_beats, int n_clusters,
            const long long* lines) {
    Device& dv = *static_cast<Device*>(h);
    Desc d;
    d.key = key;
    d.nop = nop != 0;
    d.engine = engine != 0;
    d.q_lines = q_lines;
    d.q_heads = q_heads;
    d.arrived = dv.now + dv.dev[D_DOORBELL];
    auto next = [&](bool write) {
        const Line l = line_at(lines, dv.ctl[0].s.bpg, write);
        lines += 5;
        return l;
    };
    d.ring = next(false);
    d.cq = next(true);
    for (int k = 0; k < n_ids; ++k) d.ids.push_back(next(false));
    for (int k = 0; k < n_dir; ++k) d.dir.push_back(next(false));
    for (int k = 0; k < n_stream; ++k) d.stream.push_back(next(false));
    for (int k = 0; k < n_out; ++k) d.out.push_back(next(true));
    d.k_beats.assign(k_beats, k_beats + n_clusters);
    dv.descs.push_back(std::move(d));
    dv.unit_of.push_back(-1);
}

// A host CXL.mem line arriving now; ``tag`` names it in dc_host_done.
void dc_add_host(void* h, const long long* coords, int write, long long tag) {
    Device& dv = *static_cast<Device*>(h);
    Line l = line_at(coords, dv.ctl[0].s.bpg, write != 0);
    l.r.tag = tag;
    dv.host.emplace_back(dv.now, l);
}

// Run to cycle ``until`` (or, with stop_at_done, the cycle after the first completion).
long long dc_run(void* h, long long until, int stop_at_done) {
    Device& dv = *static_cast<Device*>(h);
    dv.run(until, stop_at_done != 0);
    return dv.now;
}

// Completions written since the last call: up to ``max`` (key, cycle) pairs; returns how many.
int dc_finished(void* h, long long* keys, long long* cycles, int max) {
    return take(static_cast<Device*>(h)->finished, keys, cycles, max);
}

// Host lines served since the last call: up to ``max`` (tag, cycle its response may leave).
int dc_host_done(void* h, long long* tags, long long* cycles, int max) {
    return take(static_cast<Device*>(h)->host_done, tags, cycles, max);
}

// Per sub-channel: ACT, RD, WR, PRE, REF issued and the cycles stepped with the banks active,
// precharged, refreshing (out: SUBS x (C_COUNT + S_COUNT)).
void dc_counts(void* h, long long* out) {
    const Device& dv = *static_cast<Device*>(h);
    for (int s = 0; s < SUBS; ++s) {
        const Ctl& c = dv.ctl[(size_t)s];
        for (int k = 0; k < C_COUNT; ++k) *out++ = c.s.counts[k];
        for (int k = 0; k < S_COUNT; ++k) *out++ = c.residency[k];
    }
}

// Log every command from now on (tCK, command, bank, row each), per sub-channel.
void dc_log(void* h) {
    Device& dv = *static_cast<Device*>(h);
    dv.logs.assign(SUBS, {});
    for (int s = 0; s < SUBS; ++s) dv.ctl[(size_t)s].s.log = &dv.logs[(size_t)s];
}

// Up to ``max`` logged commands of sub-channel ``sub``, moved out (4 numbers each); how many.
long long dc_log_take(void* h, int sub, long long* out, long long max) {
    Device& dv = *static_cast<Device*>(h);
    if (dv.logs.empty() || sub < 0 || sub >= SUBS) return 0;
    std::vector<i64>& v = dv.logs[(size_t)sub];
    const long long n = std::min(max, (long long)v.size() / 4);
    std::copy(v.begin(), v.begin() + n * 4, out);
    v.erase(v.begin(), v.begin() + n * 4);
    return n;
}

long long dc_now(void* h) { return static_cast<Device*>(h)->now; }
long long dc_busy(void* h) { return static_cast<Device*>(h)->busy; }
int dc_idle(void* h) { return static_cast<Device*>(h)->idle() ? 1 : 0; }

}  // extern "C"
