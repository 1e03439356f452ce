// trace.cpp: the emulator's access tracing (emulator/access.py's access_report).
//
// A kernel built for tracing (compiler.py's trace flavour) carries the same calls as one built for
// race checking: g++'s ThreadSanitizer instrumentation, a call with the address and size before every
// memory access (racecheck.cpp defines them and hands them here in a traced launch), compiled without
// vectorization so that each access of the source is one call, as it is one instruction on a GPU. The
// launch runs its blocks one at a time (the driver gives it one worker), so nothing here takes a lock.
//
// Nsight Compute counts per warp-level instruction (a "request"); the emulator runs lanes as fibers,
// each on until it waits. So the lanes of a warp are grouped by code address and by how often each
// lane has executed it: a lane's k-th execution of an access belongs to the warp's k-th request there,
// whatever order the fibers ran in. A block's requests are counted when it exits (the rules below),
// into one row per code address and memory space.
//
// Addresses are counted where a GPU would place them: a global access by its offset in its device
// buffer (cudaMalloc aligns a buffer to 256 bytes; the emulator's are aligned to 16 only), a shared
// one by its offset in its variable (or in the dynamic shared memory). Other memory (the thread's own
// stack, as local memory; __constant__ variables; the kernel's parameters) is not counted.
#include "trace.h"

#include <dlfcn.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

namespace emu {
namespace trace {
namespace {

// --- the rules: what the hardware does with one request, as Nsight Compute counts it ----------------

constexpr unsigned kSectorBytes = 32;  // global memory moves in 32-byte sectors
constexpr unsigned kBanks = 32, kBankBytes = 4;  // shared memory: 32 banks of 4-byte words

// Global: the distinct 32-byte sectors the active lanes touch ("sectors/request is 32 when each of 32
// active threads accesses a unique 128-byte line; 1 when one thread is active": NVIDIA's forum answer
// on l1tex__t_sectors_pipe_lsu_mem_global_op_ld / ..._requests_...; one request per warp-level
// instruction: "when an SM executes a global/local/shared memory instruction for a warp, a single
// request is sent to L1TEX", Nsight Compute's kernel profiling guide and forum).
unsigned sectors(const uint64_t* at, unsigned lanes, unsigned bytes) {
    static thread_local std::vector<uint64_t> touched;  // kept: one allocation per worker
    touched.clear();
    for (unsigned p = lanes; p; p &= p - 1) {
        const uint64_t a = at[__builtin_ctz(p)];
        for (uint64_t s = a / kSectorBytes; s <= (a + bytes - 1) / kSectorBytes; ++s) touched.push_back(s);
    }
    std::sort(touched.begin(), touched.end());
    return unsigned(std::unique(touched.begin(), touched.end()) - touched.begin());
}

// Shared: a wavefront serves each bank once (one 4-byte word per bank); lanes that read the same word
// share it (a broadcast; of a store one lane writes it), lanes that need different words of one bank
// take one wavefront each: the bank conflict (CUDA C++ Programming Guide, "Shared Memory" of compute
// capability 5.x and later). A request of 8-byte accesses is served in half-warp phases and one of
// 16-byte accesses in quarter-warp phases, 128 bytes each; a load whose lane pairs (n, n^1) or (n, n^2)
// all read one address is served in half as many (NVIDIA's forum, "Unexpected shared memory bank
// conflict": an LDS.128 takes 4 wavefronts, 2 with such pairs; ncu_ch14_16.json's matmul_tiled agrees).
// The ideal is one wavefront per phase; Nsight Compute's l1tex__data_bank_conflicts_pipe_lsu_mem_shared
// counts the wavefronts beyond it.
struct Wavefronts {
    unsigned actual, ideal;
};

bool pairs_alike(const uint64_t* at, unsigned lanes, unsigned distance) {
    for (unsigned p = lanes; p; p &= p - 1) {
        const unsigned lane = __builtin_ctz(p), other = lane ^ distance;
        if ((lanes >> other & 1) && at[other] != at[lane]) return false;
    }
    return true;
}

Wavefronts wavefronts(const uint64_t* at, unsigned lanes, unsigned bytes, bool load) {
    unsigned phase_lanes = bytes <= 4 ? 32 : bytes <= 8 ? 16 : 8;
    if (load && bytes > 4 && (pairs_alike(at, lanes, 1) || pairs_alike(at, lanes, 2))) phase_lanes *= 2;
    Wavefronts w{0, 0};
    for (unsigned first = 0; first < 32; first += phase_lanes) {
        const unsigned phase = lanes & unsigned((uint64_t(1) << (first + phase_lanes)) - (uint64_t(1) << first));
        if (!phase) continue;
        static thread_local std::vector<uint64_t> words;  // distinct words, each read or written once
        words.clear();
        for (unsigned p = phase; p; p &= p - 1) {
            const uint64_t a = at[__builtin_ctz(p)];
            for (uint64_t word = a / kBankBytes; word <= (a + bytes - 1) / kBankBytes; ++word) words.push_back(word);
        }
        std::sort(words.begin(), words.end());
        words.erase(std::unique(words.begin(), words.end()), words.end());
        unsigned per_bank[kBanks] = {}, most = 0;
        for (uint64_t word : words) most = std::max(most, ++per_bank[word % kBanks]);
        w.actual += most;
        w.ideal += 1;
    }
    return w;
}

// --- what a launch records ---------------------------------------------------------------------------

constexpr int kOffsetBits = 40;                 // a lane's access: its region's index, then its offset
constexpr uint64_t kShared = uint64_t(1) << 63;  // set for shared memory

struct Group {  // one request: the k-th execution of a code address by the lanes of a warp
    uint64_t at[32];
    unsigned lanes = 0;
};
struct Site {  // a code address, executed by one warp
    unsigned executed[32] = {};
    unsigned bytes = 0;
    int kind = LOAD;
    std::vector<Group> groups;
};
struct Span {
    uintptr_t start, end;
};
struct BlockState {
    std::unordered_map<uint64_t, Site> sites;  // by pc * 32 + warp; kept from block to block (see reset)
    Span dynamic_shared;
};

// Empties a block's sites for the next block, keeping their memory: the next block makes the same
// requests, and the device process may not give memory back (device_process.cpp's M_TRIM_THRESHOLD).
void reset(BlockState& s) {
    for (auto& [key, site] : s.sites) {
        memset(site.executed, 0, sizeof site.executed);
        site.groups.clear();
    }
}

std::vector<uintptr_t> g_regions;                   // region index -> its start
std::unordered_map<uintptr_t, uint64_t> g_region_of;  // and back
std::vector<Span> g_shared_variables;               // the static __shared__ variables seen this launch
Span g_buffer{0, 0};                                // the device buffer found last
std::map<std::pair<uint64_t, uint32_t>, Row> g_rows;  // by (pc, space)
std::vector<Row> g_result;                          // the last traced launch's rows, pc as an offset

uint64_t region(uintptr_t start) {
    auto found = g_region_of.find(start);
    if (found != g_region_of.end()) return found->second;
    g_regions.push_back(start);
    return g_region_of[start] = g_regions.size() - 1;
}

// The access at `a` as kShared | region << kOffsetBits | offset; false for memory that is not counted.
bool locate(uintptr_t a, const BlockState& s, uint64_t* out) {
    if (a - s.dynamic_shared.start < s.dynamic_shared.end - s.dynamic_shared.start) {
        *out = kShared | region(s.dynamic_shared.start) << kOffsetBits | (a - s.dynamic_shared.start);
        return true;
    }
    for (const Span& v : g_shared_variables)
        if (a - v.start < v.end - v.start) {
            *out = kShared | region(v.start) << kOffsetBits | (a - v.start);
            return true;
        }
    if (a - g_buffer.start >= g_buffer.end - g_buffer.start && !device_buffer(a, &g_buffer.start, &g_buffer.end))
        return false;
    *out = region(g_buffer.start) << kOffsetBits | (a - g_buffer.start);
    return true;
}

void count(uint64_t pc, const Site& site, const Group& g, uint64_t block, unsigned warp) {
    for (const bool shared : {false, true}) {
        unsigned lanes = 0;
        uint64_t at[32];
        for (unsigned p = g.lanes; p; p &= p - 1) {
            const unsigned lane = __builtin_ctz(p);
            if (bool(g.at[lane] & kShared) != shared) continue;
            lanes |= 1u << lane;
            at[lane] = g.at[lane] & ~kShared;
        }
        if (!lanes) continue;
        Row& row = g_rows[{pc, shared ? SHARED : GLOBAL}];
        if (row.requests == 0) {
            row.pc = pc;
            row.kind = uint32_t(site.kind);
            row.space = shared ? SHARED : GLOBAL;
            row.bytes = site.bytes;
            row.sample_lanes = lanes;
            row.sample_block = block;
            row.sample_warp = warp;
            row.sample_region = g_regions[(at[__builtin_ctz(lanes)] >> kOffsetBits)];
            for (unsigned p = lanes; p; p &= p - 1)
                row.sample[__builtin_ctz(p)] = at[__builtin_ctz(p)] & ((uint64_t(1) << kOffsetBits) - 1);
        }
        row.requests++;
        row.lanes += unsigned(__builtin_popcount(lanes));
        if (shared) {
            const Wavefronts w = wavefronts(at, lanes, site.bytes, site.kind == LOAD);
            row.wavefronts += w.actual;
            row.ideal += w.ideal;
        } else {
            row.sectors += sectors(at, lanes, site.bytes);
        }
    }
}

}  // namespace

bool g_on = false;

void launch_begin() {
    g_regions.clear();
    g_region_of.clear();
    g_shared_variables.clear();
    g_buffer = {0, 0};
    g_rows.clear();
    g_on = true;
}

void block_begin(Block& b, unsigned char* dynamic_shared, size_t shared_bytes) {
    BlockState* s = static_cast<BlockState*>(b.trace);
    if (!s) b.trace = s = new BlockState;
    reset(*s);  // a block abandoned by a fault leaves its requests behind
    s->dynamic_shared = {reinterpret_cast<uintptr_t>(dynamic_shared), reinterpret_cast<uintptr_t>(dynamic_shared) + shared_bytes};
}

void block_end(Block& b) {
    BlockState& s = *static_cast<BlockState*>(b.trace);
    std::vector<std::pair<uint64_t, Site*>> sites;  // by code address, then warp: the sample is the lowest warp's
    for (auto& [key, site] : s.sites)
        if (!site.groups.empty()) sites.push_back({key, &site});
    std::sort(sites.begin(), sites.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    const uint64_t block = b.block_idx.x + uint64_t(b.grid_dim.x) * (b.block_idx.y + uint64_t(b.grid_dim.y) * b.block_idx.z);
    for (auto& [key, site] : sites)
        for (const Group& g : site->groups) count(key / 32, *site, g, block, unsigned(key % 32));
    reset(s);
}

void access(uintptr_t a, size_t size, int kind, uintptr_t pc) {
    Thread* t = self();
    if (a - reinterpret_cast<uintptr_t>(t) < kStackBytes || a - reinterpret_cast<uintptr_t>(t->block) < sizeof(Block))
        return;  // its own stack (local memory) and its block's built-in variables
    BlockState& s = *static_cast<BlockState*>(t->block->trace);
    uint64_t at;
    if (!locate(a, s, &at)) return;
    const dim3 d = t->block->block_dim;
    const unsigned linear = t->thread_idx.x + d.x * (t->thread_idx.y + d.y * t->thread_idx.z);
    const unsigned lane = linear % 32;
    Site& site = s.sites[pc * 32 + linear / 32];
    if (site.bytes == 0) {
        site.bytes = unsigned(size);
        site.kind = kind & 2 ? ATOMIC : kind & 1 ? STORE : LOAD;  // racecheck.cpp's Kind: WRITE 1, ATOMIC 2
    }
    const unsigned k = site.executed[lane]++;
    if (k == site.groups.size()) site.groups.emplace_back();
    site.groups[k].at[lane] = at;
    site.groups[k].lanes |= 1u << lane;
}

void shared_variable(uintptr_t address, size_t bytes) {
    for (const Span& v : g_shared_variables)
        if (v.start == address) return;
    g_shared_variables.push_back({address, address + bytes});
}

void launch_end() {
    g_on = false;
    g_result.clear();
    for (auto& [key, row] : g_rows) {
        Row r = row;
        Dl_info code{};  // the call's own address (pc - 1), as an offset in its library
        if (dladdr(reinterpret_cast<void*>(r.pc - 1), &code) && code.dli_fbase)
            r.pc = r.pc - 1 - reinterpret_cast<uintptr_t>(code.dli_fbase);
        g_result.push_back(r);
    }
    g_rows.clear();
}

}  // namespace trace
}  // namespace emu

// The rows of the last traced launch, copied into `out` (at most `capacity`); returns how many there are.
extern "C" size_t emu_trace_rows(emu::trace::Row* out, size_t capacity) {
    const std::vector<emu::trace::Row>& rows = emu::trace::g_result;
    std::copy_n(rows.begin(), std::min(capacity, rows.size()), out);
    return rows.size();
}
