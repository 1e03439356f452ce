// racecheck.cpp: the emulator's race checking (MINITORCH_CUDA_RACECHECK=1; the grader's runs always).
//
// A kernel built for race checking (compiler.py's racecheck flavour) is compiled by g++ with
// ThreadSanitizer's instrumentation but without its runtime: g++ calls __tsan_read4(address),
// __tsan_write8(address), __tsan_volatile_read4(address), __tsan_atomic32_fetch_add(...) and so on
// before every memory access, and they are defined here (the atomic ones perform the operation: they
// replace it). The blocks of a launch run on all the workers at once, as without race checking:
// - shared memory is each worker's own (static __shared__ is thread_local, dynamic shared the
//   worker's), and a block's record (State) is its worker's, so only the shadow cells of global
//   memory, the serials and the releases are met by several workers: a global cell is read and
//   updated under its stripe's sequence number (a seqlock), a leaf of the shadow or a chunk of
//   serials is made under a mutex and published through an atomic pointer, and the releases
//   (atomics, volatile stores) live under one mutex, held across an atomic's check and operation;
// - a race within a block, and one between blocks ordered by the runtime (a co-resident launch's
//   blocks take turns between grid barriers), is found the same way every run, and when several
//   blocks fail the runtime keeps the error of the lowest block (runtime.cpp's fail): a kernel whose
//   every block has the same race reports the same one each run;
// - a race between blocks that run at once is found by whichever block comes second, so either
//   block may report it (the report names both, their lines and the address); with one worker
//   (MINITORCH_CUDA_EMULATE_THREADS=1) the blocks run in order and every run reports the same race.
//
// What it records: per 4 bytes of memory (a shadow cell), the last write and one read, each with the
// thread, the block's epoch, the barrier interval, the lane's warp clock and the code address.
// Two accesses to the same bytes, at least one a write, both not atomic, are a race unless ordered:
// - in one block: by a __syncthreads between them (the block's interval counter), or, for two lanes
//   of one warp, by a warp operation both took part in after the first (__syncwarp, a shuffle, a
//   vote: each lane's vector clock over the lanes of its warp);
// - between blocks (global memory): by a grid barrier (a new phase), the kernel's end (a new launch),
//   or a release the reading block observed: block A's accesses before a __threadfence() of A are
//   published by A's next atomic or volatile store to an address X, and a block that then reads X
//   with an atomic or a volatile load (an atomicAdd that finds the count complete) has them. A fence
//   gives the block a new epoch ("serial"), so "before the fence" is "an older serial of A". An
//   atomic alone publishes nothing stored before it (relaxed, as on a GPU): a block that observed A's
//   atomic and then reads a store A made without a fence before that atomic gets a "missing
//   __threadfence()" error naming the store and the atomic.
// One fence publishes what its whole block did before it (the emulator does not follow which
// thread's stores a fence covers), and only the first concurrent reader of an address is kept: both
// can hide a race, never invent one; so can a volatile load's acquiring again at the block's next
// access (a release made between the load's call here and the load itself counts as seen). Shared
// memory forgets its history when a block starts (the runtime's poisoning), so blocks that a worker
// runs in turn never meet there.
#include "racecheck.h"

#include "trace.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace emu {
namespace racecheck {
namespace {

struct Record {         // one access
    uint32_t serial;    // the block's epoch when it was made; 0: none
    uint32_t pc;        // the low 32 bits of the code address that made it
    uint32_t interval;  // the block's barriers before it
    uint16_t bits;      // thread (kThread), kAtomic, kVolatile, and which of the cell's 4 bytes (<< kBytes)
    uint16_t clock;     // its lane's warp clock
};
struct Cell {
    Record write, read;
};
constexpr uint16_t kThread = 0x3ff, kAtomic = 1 << 10, kVolatile = 1 << 11;
constexpr int kBytes = 12;
enum Kind { READ = 0, WRITE = 1, ATOMIC = 2, VOLATILE = 4, RMW = 8 };

// --- the shadow: a cell per 4 bytes of the address space, in leaves made on first use --------------

constexpr int kLeafBits = 14, kMidBits = 15, kTopBits = 16;  // 2 + 14 + 15 + 16 = 47 bits of address
constexpr size_t kLeafBytes = sizeof(Cell) << kLeafBits;
using Mid = std::atomic<Cell*>;  // a mid level: 1 << kMidBits leaves
std::atomic<Mid*> g_top[size_t(1) << kTopBits];
std::mutex g_shadow_lock;  // held while a mid level or a leaf is made

[[noreturn]] void out_of_memory() {
    fail_in_kernel("race checking ran out of memory for its records (it keeps 32 bytes per 4 bytes the kernel "
                   "touches): check a smaller launch, or run without MINITORCH_CUDA_RACECHECK");
}

Cell* leaf_of(uintptr_t granule, bool make) {
    std::atomic<Mid*>& top = g_top[(granule >> (kLeafBits + kMidBits)) & ((size_t(1) << kTopBits) - 1)];
    Mid* mid = top.load(std::memory_order_acquire);
    if (!mid) {
        if (!make) return nullptr;
        std::unique_lock<std::mutex> lock(g_shadow_lock);
        if (!(mid = top.load(std::memory_order_relaxed))) {
            mid = static_cast<Mid*>(calloc(size_t(1) << kMidBits, sizeof(Mid)));  // null pointers
            if (!mid) {
                lock.unlock();
                out_of_memory();
            }
            top.store(mid, std::memory_order_release);
        }
    }
    Mid& slot = mid[(granule >> kLeafBits) & ((size_t(1) << kMidBits) - 1)];
    Cell* leaf = slot.load(std::memory_order_acquire);
    if (!leaf && make) {
        std::unique_lock<std::mutex> lock(g_shadow_lock);
        if (!(leaf = slot.load(std::memory_order_relaxed))) {
            void* m = mmap(nullptr, kLeafBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) {
                lock.unlock();
                out_of_memory();
            }
            leaf = static_cast<Cell*>(m);
            slot.store(leaf, std::memory_order_release);
        }
    }
    return leaf;
}

// A cell of global memory, which several workers meet, is guarded by its stripe's sequence number
// (a seqlock): a checker copies the cell between two reads of an even number, and to change it moves
// the number from that even value to odd, writes, and moves it on to even. Most accesses only read
// their cell, and so write nothing shared. The cells of shared memory are their worker's own, and in a
// launch whose blocks run one at a time (g_alone) every cell is the running block's: no seqlock there.
constexpr int kStripeBits = 12;
std::atomic<uint32_t> g_stripes[1 << kStripeBits];

inline std::atomic<uint32_t>& stripe_of(uintptr_t granule) {
    return g_stripes[(granule ^ (granule >> kStripeBits) ^ (granule >> 2 * kStripeBits)) & ((1 << kStripeBits) - 1)];
}

void forget(uintptr_t address, size_t bytes) {  // the cells of [address, address + bytes) hold nothing
    for (uintptr_t g = address >> 2, end = (address + bytes + 3) >> 2; g < end;) {
        const uintptr_t leaf_end = std::min(end, (g | ((uintptr_t(1) << kLeafBits) - 1)) + 1);
        if (Cell* leaf = leaf_of(g, false)) {
            const uintptr_t mask = (uintptr_t(1) << kLeafBits) - 1;
            memset(leaf + (g & mask), 0, (leaf_end - g) * sizeof(Cell));  // the worker's own shared memory
        }
        g = leaf_end;
    }
}

std::atomic<unsigned> g_shadow_generation{0};  // moves when the leaves are given back: the workers' Recent go

void forget_everything() {  // between launches: no worker runs
    for (std::atomic<Mid*>& top : g_top) {
        Mid* mid = top.load(std::memory_order_relaxed);
        if (!mid) continue;
        for (size_t i = 0; i < (size_t(1) << kMidBits); ++i)
            if (Cell* leaf = mid[i].load(std::memory_order_relaxed)) munmap(leaf, kLeafBytes);
        free(mid);
        top.store(nullptr, std::memory_order_relaxed);
    }
    g_shadow_generation++;
}

struct Recent {  // the leaves used last, by the low bits of their number: most accesses hit one
    uintptr_t number = ~uintptr_t(0);
    Cell* leaf = nullptr;
};

// --- epochs: each block of a launch has one per phase and fence ("serial") -----------------------

std::atomic<uint32_t> g_next{1};  // the next serial
uint32_t g_launch_start = 1;      // serials before it belong to earlier launches (ordered by their end)
std::atomic<uint32_t> g_phase_start{1};  // and before it, to before the last grid barrier of this launch
dim3 g_grid, g_block_dim;
bool g_active = false;  // a launch with race checking is running
bool g_alone = false;   // and its blocks run one at a time (one worker, or co-resident blocks taking turns)

// The block (linear in the grid) of each serial since g_launch_start, in chunks that never move: a
// worker writes its new serial's entry while others read theirs.
constexpr int kChunkBits = 16;
std::atomic<uint32_t*> g_block_of[size_t(1) << (32 - kChunkBits)];
std::mutex g_chunk_lock;  // held while a chunk is made

inline uint32_t block_of(uint32_t serial) {
    const uint32_t i = serial - g_launch_start;
    return g_block_of[i >> kChunkBits].load(std::memory_order_acquire)[i & ((1u << kChunkBits) - 1)];
}

struct Release {  // an atomic or volatile store of `block` that published its accesses before `serial`
    uint32_t block, serial, pc;
};
// By address, this launch: read and written under g_release_lock, which an atomic holds from its check
// through its operation, so a block that observes another's atomic has its release too.
std::unordered_map<uintptr_t, std::vector<Release>> g_releases;
std::mutex g_release_lock;
std::atomic<bool> g_released{false};  // g_releases holds one

struct State {  // of the block a worker runs (reused for the worker's next block)
    uint32_t serial, block, interval;
    uintptr_t dynamic_shared;
    size_t shared_bytes;
    int ranges;  // of the worker's own memory: dynamic shared memory and the static __shared__ variables
    uintptr_t own_from[4], own_bytes[4];
    std::vector<Release> acquired;  // per block it observed: the newest release
    bool fenced;                    // since it started or passed a grid barrier
    bool holds_release_lock;        // in an atomic's check and operation, or a volatile access's check
    int busy;                       // in code here that a stop must not abandon (busy())
    uintptr_t observed;             // a volatile load's address, acquired again once the load is done; 0: none
    unsigned dirty;                 // warps whose clocks moved since the last barrier
    unsigned generation;            // of the shadow its Recent leaves belong to
    Recent recent[8];
    uint16_t clocks[32][32][32];    // [warp][lane][other lane]: what the lane knows of the other's clock
};

uint32_t fresh(State& s) {
    const uint32_t serial = g_next.fetch_add(1, std::memory_order_relaxed), i = serial - g_launch_start;
    std::atomic<uint32_t*>& chunk = g_block_of[i >> kChunkBits];
    uint32_t* entries = chunk.load(std::memory_order_acquire);
    if (!entries) {
        std::unique_lock<std::mutex> lock(g_chunk_lock);
        if (!(entries = chunk.load(std::memory_order_relaxed))) {
            entries = static_cast<uint32_t*>(malloc(sizeof(uint32_t) << kChunkBits));
            if (!entries) {
                lock.unlock();
                out_of_memory();
            }
            chunk.store(entries, std::memory_order_release);
        }
    }
    entries[i & ((1u << kChunkBits) - 1)] = s.block;  // read by another worker only after a cell's lock
    return serial;
}

inline Cell& cell(State& s, uintptr_t address) {
    const uintptr_t granule = address >> 2, number = granule >> kLeafBits;
    Recent& recent = s.recent[number & 7];
    if (recent.number != number) recent = {number, leaf_of(granule, true)};
    return recent.leaf[granule & ((size_t(1) << kLeafBits) - 1)];
}

void reset_clocks(State& s, unsigned warps) {
    for (; warps; warps &= warps - 1) {
        auto& vc = s.clocks[__builtin_ctz(warps)];
        memset(vc, 0, sizeof vc);
        for (int lane = 0; lane < 32; ++lane) vc[lane][lane] = 1;
    }
}

// --- checking one access ---------------------------------------------------------------------------

struct Me {  // the access being made
    State* s;
    Record r;
    unsigned thread, lane, warp;
};

enum Order { ORDERED, RACE, UNPUBLISHED };

// How `r` (made earlier) stands to the access `me`; `published` is set for UNPUBLISHED.
Order order(const Record& r, const Me& me, const Release** published) {
    if (r.serial < g_phase_start.load(std::memory_order_relaxed))
        return ORDERED;  // none, an earlier launch, or before a grid barrier
    const State& s = *me.s;
    const uint32_t block = block_of(r.serial);
    const unsigned thread = r.bits & kThread;
    if (block == s.block) {
        if (thread == me.thread || r.interval != s.interval) return ORDERED;
        if (thread >> 5 == me.warp && s.clocks[me.warp][me.lane][thread & 31] >= r.clock) return ORDERED;
        return RACE;
    }
    for (const Release& a : s.acquired) {
        if (a.block != block) continue;
        if (r.serial < a.serial || (r.serial == a.serial && (r.bits & kAtomic))) return ORDERED;
        *published = &a;
        return UNPUBLISHED;
    }
    return RACE;
}

std::string thread_name(unsigned linear) {
    const dim3 d = g_block_dim;
    char buf[64];
    snprintf(buf, sizeof buf, "(%u, %u, %u)", linear % d.x, linear / d.x % d.y, linear / (d.x * d.y));
    return buf;
}

std::string block_name(uint32_t linear) {
    const dim3 g = g_grid;
    char buf[64];
    snprintf(buf, sizeof buf, "(%u, %u, %u)", linear % g.x, linear / g.x % g.y, linear / (g.x * g.y));
    return buf;
}

// "{pc PATH+0xOFFSET}": driver.py replaces it with the source line (the call's own address: pc - 1).
std::string code_at(uintptr_t pc) {
    Dl_info code{};
    char buf[600];
    if (!dladdr(reinterpret_cast<void*>(pc - 1), &code) || !code.dli_fname) return "an unknown line";
    snprintf(buf, sizeof buf, "{pc %s+0x%lx}", code.dli_fname, pc - 1 - reinterpret_cast<uintptr_t>(code.dli_fbase));
    return buf;
}

std::string memory_name(uintptr_t address, const State& s) {
    std::string name = describe_device_address(address);
    if (!name.empty()) return name;
    char buf[128];
    if (address - s.dynamic_shared < s.shared_bytes) {
        snprintf(buf, sizeof buf, "dynamic shared memory, byte %lu", address - s.dynamic_shared);
        return buf;
    }
    for (int i = 1; i < s.ranges; ++i)  // by its offset: where the worker keeps it varies
        if (address - s.own_from[i] < s.own_bytes[i]) {
            snprintf(buf, sizeof buf, "shared memory, byte %lu of a %lu-byte __shared__ variable",
                     address - s.own_from[i], s.own_bytes[i]);
            return buf;
        }
    snprintf(buf, sizeof buf, "shared memory at 0x%lx (a __shared__ variable)", address);
    return buf;
}

const char* verb(uint16_t bits, bool write, bool present) {
    if (bits & kAtomic) return present ? "updates it atomically" : "updated it atomically";
    if (write) return present ? "writes it" : "wrote it";
    return present ? "reads it" : "read it";
}

[[noreturn]] void report(Order what, const Record& r, bool r_write, const Me& me, bool me_write, uintptr_t address,
                         uintptr_t pc, const Release* published) {
    const State& s = *me.s;
    const uintptr_t r_pc = (pc & ~uintptr_t(0xffffffff)) | r.pc;
    const unsigned thread = r.bits & kThread;
    const uint32_t block = block_of(r.serial);
    const std::string memory = memory_name(address, s);
    std::string m;
    if (what == UNPUBLISHED) {
        const uintptr_t at = (pc & ~uintptr_t(0xffffffff)) | published->pc;
        m = "missing __threadfence() (racecheck): this block " + std::string(me_write ? "writes " : "reads ") + memory +
            " at " + code_at(pc) + ", which block " + block_name(block) + " wrote at " + code_at(r_pc) +
            " with no __threadfence() between that store and the atomic or volatile store at " + code_at(at) +
            " that published it to this block: an atomic is relaxed and publishes nothing stored before it, so on "
            "a GPU this block may " + (me_write ? "have its store overwritten by the old one" : "read the old value");
    } else if (block == s.block) {
        const bool warp = thread >> 5 == me.warp;
        m = "data race (racecheck) on " + memory + ": this thread " + verb(me.r.bits, me_write, true) + " at " +
            code_at(pc) + ", and thread " + thread_name(thread) + " of the same block " + verb(r.bits, r_write, false) +
            " at " + code_at(r_pc) + " with no __syncthreads() between the two" +
            (warp ? " (nor a __syncwarp() or other warp operation of both lanes: since Volta the lanes of a warp "
                    "are not in step)"
                  : "") +
            "; the emulator's one order of threads may still give the right answer, a GPU's order may not";
    } else {
        m = "data race (racecheck) on " + memory + ": this thread " + verb(me.r.bits, me_write, true) + " at " +
            code_at(pc) + ", and thread " + thread_name(thread) + " of block " + block_name(block) + " " +
            verb(r.bits, r_write, false) + " at " + code_at(r_pc) +
            " in the same launch, with nothing ordering the two blocks (blocks are ordered only by a grid barrier, "
            "the kernel's end, or a __threadfence() followed by an atomic or volatile store that the other block "
            "observes)";
    }
    fail_in_kernel(m);
}

inline bool mine(uintptr_t a, Thread* t) {  // its own stack and state, and its block's built-in variables
    return a - reinterpret_cast<uintptr_t>(t) < kStackBytes || a - reinterpret_cast<uintptr_t>(t->block) < sizeof(Block);
}

Me running(State& s, unsigned thread, Record r) {
    Me me;
    me.s = &s;
    me.r = r;
    me.thread = thread;
    me.lane = thread & 31;
    me.warp = thread >> 5;
    return me;
}

// How `r`, not plainly ordered before the access `mine`, stands to it.
__attribute__((noinline)) Order look_closer(const Record& r, State& s, unsigned thread, Record mine,
                                            const Release** published) {
    return order(r, running(s, thread, mine), published);
}

void let_go(State& s) {  // of the release lock
    if (s.holds_release_lock) {
        s.holds_release_lock = false;
        g_release_lock.unlock();
    }
}

inline bool own(const State& s, uintptr_t a) {  // memory of the worker's alone: its block's shared memory
    for (int i = 0; i < s.ranges; ++i)
        if (a - s.own_from[i] < s.own_bytes[i]) return true;
    return false;
}

// One access to one cell, being checked.
struct Checked {
    State* s;
    Record mine;
    unsigned thread, bytes;
    uint32_t phase_start;
    bool write, atomic;
    // found, when the access races: how, with which record, and the release it lacks
    Order order;
    bool raced_write;
    const Release* published;
};

// `r` is plainly ordered before the access: nothing there, an earlier launch or phase, or this
// block's epoch with a barrier between or the same thread (else order() looks closer).
inline bool plainly_ordered(const Record& r, const Checked& x) {
    return r.serial < x.phase_start ||
           (r.serial == x.mine.serial && (r.interval != x.mine.interval || (r.bits & kThread) == x.thread));
}

inline bool may_conflict(const Record& r, const Checked& x) {
    return !plainly_ordered(r, x) && ((r.bits >> kBytes) & x.bytes) && !((r.bits & kAtomic) && x.atomic);
}

enum Step { KEEP, SET_READ, SET_WRITE, REPORT };

// What the access does to a cell that holds `c`.
__attribute__((always_inline)) inline Step step(const Cell& c, Checked& x) {
    if (may_conflict(c.write, x) && (x.order = look_closer(c.write, *x.s, x.thread, x.mine, &x.published)) != ORDERED) {
        x.raced_write = true;
        return REPORT;
    }
    if (x.write) {
        if (may_conflict(c.read, x) && (x.order = look_closer(c.read, *x.s, x.thread, x.mine, &x.published)) != ORDERED) {
            x.raced_write = false;
            return REPORT;
        }
        return SET_WRITE;
    }
    if (plainly_ordered(c.read, x)) return SET_READ;
    if (c.read.serial != x.mine.serial && (!x.s->acquired.empty() || block_of(c.read.serial) == x.s->block) &&
        look_closer(c.read, *x.s, x.thread, x.mine, &x.published) == ORDERED)  // another block's read: ordered only if acquired
        return SET_READ;
    return KEEP;  // the first concurrent reader stays: a later write races with it
}

void check(Thread* t, State& s, uintptr_t a, size_t size, int kind, uintptr_t pc) {
    Checked x;
    x.s = &s;
    x.thread = unsigned(t->linear);
    x.write = kind & WRITE;
    x.atomic = kind & ATOMIC;
    x.phase_start = g_phase_start.load(std::memory_order_relaxed);
    const bool shared = own(s, a);
    const uint16_t flags = uint16_t(x.thread | (x.atomic ? kAtomic : 0) | (kind & VOLATILE ? kVolatile : 0));
    x.mine = {s.serial, uint32_t(pc), s.interval, flags, s.clocks[x.thread >> 5][x.thread & 31][x.thread & 31]};
    for (uintptr_t g = a & ~uintptr_t(3); g < a + size; g += 4) {
        x.bytes = 0xf;  // of the cell's 4: all, unless the access starts or ends inside it
        if ((a | size) & 3) {
            const unsigned lo = unsigned(std::max(a, g) - g), hi = unsigned(std::min(a + size, g + 4) - g);
            x.bytes = ((1u << hi) - 1) & ~((1u << lo) - 1);
        }
        x.mine.bits = uint16_t(flags | x.bytes << kBytes);
        Cell& c = cell(s, g);
        Cell seen;
        Step done;
        if (shared || g_alone) {  // no other worker meets the cell now
            if ((done = step(c, x)) == SET_WRITE) c.write = x.mine;
            if (done == SET_READ) c.read = x.mine;
            if (done == REPORT) seen = c;
        } else {
            std::atomic<uint32_t>& stripe = stripe_of(g >> 2);
            for (;;) {
                const uint32_t number = stripe.load(std::memory_order_acquire);
                if (number & 1) {
                    __builtin_ia32_pause();
                    continue;
                }
                seen = c;  // perhaps torn by a writer: then the number has moved, and it is copied again
                std::atomic_thread_fence(std::memory_order_acquire);
                if (stripe.load(std::memory_order_relaxed) != number) continue;
                if ((done = step(seen, x)) == KEEP || done == REPORT) break;
                uint32_t expected = number;
                if (!stripe.compare_exchange_strong(expected, number + 1, std::memory_order_acquire)) continue;
                (done == SET_WRITE ? c.write : c.read) = x.mine;
                stripe.store(number + 2, std::memory_order_release);
                break;
            }
        }
        if (done == REPORT) {
            report(x.order, x.raced_write ? seen.write : seen.read, x.raced_write, running(s, x.thread, x.mine), x.write,
                   std::max(a, g), pc, x.published);
        }
    }
}

void acquire(State& s, uintptr_t address) {  // an atomic or volatile load of `address`; under g_release_lock
    auto found = g_releases.find(address);
    if (found == g_releases.end()) return;
    for (const Release& r : found->second) {
        if (r.block == s.block) continue;
        auto a = std::find_if(s.acquired.begin(), s.acquired.end(), [&](const Release& x) { return x.block == r.block; });
        if (a == s.acquired.end())
            s.acquired.push_back(r);
        else if (r.serial > a->serial)
            *a = r;
    }
}

void release(State& s, uintptr_t address, uint32_t pc) {  // an atomic or volatile store to `address`; under g_release_lock
    std::vector<Release>& set = g_releases[address];
    g_released.store(true, std::memory_order_relaxed);
    for (Release& r : set)
        if (r.block == s.block) {
            r = {s.block, s.serial, pc};
            return;
        }
    set.push_back({s.block, s.serial, pc});
}

}  // namespace

// One access of the running thread: `kind` of Kind; RMW for an atomic read-modify-write. An atomic
// comes with g_release_lock held (atomically(), below), held on through its operation.
__attribute__((always_inline)) inline void check_access(Thread* t, State& s, uintptr_t a, size_t size, int kind,
                                                       uintptr_t pc) {
    if (s.observed) {  // a volatile load before this access is done: what it saw was released by now
        if (!s.holds_release_lock) g_release_lock.lock();
        acquire(s, s.observed);
        if (!s.holds_release_lock) g_release_lock.unlock();
        s.observed = 0;
    }
    if (!(kind & (ATOMIC | VOLATILE))) return check(t, s, a, size, kind, pc);
    const bool loads = !(kind & WRITE) || (kind & RMW), released = g_released.load(std::memory_order_relaxed);
    const bool releases = (kind & WRITE) && ((kind & ATOMIC) || s.fenced);
    if (!(kind & ATOMIC)) {  // volatile: the kernel's own load or store follows this call
        if (loads) s.observed = a;  // acquired again at the next access: a release may come before the load
        if (!releases && !(loads && released)) return check(t, s, a, size, kind, pc);
        g_release_lock.lock();
        s.holds_release_lock = true;
    }
    if (loads && released) acquire(s, a);
    check(t, s, a, size, kind, pc);
    if (releases) release(s, a, uint32_t(pc));  // a volatile store's before the store: whoever sees it has this
    if (!(kind & ATOMIC)) let_go(s);
}

// Code here runs as `busy`: a stop (runtime.cpp's on_stop) waits until it is done, so that no lock
// or odd stripe is left behind (a fault or a report abandons the block through block_abandoned).
inline void enter(State& s) {
    s.busy++;
    std::atomic_signal_fence(std::memory_order_seq_cst);
}

inline void leave(State& s) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    s.busy--;
}

__attribute__((always_inline)) inline void access(uintptr_t a, size_t size, int kind, uintptr_t pc) {
    Thread* t = self();
    if (mine(a, t)) return;
    State& s = *static_cast<State*>(t->block->racecheck);
    enter(s);
    check_access(t, s, a, size, kind, pc);
    leave(s);
}

// An atomic: recorded, then performed (sequentially consistent, whatever order g++ passes), with
// g_release_lock held throughout.
template <class Operation>
auto atomically(const volatile void* a, size_t size, int kind, uintptr_t pc, Operation operation) {
    if (!g_active) {
        if (trace::g_on) trace::access(reinterpret_cast<uintptr_t>(a), size, kind, pc);
        return operation();
    }
    State& s = *static_cast<State*>(self()->block->racecheck);
    enter(s);
    g_release_lock.lock();
    s.holds_release_lock = true;
    access(reinterpret_cast<uintptr_t>(a), size, kind, pc);
    const auto result = operation();  // a fault here abandons the block with the lock held: block_abandoned
    let_go(s);
    leave(s);
    return result;
}

void fence() {  // __threadfence(): what the block did so far is published by its next release
    State& s = *static_cast<State*>(self()->block->racecheck);
    enter(s);
    s.serial = fresh(s);
    s.fenced = true;
    leave(s);
}

// --- what the runtime calls --------------------------------------------------------------------------

void launch_begin(dim3 grid, dim3 block, bool alone) {  // on the host thread, no worker running
    if (g_next > 0xf0000000u) {  // the serials are running out: forget everything, start again
        forget_everything();
        g_next = 1;
    }
    g_launch_start = g_next;
    g_phase_start = g_launch_start;
    g_releases.clear();
    g_released = false;
    g_grid = grid;
    g_block_dim = block;
    g_alone = alone;
    g_active = true;
}

void launch_end() { g_active = false; }

void block_begin(Block& b, long long, unsigned char* dynamic_shared, size_t shared_bytes) {
    State* s = static_cast<State*>(b.racecheck);
    if (!s) {
        s = new State;
        s->dirty = ~0u;
        s->generation = g_shadow_generation - 1;
        b.racecheck = s;
    }
    if (s->generation != g_shadow_generation) {  // the leaves it remembers were given back
        s->generation = g_shadow_generation;
        for (Recent& recent : s->recent) recent = Recent();
    }
    s->block = b.block_idx.x + g_grid.x * (b.block_idx.y + g_grid.y * b.block_idx.z);
    s->serial = fresh(*s);
    s->interval = 0;
    s->acquired.clear();
    s->fenced = false;
    s->holds_release_lock = false;
    s->busy = 0;
    s->observed = 0;
    reset_clocks(*s, s->dirty);
    s->dirty = 0;
    s->dynamic_shared = reinterpret_cast<uintptr_t>(dynamic_shared);
    s->shared_bytes = shared_bytes;
    s->ranges = 1;  // and its static __shared__ variables, as they are declared
    s->own_from[0] = s->dynamic_shared;
    s->own_bytes[0] = shared_bytes;
    forget(s->dynamic_shared, shared_bytes);  // poisoned: what earlier blocks did there is gone
}

void block_abandoned(Block& b) {
    if (State* s = static_cast<State*>(b.racecheck)) {
        let_go(*s);
        s->busy = 0;
    }
}

bool busy(Block& b) { return static_cast<State*>(b.racecheck)->busy != 0; }

void barrier(Block& b) {
    State& s = *static_cast<State*>(b.racecheck);
    s.interval++;
    reset_clocks(s, s.dirty);
    s.dirty = 0;
}

void warp_sync(Block& b, int warp, unsigned lanes) {
    State& s = *static_cast<State*>(b.racecheck);
    auto& vc = s.clocks[warp];
    uint16_t joined[32] = {};
    for (unsigned p = lanes; p; p &= p - 1)
        for (int other = 0; other < 32; ++other) joined[other] = std::max(joined[other], vc[__builtin_ctz(p)][other]);
    bool full = false;
    for (unsigned p = lanes; p; p &= p - 1) {
        const int lane = __builtin_ctz(p);
        memcpy(vc[lane], joined, sizeof joined);
        full |= ++vc[lane][lane] == 0xffff;
    }
    s.dirty |= 1u << warp;
    if (full) barrier(b);  // a clock would wrap: start afresh, as at a barrier (this can hide a race, not invent one)
}

void shared_declared(uintptr_t address, size_t bytes) {  // a static __shared__ variable: thread_local, the worker's
    State& s = *static_cast<State*>(self()->block->racecheck);
    forget(address, bytes);
    if (s.ranges < 4) {  // more are checked as global memory is: slower, as right
        s.own_from[s.ranges] = address;
        s.own_bytes[s.ranges++] = bytes;
    }
}

void grid_opened() { g_phase_start = g_next.load(); }  // every block waits at the barrier

void grid_passed(Block& b) {
    State& s = *static_cast<State*>(b.racecheck);
    barrier(b);
    s.serial = fresh(s);
    s.acquired.clear();  // what it observed before is ordered by the barrier now
    s.fenced = false;
}

}  // namespace racecheck
}  // namespace emu

// --- ThreadSanitizer's entry points, as g++ calls them ----------------------------------------------
// Each passes its return address: the kernel's code right after the access's call.

using namespace emu::racecheck;
using emu::racecheck::Kind;

// A kernel built for tracing makes the same calls: in a traced launch they go to trace.cpp.
#define EMU_ACCESS(address, size, kind)                                                                     \
    if (g_active)                                                                                           \
        access(reinterpret_cast<uintptr_t>(address), size, kind, reinterpret_cast<uintptr_t>(__builtin_return_address(0))); \
    else if (emu::trace::g_on)                                                                              \
        emu::trace::access(reinterpret_cast<uintptr_t>(address), size, kind, reinterpret_cast<uintptr_t>(__builtin_return_address(0)))

extern "C" {
// kernel_memory.cpp's memcpy, memmove and memset: their bytes, at the kernel's call
void __emu_access_range(const void* address, size_t bytes, int write, const void* pc) {
    if (g_active && bytes)
        access(reinterpret_cast<uintptr_t>(address), bytes, write ? WRITE : READ, reinterpret_cast<uintptr_t>(pc));
}
// and a call they refuse (printf's %n): "WHAT at LINE: WHY"
[[noreturn]] void __emu_refuse(const char* what, const void* pc, const char* why) {
    emu::fail_in_kernel(std::string(what) + " at " + code_at(reinterpret_cast<uintptr_t>(pc)) + ": " + why);
}
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_read_range(void* p, unsigned long size) { EMU_ACCESS(p, size, READ); }
void __tsan_write_range(void* p, unsigned long size) { EMU_ACCESS(p, size, WRITE); }

#define EMU_PLAIN(N)                                                                                      \
    void __tsan_read##N(void* p) { EMU_ACCESS(p, N, READ); }                                              \
    void __tsan_write##N(void* p) { EMU_ACCESS(p, N, WRITE); }                                            \
    void __tsan_unaligned_read##N(void* p) { EMU_ACCESS(p, N, READ); }                                    \
    void __tsan_unaligned_write##N(void* p) { EMU_ACCESS(p, N, WRITE); }                                  \
    void __tsan_volatile_read##N(void* p) { EMU_ACCESS(p, N, READ | VOLATILE); }                          \
    void __tsan_volatile_write##N(void* p) { EMU_ACCESS(p, N, WRITE | VOLATILE); }                        \
    void __tsan_unaligned_volatile_read##N(void* p) { EMU_ACCESS(p, N, READ | VOLATILE); }                \
    void __tsan_unaligned_volatile_write##N(void* p) { EMU_ACCESS(p, N, WRITE | VOLATILE); }
EMU_PLAIN(1)
EMU_PLAIN(2)
EMU_PLAIN(4)
EMU_PLAIN(8)
EMU_PLAIN(16)

// The atomics: atomically() records each, then performs it (sequentially consistent, whatever order
// g++ passes).
#define EMU_ATOMIC(a, kind, operation) \
    atomically(a, sizeof(*(a)), kind, reinterpret_cast<uintptr_t>(__builtin_return_address(0)), [&] { return operation; })
#define EMU_ATOMICS(N, T)                                                                                        \
    T __tsan_atomic##N##_load(const volatile T* a, int) {                                                        \
        return EMU_ATOMIC(a, READ | ATOMIC, __atomic_load_n(a, __ATOMIC_SEQ_CST));                               \
    }                                                                                                            \
    void __tsan_atomic##N##_store(volatile T* a, T v, int) {                                                     \
        EMU_ATOMIC(a, WRITE | ATOMIC, (__atomic_store_n(a, v, __ATOMIC_SEQ_CST), 0));                            \
    }                                                                                                            \
    T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                                     \
        return EMU_ATOMIC(a, WRITE | ATOMIC | RMW, __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST));                 \
    }                                                                                                            \
    EMU_RMW(N, T, fetch_add) EMU_RMW(N, T, fetch_sub) EMU_RMW(N, T, fetch_and) EMU_RMW(N, T, fetch_or)           \
    EMU_RMW(N, T, fetch_xor) EMU_RMW(N, T, fetch_nand)                                                           \
    int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* expected, T v, int, int) {                  \
        return EMU_ATOMIC(a, WRITE | ATOMIC | RMW,                                                               \
                          __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)); \
    }                                                                                                            \
    int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* expected, T v, int, int) {                    \
        return EMU_ATOMIC(a, WRITE | ATOMIC | RMW,                                                               \
                          __atomic_compare_exchange_n(a, expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)); \
    }                                                                                                            \
    T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T expected, T v, int, int) {                        \
        EMU_ATOMIC(a, WRITE | ATOMIC | RMW,                                                                      \
                   __atomic_compare_exchange_n(a, &expected, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));     \
        return expected;                                                                                         \
    }
#define EMU_RMW(N, T, OP)                                                                                        \
    T __tsan_atomic##N##_##OP(volatile T* a, T v, int) {                                                         \
        return EMU_ATOMIC(a, WRITE | ATOMIC | RMW, __atomic_##OP(a, v, __ATOMIC_SEQ_CST));                       \
    }
EMU_ATOMICS(8, uint8_t)
EMU_ATOMICS(16, uint16_t)
EMU_ATOMICS(32, uint32_t)
EMU_ATOMICS(64, uint64_t)

// __threadfence() (and _system) is a sequentially consistent fence; __threadfence_block() is a signal
// fence (cuda_emu.h): the threads of a block share one OS thread, and it publishes nothing to other blocks.
void __tsan_atomic_thread_fence(int order) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (g_active && order == __ATOMIC_SEQ_CST) fence();
}
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// cuda_emu.h's poison_shared: a block's static __shared__ variables start with no history (and a
// traced launch learns where they lie).
void __emu_shared_declared(const void* address, size_t bytes) {
    if (g_active) shared_declared(reinterpret_cast<uintptr_t>(address), bytes);
    if (emu::trace::g_on) emu::trace::shared_variable(reinterpret_cast<uintptr_t>(address), bytes);
}
}
