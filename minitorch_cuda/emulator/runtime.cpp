// runtime.cpp: the CPU emulator's device: memory, blocks, fibers, barriers, warps, faults.
//
// A launch hands its blocks to a pool of OS threads (one per core). A worker runs
// one block at a time: each GPU thread of the block is a fiber with its own stack,
// started in thread order and run until it waits (at __syncthreads or a warp
// operation) or exits; then the next runs. A barrier opens when every thread of the
// block waits at it, a warp operation completes when every lane its mask names (and
// that has not exited) has arrived. Because a thread runs on until it must wait,
// a missing barrier shows up the same way every run, never by chance.
//
// Errors a GPU reports are raised here with the kernel, block and thread named:
// out-of-bounds accesses (guard pages around every allocation, and the array-bounds
// checks g++ inserts with -fsanitize=bounds), misaligned accesses (-fsanitize=alignment),
// barrier divergence, warp operations whose mask leaves out a lane that executes them
// or that can never complete; with race checking (racecheck.cpp, told here of every barrier,
// warp operation and grid barrier), data races and missing fences. The failing block is
// abandoned (siglongjmp back to its worker); no other block starts.
//
// A launch of at most as many blocks as the device has multiprocessors (the driver
// says how many) is co-resident: every block is started at once on a worker of its
// own, as on a GPU with nothing else running, so a grid barrier (grid_barrier.cuh) can
// work. Blocks are bound to OS threads, not gathered as fibers under one scheduler,
// because a block's state lives with its worker: static __shared__ arrays are
// thread_local, and its stacks and dynamic shared memory are the worker's. Both kinds
// of shared memory are poisoned (kSharedPoison) at the start of every block, so a slot
// read before it is written gives the same wrong answer every run. The blocks
// take turns in block order, each running until it waits at a grid barrier or exits,
// as the threads of a block do between barriers: so a missing grid barrier, too, shows
// up the same way every run (block 0 runs ahead through every phase), never by chance.
//
// A launch of a kernel with __cluster_dims__ runs cluster by cluster, each cluster as such a
// co-resident launch of its own blocks: cluster.sync() is its grid barrier, after which the block
// that arrived last runs on first, and map_shared_rank finds a variable of another block's shared
// memory on that block's worker (an error before that block has called this_cluster() or after it
// has exited).
#include "cuda_emu.h"
#include "racecheck.h"
#include "trace.h"

#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if !defined(__x86_64__)
#error "the emulator's fiber switch is written for x86-64"
#endif

namespace emu {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxPendingCopies = 128;  // a thread's asynchronous copies not yet waited for (mma_async.cu
                                        // copying a float at a time keeps 96 in flight)
constexpr size_t kMaxDynamicShared = 227 << 10;  // what an H100/H200 block may opt into
const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// --- device memory: each allocation ends 16 bytes or less before a guard page ----------

struct Allocation {
    uintptr_t map, map_bytes, data, bytes;
};

std::mutex g_alloc_lock;
std::map<uintptr_t, Allocation> g_allocations;  // by data address

const Allocation* allocation_near(uintptr_t address) {  // the one whose mapping holds address
    auto it = g_allocations.upper_bound(address);
    if (it != g_allocations.begin()) {
        const Allocation& a = std::prev(it)->second;
        if (address >= a.map && address < a.map + a.map_bytes) return &a;
    }
    if (it != g_allocations.end() && address >= it->second.map) return &it->second;
    return nullptr;
}

// --- fibers ------------------------------------------------------------------------------

// Saves the callee-saved registers on the current stack, stores its pointer in *save,
// switches to the stack at next and restores the registers saved there.
extern "C" void emu_switch(void** save, void* next);
asm(R"(
    .text
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");

enum State { RUNNABLE, BARRIER, WARP, EXITED };

struct PendingCopy {  // __pipeline_memcpy_async: the source read when issued, landing at a wait
    void* dst;
    unsigned char data[16];
    unsigned bytes;
    unsigned long long group;  // the batch it belongs to: the commits before it
};

struct Worker;
struct Launch;

struct Fiber : Thread {  // the rest of a thread's state, after what kernels read
    void* sp;
    int lane, warp;
    State state;
    const char* what;  // where it waits
    const char* file;
    int line;
    int op, arg, width;  // the warp operation it waits in
    unsigned mask;
    unsigned long long value, result;
    unsigned long long commits;  // of asynchronous copies
    int pending;
    PendingCopy copies[kMaxPendingCopies];
};

struct BlockRun : Block {
    Worker* worker;
    const void* cluster_anchor;  // a thread_local of the kernel's library, once this_cluster() is called
    long long index;  // in launch order: x fastest
    int nthreads, started, live, at_barrier;
    Fiber* threads[kMaxThreads];  // null before a thread starts and after it exits
    unsigned exited[kMaxThreads / 32], waiting[kMaxThreads / 32], existing[kMaxThreads / 32];
    Fiber* queue[kMaxThreads + 1];  // runnable threads, a ring
    int head, tail;
};

struct Launch {
    void (*entry)(void**);
    void** args;
    const char* name;
    dim3 grid, block;
    size_t shared_bytes;
    long long total;     // blocks in the grid
    long long resident;  // the most blocks the device runs at once (its multiprocessors)
    bool co_resident;    // total <= resident: every block runs at once, each on its own worker
    // A cluster launch runs as one such launch per cluster: its blocks, rank by rank, from `origin`.
    dim3 cluster;
    uint3 origin{};
    std::vector<BlockRun*> members;  // by rank, once each block starts
    bool clustered() const { return !members.empty(); }
    unsigned cluster_bar[2] = {0, 0};  // cluster.sync()'s barrier, a GridBarrier{count, generation}
    const char* barrier = "grid_barrier";  // what the blocks meet at, in messages: its call
    const char* barrier_words = "grid barrier";  // and in words
    std::atomic<long long> next_block{0};
    bool racecheck = false;  // built for race checking (racecheck.cpp): the runtime tells it of every order
    bool trace = false;      // traced (trace.cpp): told of every block's start and end
    std::atomic<bool> failed{false};
    std::mutex error_lock;
    std::string error;
    long long error_block = -1;  // the block that made `error`; -1: none, or the host's stop
    // The turns and the grid barrier of a co-resident launch, all guarded by grid_lock.
    std::mutex grid_lock;
    std::condition_variable grid_open;  // notified when the turn passes or the launch fails
    long long turn = 0;                 // the block that may run now
    std::vector<char> exited;           // by block
    long long grid_arrived = 0, blocks_exited = 0;
    unsigned long long grid_generation = 0;  // barriers opened so far
    const void* grid_bar = nullptr;          // what the blocks waiting now passed, and where they wait
    const char* grid_file = nullptr;
    int grid_line = 0;
    uint3 first_exited{};
};

struct Worker {
    unsigned char* regions = nullptr;  // kMaxThreads stack regions, each aligned to its size
    unsigned char* dynamic_shared = nullptr;  // kMaxDynamicShared bytes, then a guard page
    std::vector<Fiber*> free_regions;
    void* scheduler_sp = nullptr;
    sigjmp_buf abort;
    Launch* launch = nullptr;
    Fiber* current = nullptr;  // the fiber running now, or null in the scheduler
    bool in_kernel = false;
    unsigned long long blocks_run = 0;  // the last block's serial
    BlockRun block;
    std::thread os_thread;
};

thread_local Worker* t_worker = nullptr;

std::string format(const char* fmt, va_list ap) {
    char buf[2048];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

std::string printf_string(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = format(fmt, ap);
    va_end(ap);
    return s;
}

std::string where(Worker& w) {
    const BlockRun& b = w.block;
    std::string s = printf_string("kernel '%s', block (%u, %u, %u)", w.launch->name, b.block_idx.x, b.block_idx.y,
                                  b.block_idx.z);
    if (w.current) {
        const uint3 t = w.current->thread_idx;
        s += printf_string(", thread (%u, %u, %u)", t.x, t.y, t.z);
    }
    return s;
}

// Records the error of the launch and abandons the block. Blocks that started before the failing
// one run on (only blocks not yet started are not started), and where one of them fails too its
// error stands instead: the launch reports the error of its lowest failing block, the same one
// whichever worker fails first.
[[noreturn]] void fail(Worker& w, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string message = format(fmt, ap);
    va_end(ap);
    {
        Launch& l = *w.launch;
        std::lock_guard<std::mutex> lock(l.error_lock);
        if (l.error.empty() || (l.error_block >= 0 && w.block.index < l.error_block)) {
            l.error = "in " + where(w) + ": " + message;
            l.error_block = w.block.index;
        }
    }
    {
        std::lock_guard<std::mutex> lock(w.launch->grid_lock);  // under it, so no waiter misses it
        w.launch->failed = true;
    }
    w.launch->grid_open.notify_all();  // blocks waiting at a grid barrier give up
    siglongjmp(w.abort, 1);
}

std::string lanes(unsigned bits, int base) {  // "threads 3, 5-9"
    std::string s;
    for (int i = 0; i < 32;) {
        if (!(bits >> i & 1)) {
            ++i;
            continue;
        }
        int j = i;
        while (j + 1 < 32 && (bits >> (j + 1) & 1)) ++j;
        if (!s.empty()) s += ", ";
        s += i == j ? printf_string("%d", base + i) : printf_string("%d-%d", base + i, base + j);
        i = j + 1;
    }
    return s;
}

void enqueue(BlockRun& b, Fiber* f) {
    f->state = RUNNABLE;
    b.queue[b.tail] = f;
    b.tail = (b.tail + 1) % (kMaxThreads + 1);
}

Fiber* dequeue(BlockRun& b) {
    if (b.head == b.tail) return nullptr;
    Fiber* f = b.queue[b.head];
    b.head = (b.head + 1) % (kMaxThreads + 1);
    return f;
}

void suspend(Fiber* f) { emu_switch(&f->sp, static_cast<BlockRun*>(f->block)->worker->scheduler_sp); }

[[noreturn]] void thread_main() {
    Fiber* f = static_cast<Fiber*>(self());
    Worker& w = *static_cast<BlockRun*>(f->block)->worker;
    w.launch->entry(w.launch->args);
    f->state = EXITED;
    emu_switch(&f->sp, w.scheduler_sp);
    __builtin_unreachable();
}

Fiber* start_thread(Worker& w, int linear) {
    BlockRun& b = w.block;
    Fiber* f = w.free_regions.back();
    w.free_regions.pop_back();
    f->block = &b;
    f->linear = linear;
    f->thread_idx = {linear % b.block_dim.x, linear / b.block_dim.x % b.block_dim.y,
                     linear / (b.block_dim.x * b.block_dim.y)};
    f->lane = linear % 32;
    f->warp = linear / 32;
    f->commits = 0;
    f->pending = 0;
    // A fresh stack that "returns" into thread_main with the alignment of a call.
    void** top = reinterpret_cast<void**>(reinterpret_cast<unsigned char*>(f) + kStackBytes);
    *--top = nullptr;  // thread_main's own return address: it never returns
    *--top = reinterpret_cast<void*>(&thread_main);
    for (int i = 0; i < 6; ++i) *--top = nullptr;  // rbp rbx r12-r15
    f->sp = top;
    b.threads[linear] = f;
    b.started++;
    b.live++;
    return f;
}

// --- warps ---------------------------------------------------------------------------------

int category(int op) { return op == SYNC_WARP ? 2 : op >= VOTE_BALLOT ? 1 : 0; }

// The lane whose value `f` reads in a shuffle (itself where the shuffle leaves the segment).
int source_lane(const Fiber* f) {
    const int w = f->width, l = f->lane, segment = l & ~(w - 1);
    switch (f->op) {
        case SHFL_IDX: return segment + (f->arg & (w - 1));
        case SHFL_UP: return (l & (w - 1)) >= f->arg ? l - f->arg : l;
        case SHFL_DOWN: return (l & (w - 1)) + f->arg < w ? l + f->arg : l;
        default: {
            const int s = l ^ f->arg;
            return s < 32 && (s & ~(w - 1)) <= segment ? s : l;
        }
    }
}

// Completes every operation of warp `warp` whose lanes have all arrived.
void complete_warp(Worker& w, int warp) {
    BlockRun& b = w.block;
    unsigned pending = b.waiting[warp];
    while (pending) {
        const Fiber* first = b.threads[warp * 32 + __builtin_ctz(pending)];
        const int cat = category(first->op);
        const unsigned mask = first->mask;
        unsigned group = 0;
        for (unsigned p = pending; p; p &= p - 1) {
            const Fiber* f = b.threads[warp * 32 + __builtin_ctz(p)];
            if (category(f->op) == cat && f->mask == mask) group |= 1u << f->lane;
        }
        pending &= ~group;
        const unsigned required = mask & b.existing[warp] & ~b.exited[warp];
        if (required & ~group) continue;  // someone named in the mask has not arrived yet
        unsigned votes = 0;
        for (unsigned p = group; p; p &= p - 1) {
            const Fiber* f = b.threads[warp * 32 + __builtin_ctz(p)];
            if (f->value) votes |= 1u << f->lane;
        }
        for (unsigned p = group; p; p &= p - 1) {
            Fiber* f = b.threads[warp * 32 + __builtin_ctz(p)];
            if (cat == 0) {
                const int src = source_lane(f);
                if (!(group >> src & 1)) {
                    w.current = f;
                    const bool gone = b.exited[warp] >> src & 1 || !(b.existing[warp] >> src & 1);
                    fail(w, "%s at %s:%d reads lane %d, which %s; on a GPU the value is undefined", f->what, f->file,
                         f->line, src, gone ? "has exited or does not exist" : "the mask leaves out");
                }
                f->result = b.threads[warp * 32 + src]->value;
            } else if (f->op == VOTE_BALLOT) {
                f->result = votes;
            } else if (f->op == VOTE_ANY) {
                f->result = votes != 0;
            } else if (f->op == VOTE_ALL) {
                f->result = votes == group;
            }
        }
        b.waiting[warp] &= ~group;
        if (w.launch->racecheck) racecheck::warp_sync(b, warp, group);
        for (unsigned p = group; p; p &= p - 1) enqueue(b, b.threads[warp * 32 + __builtin_ctz(p)]);
    }
}

// --- barriers ------------------------------------------------------------------------------

[[noreturn]] void abandon(Worker& w) { siglongjmp(w.abort, 1); }  // another block failed: its error stands

void pass_turn(Launch& l) {  // to the next block that has not exited; with grid_lock held
    for (long long k = 1; k <= l.total; ++k) {
        const long long next = (l.turn + k) % l.total;
        if (!l.exited[next]) {
            l.turn = next;
            break;
        }
    }
    l.grid_open.notify_all();
}

std::string grid_divergence(const Launch& l) {  // with grid_lock held
    return printf_string(
        "%s divergence: %lld of %lld blocks%s wait at %s at %s:%d, but block (%u, %u, %u) has exited; every block "
        "must reach every %s (on a GPU the waiting blocks would never return)",
        l.barrier_words, l.grid_arrived, l.total, l.clustered() ? " of the cluster" : "", l.barrier, l.grid_file,
        l.grid_line, l.first_exited.x, l.first_exited.y, l.first_exited.z, l.barrier_words);
}

// The block has met at grid_barrier(bar) at file:line: wait for every other block. Never
// fails or faults while holding grid_lock (fail takes it to wake the waiters).
void grid_wait(Worker& w, void* bar, const char* file, int line) {
    Launch& l = *w.launch;
    w.current = nullptr;  // what goes wrong here is the block's, not one thread's
    if (!l.co_resident)
        fail(w,
             "grid_barrier at %s:%d in a launch of %lld blocks, but the emulated device runs at most %lld at once "
             "(MULTIPROCESSOR_COUNT, one block each): a grid barrier needs every block running; on a GPU the "
             "blocks that started would wait forever for the rest",
             file, line, l.total, l.resident);
    unsigned* generation = static_cast<unsigned*>(bar) + 1;  // GridBarrier{count, generation}
    const unsigned seen = __atomic_load_n(generation, __ATOMIC_SEQ_CST);  // a bad pointer faults here, unlocked
    std::unique_lock<std::mutex> lock(l.grid_lock);
    std::string problem;
    if (l.grid_arrived == 0) {
        l.grid_bar = bar;
        l.grid_file = file;
        l.grid_line = line;
    } else if (bar != l.grid_bar) {
        problem = printf_string("grid_barrier at %s:%d waits on the GridBarrier at %p, but the blocks waiting at "
                                "%s:%d wait on the one at %p; on a GPU neither would ever open",
                                file, line, bar, l.grid_file, l.grid_line, l.grid_bar);
    }
    if (problem.empty() && l.blocks_exited) {
        l.grid_arrived++;
        problem = grid_divergence(l);
    }
    if (!problem.empty()) {
        lock.unlock();
        fail(w, "%s", problem.c_str());
    }
    const unsigned long long opened = l.grid_generation;  // this barrier is open once it moves on
    const bool last = ++l.grid_arrived == l.total;
    if (last) {
        // The last block: leave the GridBarrier as the GPU's code does (count 0, generation
        // one on), then open it. No block can arrive or exit meanwhile: all wait here.
        lock.unlock();
        __atomic_store_n(generation, seen + 1, __ATOMIC_SEQ_CST);
        lock.lock();
        l.grid_arrived = 0;
        l.grid_generation++;
        if (l.racecheck) racecheck::grid_opened();
    }
    // At a cluster.sync() the last block runs on first: one that exits without a later sync then
    // exits before the others read its shared memory, which map_shared_rank reports.
    if (!last || !l.clustered()) pass_turn(l);
    l.grid_open.wait(lock, [&] { return (l.grid_generation != opened && l.turn == w.block.index) || l.failed; });
    const bool gave_up = l.failed;
    lock.unlock();
    if (gave_up) abandon(w);
}

// Every thread of the block waits at the same barrier: release them (at a grid
// barrier, `grid`, once every block is there too).
void open_barrier(Worker& w, void* grid = nullptr) {
    BlockRun& b = w.block;
    const Fiber* first = b.threads[0];
    for (int i = 1; i < b.nthreads; ++i) {
        const Fiber* f = b.threads[i];
        if (f->line != first->line || strcmp(f->file, first->file) != 0) {
            w.current = nullptr;
            fail(w,
                 "barrier divergence: thread %d waits at %s at %s:%d while thread %d waits at %s at %s:%d; every "
                 "thread of a block must reach the same barrier",
                 first->linear, first->what, first->file, first->line, f->linear,
                 strcmp(f->what, first->what) == 0 ? "the one" : f->what, f->file, f->line);
        }
    }
    if (grid) grid_wait(w, grid, first->file, first->line);
    if (w.launch->racecheck) grid ? racecheck::grid_passed(b) : racecheck::barrier(b);
    unsigned long long count = 0;  // for __syncthreads_count/_and/_or
    for (int i = 0; i < b.nthreads; ++i) count += b.threads[i]->value;
    b.at_barrier = 0;
    for (int i = 0; i < b.nthreads; ++i) {
        b.threads[i]->result = count;
        enqueue(b, b.threads[i]);
    }
}

// No thread can run: name what every waiting thread waits for.
[[noreturn]] void deadlock(Worker& w) {
    BlockRun& b = w.block;
    w.current = nullptr;
    for (int warp = 0; warp * 32 < b.nthreads; ++warp) {
        if (!b.waiting[warp]) continue;
        const Fiber* f = b.threads[warp * 32 + __builtin_ctz(b.waiting[warp])];
        const unsigned required = f->mask & b.existing[warp] & ~b.exited[warp];
        std::string missing;
        for (unsigned p = required; p; p &= p - 1) {
            const Fiber* g = b.threads[warp * 32 + __builtin_ctz(p)];
            if (g->state == WARP && g->mask == f->mask && category(g->op) == category(f->op)) continue;
            missing = printf_string("thread %d waits at %s at %s:%d", g->linear, g->what, g->file, g->line);
            if (g->state == WARP) missing += printf_string(" with mask 0x%08x", g->mask);
            break;
        }
        fail(w, "threads %s wait at %s at %s:%d with mask 0x%08x, but %s; the warp can never complete it",
             lanes(b.waiting[warp], warp * 32).c_str(), f->what, f->file, f->line, f->mask, missing.c_str());
    }
    for (int i = 0; i < b.nthreads; ++i) {
        const Fiber* f = b.threads[i];
        if (f && f->state == BARRIER) {
            int gone = 0;
            while (b.threads[gone]) ++gone;
            fail(w,
                 "barrier divergence: %d of %d threads wait at %s at %s:%d, but thread %d has exited; "
                 "every thread of a block must reach the barrier",
                 b.at_barrier, b.nthreads, f->what, f->file, f->line, gone);
        }
    }
    fail(w, "the block can make no progress");
}

void finish_thread(Worker& w, Fiber* f) {
    BlockRun& b = w.block;
    b.live--;
    b.exited[f->warp] |= 1u << f->lane;
    b.threads[f->linear] = nullptr;
    w.free_regions.push_back(f);
    if (b.waiting[f->warp]) complete_warp(w, f->warp);  // one fewer lane to wait for
}

void run_block(Worker& w, uint3 idx) {
    Launch& l = *w.launch;
    BlockRun& b = w.block;
    b.block_idx = idx;
    b.cluster_anchor = nullptr;
    b.serial = ++w.blocks_run;  // its static __shared__ variables are poisoned as its threads declare them
    memset(b.dynamic_shared, kSharedPoison, l.shared_bytes);
    if (l.racecheck) racecheck::block_begin(b, b.index, b.dynamic_shared, l.shared_bytes);
    if (l.trace) trace::block_begin(b, b.dynamic_shared, l.shared_bytes);
    b.block_dim = l.block;
    b.grid_dim = l.grid;
    b.nthreads = int(l.block.x * l.block.y * l.block.z);
    b.started = b.live = b.at_barrier = b.head = b.tail = 0;
    std::fill(b.threads, b.threads + b.nthreads, nullptr);
    for (int warp = 0; warp * 32 < b.nthreads; ++warp) {
        const int n = std::min(32, b.nthreads - warp * 32);
        b.existing[warp] = n == 32 ? ~0u : (1u << n) - 1;
        b.exited[warp] = b.waiting[warp] = 0;
    }
    for (;;) {
        Fiber* f = dequeue(b);
        if (!f) {
            if (b.started < b.nthreads) {
                f = start_thread(w, b.started);
            } else if (b.live == 0) {
                break;
            } else {
                deadlock(w);
            }
        }
        w.current = f;
        emu_switch(&w.scheduler_sp, f->sp);
        w.current = nullptr;
        if (f->state == EXITED) finish_thread(w, f);
    }
    if (l.trace) trace::block_end(b);
}

// A block of a co-resident launch has finished: an error if others wait at a grid barrier.
void block_exited(Worker& w) {
    Launch& l = *w.launch;
    std::unique_lock<std::mutex> lock(l.grid_lock);
    l.exited[w.block.index] = 1;
    if (l.blocks_exited++ == 0) l.first_exited = w.block.block_idx;
    if (l.grid_arrived == 0) {
        pass_turn(l);
        return;
    }
    const std::string problem = grid_divergence(l);
    lock.unlock();
    fail(w, "%s", problem.c_str());
}

void run_blocks(Worker& w) {
    Launch& l = *w.launch;
    w.free_regions.clear();
    for (int i = kMaxThreads - 1; i >= 0; --i)
        w.free_regions.push_back(reinterpret_cast<Fiber*>(w.regions + size_t(i) * kStackBytes));
    w.block.worker = &w;
    w.block.dynamic_shared = w.dynamic_shared + kMaxDynamicShared - round_up(l.shared_bytes, 16);
    if (sigsetjmp(w.abort, 1)) {  // a fiber failed: the block is abandoned
        if (l.racecheck) racecheck::block_abandoned(w.block);
        w.in_kernel = false;
        w.current = nullptr;
        return;
    }
    w.in_kernel = true;
    for (long long i; !l.failed && (i = l.next_block++) < l.total;) {
        if (l.co_resident) {
            std::unique_lock<std::mutex> lock(l.grid_lock);  // the block starts on its turn
            l.grid_open.wait(lock, [&] { return l.turn == i || l.failed; });
            if (l.failed) break;
        }
        w.block.index = i;
        if (l.clustered()) {  // block i is rank i
            l.members[size_t(i)] = &w.block;
            run_block(w, {l.origin.x + unsigned(i % l.cluster.x), l.origin.y + unsigned(i / l.cluster.x % l.cluster.y),
                          l.origin.z + unsigned(i / ((long long)l.cluster.x * l.cluster.y))});
        } else {
            run_block(w, {unsigned(i % l.grid.x), unsigned(i / l.grid.x % l.grid.y),
                          unsigned(i / ((long long)l.grid.x * l.grid.y))});
        }
        if (l.co_resident) block_exited(w);
    }
    w.in_kernel = false;
}

// --- faults --------------------------------------------------------------------------------

struct sigaction g_previous[2];

std::string describe(Worker& w, uintptr_t address, bool write) {
    const char* access = write ? "write" : "read";
    if (const Allocation* a = allocation_near(address)) {
        if (address >= a->data + a->bytes)
            return printf_string("out-of-bounds %s at 0x%lx, %lu bytes past the end of a %lu-byte device buffer at 0x%lx",
                                 access, address, address - (a->data + a->bytes), a->bytes, a->data);
        return printf_string("out-of-bounds %s at 0x%lx, %lu bytes before the start of a %lu-byte device buffer at 0x%lx",
                             access, address, a->data - address, a->bytes, a->data);
    }
    const uintptr_t regions = reinterpret_cast<uintptr_t>(w.regions);
    if (address >= regions && address < regions + kMaxThreads * kStackBytes)
        return printf_string("stack overflow: the thread's local variables need more than %lu KB", kStackBytes >> 10);
    const uintptr_t shared_end = reinterpret_cast<uintptr_t>(w.dynamic_shared) + kMaxDynamicShared;
    if (address >= shared_end && address < shared_end + kPage)
        return printf_string("out-of-bounds %s past the end of the %lu bytes of dynamic shared memory", access,
                             w.launch->shared_bytes);
    return printf_string("invalid %s at 0x%lx: no device memory is there", access, address);
}

void on_fault(int sig, siginfo_t* info, void* context) {
    Worker* w = t_worker;
    if (!w || !w->in_kernel) {  // not ours: let the previous handler see the fault again
        sigaction(sig, &g_previous[sig == SIGBUS], nullptr);
        return;
    }
    const auto& registers = static_cast<ucontext_t*>(context)->uc_mcontext.gregs;
    const bool write = registers[REG_ERR] & 2;
    std::string message = describe(*w, reinterpret_cast<uintptr_t>(info->si_addr), write);
    // Where in the kernel's library: the host (driver.py) reads the source line from its line table.
    Dl_info code{};
    const uintptr_t pc = uintptr_t(registers[REG_RIP]);
    if (dladdr(reinterpret_cast<void*>(pc), &code) && code.dli_fname)
        message += printf_string(" [pc %s+0x%lx]", code.dli_fname, pc - reinterpret_cast<uintptr_t>(code.dli_fbase));
    fail(*w, "%s", message.c_str());
}

// --- stopping a launch from the host ------------------------------------------------------
// A notebook's time limit or Kernel > Interrupt (emu_stop): the launch is marked failed, so no
// block starts and grid barriers give up, and each worker is sent kStopSignal; one running a
// fiber (an endless loop never waits, so never comes back on its own) abandons its block as a
// fault does. The host sends it again until the launch returns: a worker in the scheduler at
// that moment ignores it, and so does one in race checking's locked code (racecheck::busy).

constexpr int kStopSignal = SIGUSR2;

void on_stop(int) {
    Worker* w = t_worker;
    if (w && w->in_kernel && w->current && !(w->launch->racecheck && racecheck::busy(w->block))) abandon(*w);
}

// --- the pool ------------------------------------------------------------------------------

struct Pool {
    std::vector<Worker*> workers;  // grown on demand: a co-resident launch needs one per block
    std::mutex lock;
    std::condition_variable wake, done;
    Launch* launch = nullptr;
    long long generation = 0;
    int serving = 0;  // the first `serving` workers run the launch
    int running = 0;

    Pool() {
        struct sigaction action {};
        action.sa_sigaction = on_fault;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        sigaction(SIGSEGV, &action, &g_previous[0]);
        sigaction(SIGBUS, &action, &g_previous[1]);
        struct sigaction stop {};
        stop.sa_handler = on_stop;
        stop.sa_flags = SA_ONSTACK;
        sigemptyset(&stop.sa_mask);
        sigaction(kStopSignal, &stop, nullptr);
    }

    void add_worker() {  // with lock held
        Worker* w = new Worker;
        map_worker(*w);
        const int index = int(workers.size());
        const long long seen = generation;
        w->os_thread = std::thread([this, w, index, seen] { serve(*w, index, seen); });
        workers.push_back(w);
    }

    static void map_worker(Worker& w) {
        // Regions aligned to their size, so a fiber finds its state from its stack pointer.
        const size_t bytes = kMaxThreads * kStackBytes;
        auto* raw = static_cast<unsigned char*>(
            mmap(nullptr, bytes + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
        w.regions = reinterpret_cast<unsigned char*>(round_up(reinterpret_cast<uintptr_t>(raw), kStackBytes));
        for (int i = 0; i < kMaxThreads; ++i)  // a guard page between each fiber's state and its stack
            mprotect(w.regions + size_t(i) * kStackBytes + round_up(sizeof(Fiber), kPage), kPage, PROT_NONE);
        const size_t shared = round_up(kMaxDynamicShared, kPage);
        auto* s = static_cast<unsigned char*>(
            mmap(nullptr, shared + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        mprotect(s + shared, kPage, PROT_NONE);
        w.dynamic_shared = s + shared - kMaxDynamicShared;
    }

    void serve(Worker& w, int index, long long seen) {
        t_worker = &w;
        stack_t alt{};  // faults are handled on their own stack: a fiber's may be the one that overflowed
        alt.ss_size = 64 << 10;
        alt.ss_sp = malloc(alt.ss_size);
        sigaltstack(&alt, nullptr);
        for (;;) {
            {
                std::unique_lock<std::mutex> guard(lock);
                wake.wait(guard, [&] { return generation != seen && index < serving; });
                seen = generation;
                w.launch = launch;
            }
            run_blocks(w);
            std::lock_guard<std::mutex> guard(lock);
            if (--running == 0) done.notify_all();
        }
    }

    bool stop(const char* why) {  // from another host thread, while run() waits; false if none runs
        std::lock_guard<std::mutex> guard(lock);
        if (running == 0) return false;
        Launch& l = *launch;
        {
            std::lock_guard<std::mutex> error(l.error_lock);
            if (l.error.empty()) l.error = why;
        }
        {
            std::lock_guard<std::mutex> grid(l.grid_lock);
            l.failed = true;
        }
        l.grid_open.notify_all();
        for (int i = 0; i < serving; ++i) pthread_kill(workers[size_t(i)]->os_thread.native_handle(), kStopSignal);
        return true;
    }

    void run(Launch& l, int n) {  // on n workers
        std::unique_lock<std::mutex> guard(lock);
        while (int(workers.size()) < n) add_worker();
        launch = &l;
        serving = running = n;
        generation++;
        wake.notify_all();
        done.wait(guard, [&] { return running == 0; });
    }
};

Pool* g_pool = nullptr;
std::mutex g_launch_lock;
// A forked child has none of the parent's worker threads: it starts a pool of its own.
const int g_forget_pool_in_child = pthread_atfork(nullptr, nullptr, [] { g_pool = nullptr; });

}  // namespace
}  // namespace emu

using namespace emu;

// --- what kernels call ---------------------------------------------------------------------

// Waits until every thread of the block is here; returns how many passed a nonzero predicate.
extern "C" int __emu_syncthreads(int predicate, const char* file, int line) {
    Fiber* f = static_cast<Fiber*>(self());
    BlockRun& b = *static_cast<BlockRun*>(f->block);
    f->state = BARRIER;
    f->what = "__syncthreads";
    f->value = predicate != 0;
    f->file = file;
    f->line = line;
    if (++b.at_barrier == b.nthreads) open_barrier(*b.worker);
    suspend(f);
    return int(f->result);
}

// grid_barrier.cuh's barrier: the block's threads meet as at __syncthreads, then the blocks meet.
extern "C" void __emu_grid_barrier(void* bar, const char* file, int line) {
    Fiber* f = static_cast<Fiber*>(self());
    BlockRun& b = *static_cast<BlockRun*>(f->block);
    if (b.worker->launch->clustered())
        fail(*b.worker, "grid_barrier at %s:%d in a launch with clusters: the emulator runs one cluster at a time",
             file, line);
    f->state = BARRIER;
    f->what = "grid_barrier";
    f->value = 0;
    f->file = file;
    f->line = line;
    if (++b.at_barrier == b.nthreads) open_barrier(*b.worker, bar);
    suspend(f);
}

// include/cooperative_groups.h's this_cluster(): the cluster's shape; notes where this block's
// thread_local variables lie (`anchor`, one of them), for map_shared_rank.
extern "C" uint3 __emu_cluster_enter(const void* anchor) {
    BlockRun& b = *static_cast<BlockRun*>(self()->block);
    b.cluster_anchor = anchor;
    const dim3 c = b.worker->launch->cluster;
    return {c.x, c.y, c.z};
}

// cluster.sync(): the block's threads meet as at __syncthreads, then the cluster's blocks meet.
extern "C" void __emu_cluster_sync(const char* file, int line) {
    Fiber* f = static_cast<Fiber*>(self());
    BlockRun& b = *static_cast<BlockRun*>(f->block);
    Launch& l = *b.worker->launch;
    f->state = BARRIER;
    f->what = "cluster.sync()";
    f->value = 0;
    f->file = file;
    f->line = line;
    if (++b.at_barrier == b.nthreads) open_barrier(*b.worker, l.clustered() ? l.cluster_bar : nullptr);
    suspend(f);
}

// cluster.map_shared_rank(address, rank): the same variable in the shared memory of the block of
// that rank: dynamic shared memory at the same offset, a static __shared__ variable (thread_local)
// at the same distance from `anchor` on that block's worker.
extern "C" void* __emu_cluster_map(const void* address, unsigned rank, const void* anchor, const char* file,
                                   int line) {
    BlockRun& b = *static_cast<BlockRun*>(self()->block);
    Worker& w = *b.worker;
    Launch& l = *w.launch;
    const long long size = (long long)l.cluster.x * l.cluster.y * l.cluster.z;
    if (rank >= size)
        fail(w, "map_shared_rank(%p, %u) at %s:%d: the cluster has %lld blocks, ranks 0 to %lld", address, rank, file,
             line, size, size - 1);
    if (!l.clustered()) return const_cast<void*>(address);  // a cluster of one block: its own
    std::unique_lock<std::mutex> lock(l.grid_lock);  // released before fail, which takes it
    const bool exited = l.exited[rank];
    const BlockRun* peer = l.members[rank];
    lock.unlock();
    if (exited)
        fail(w,
             "map_shared_rank(%p, %u) at %s:%d: the block of rank %u has exited, and its shared memory with it (a "
             "cluster.sync() before any block exits keeps every block's shared memory there)",
             address, rank, file, line, rank);
    if (!peer || !peer->cluster_anchor)
        fail(w,
             "map_shared_rank(%p, %u) at %s:%d: the block of rank %u has not reached this_cluster() yet, so "
             "nothing it stores is there to read (a cluster.sync() after its stores and before the read is missing)",
             address, rank, file, line, rank);
    const uintptr_t a = reinterpret_cast<uintptr_t>(address), mine = reinterpret_cast<uintptr_t>(b.dynamic_shared);
    if (a >= mine && a < mine + l.shared_bytes) return peer->dynamic_shared + (a - mine);
    return reinterpret_cast<void*>(a - reinterpret_cast<uintptr_t>(anchor) +
                                   reinterpret_cast<uintptr_t>(peer->cluster_anchor));
}

extern "C" unsigned long long __emu_warp(int op, unsigned mask, unsigned long long value, int arg, int width,
                                         const char* name, const char* file, int line) {
    Fiber* f = static_cast<Fiber*>(self());
    BlockRun& b = *static_cast<BlockRun*>(f->block);
    if (!(mask >> f->lane & 1))
        fail(*b.worker, "%s at %s:%d with mask 0x%08x is executed by lane %d, which the mask leaves out", name, file,
             line, mask, f->lane);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail(*b.worker, "%s at %s:%d: width %d is not a power of two from 1 to 32", name, file, line, width);
    f->state = WARP;
    f->op = op;
    f->mask = mask;
    f->value = value;
    f->arg = arg;
    f->width = width;
    f->what = name;
    f->file = file;
    f->line = line;
    b.waiting[f->warp] |= 1u << f->lane;
    complete_warp(*b.worker, f->warp);
    suspend(f);
    return f->result;
}

// <cuda_pipeline.h>. A copy lands only at the __pipeline_wait_prior that covers its batch, so
// reading a slot too early (before the wait, or waiting for too few batches) shows the old
// contents every run. The wait is no switch point: the thread runs on, so reading another
// thread's copy needs a __syncthreads after the wait, as on a GPU.
extern "C" void __emu_pipeline_copy(void* dst, const void* src, size_t bytes, size_t zfill, const char* file,
                                    int line) {
    Fiber* f = static_cast<Fiber*>(self());
    Worker& w = *static_cast<BlockRun*>(f->block)->worker;
    if ((bytes != 4 && bytes != 8 && bytes != 16) || zfill > bytes)
        fail(w, "__pipeline_memcpy_async at %s:%d copies %zu bytes with zfill %zu: the size must be 4, 8 or 16 and "
             "zfill at most the size", file, line, bytes, zfill);
    if (reinterpret_cast<uintptr_t>(dst) % bytes || reinterpret_cast<uintptr_t>(src) % bytes)
        fail(w, "misaligned address: __pipeline_memcpy_async at %s:%d copies %zu bytes from %p to %p, which must "
             "both be aligned to %zu bytes", file, line, bytes, src, dst, bytes);
    if (f->pending == kMaxPendingCopies)
        fail(w, "__pipeline_memcpy_async at %s:%d: more than %d copies of one thread in flight (the emulator's "
             "limit); wait for earlier batches first", file, line, kMaxPendingCopies);
    PendingCopy& c = f->copies[f->pending];
    memset(c.data, 0, sizeof c.data);  // the zfill bytes
    memcpy(c.data, src, bytes - zfill);  // a bad source faults here, at the copy
    c.dst = dst;
    c.bytes = unsigned(bytes);
    c.group = f->commits;
    f->pending++;
}

extern "C" void __emu_pipeline_commit(void) { static_cast<Fiber*>(self())->commits++; }

// Lands every copy of this thread except those of the `prior` most recent batches.
extern "C" void __emu_pipeline_wait(size_t prior) {
    Fiber* f = static_cast<Fiber*>(self());
    int kept = 0;
    for (int i = 0; i < f->pending; ++i) {
        PendingCopy& c = f->copies[i];
        if (c.group + prior < f->commits)
            memcpy(c.dst, c.data, c.bytes);
        else
            f->copies[kept++] = c;
    }
    f->pending = kept;
}

extern "C" unsigned __emu_activemask(void) {  // the lanes that have not exited
    const Fiber* f = static_cast<Fiber*>(self());
    const BlockRun& b = *static_cast<BlockRun*>(f->block);
    return b.existing[f->warp] & ~b.exited[f->warp];
}

extern "C" void __emu_trap(const char* what, const char* file, int line) {
    fail(*static_cast<BlockRun*>(self()->block)->worker, "%s at %s:%d", what, file, line);
}

// g++'s -fsanitize=bounds,alignment call these (the layouts are UBSan's).
struct SourceLocation {
    const char* file;
    unsigned line, column;
};
struct TypeDescriptor {
    unsigned short kind, info;
    char name[1];
};
struct OutOfBoundsData {
    SourceLocation location;
    const TypeDescriptor* array;
    const TypeDescriptor* index;
};
struct TypeMismatchData {
    SourceLocation location;
    const TypeDescriptor* type;
    unsigned char log_alignment, check_kind;
};

static Worker& faulting_worker() {
    if (!t_worker || !t_worker->in_kernel) abort();  // a check in host code of a kernel library: not a launch
    return *t_worker;
}

namespace emu {
void fail_in_kernel(const std::string& message) { fail(faulting_worker(), "%s", message.c_str()); }

bool device_buffer(uintptr_t address, uintptr_t* start, uintptr_t* end) {
    std::lock_guard<std::mutex> lock(g_alloc_lock);
    const Allocation* a = allocation_near(address);
    if (!a || address < a->data || address >= a->data + a->bytes) return false;
    *start = a->data;
    *end = a->data + a->bytes;
    return true;
}

std::string describe_device_address(uintptr_t address) {
    std::lock_guard<std::mutex> lock(g_alloc_lock);
    const Allocation* a = allocation_near(address);
    if (!a || address < a->data || address >= a->data + a->bytes) return "";
    return printf_string("0x%lx, %lu bytes into a %lu-byte device buffer at 0x%lx", address, address - a->data,
                         a->bytes, a->data);
}
}  // namespace emu

extern "C" void __ubsan_handle_out_of_bounds_abort(OutOfBoundsData* data, uintptr_t index) {
    const bool is_signed = data->index->info & 1;
    fail(faulting_worker(), "out-of-bounds index %lld into an array of type %s at %s:%u", is_signed ? (long long)index : (long long)(unsigned long long)index,
         data->array->name, data->location.file, data->location.line);
}

extern "C" void __ubsan_handle_type_mismatch_v1_abort(TypeMismatchData* data, uintptr_t pointer) {
    static const char* kinds[] = {"load of", "store to", "reference to", "member access in", "member call on"};
    const char* kind = data->check_kind < 5 ? kinds[data->check_kind] : "use of";
    if (pointer == 0)
        fail(faulting_worker(), "%s a null pointer of type %s at %s:%u", kind, data->type->name, data->location.file,
             data->location.line);
    fail(faulting_worker(), "misaligned address: %s 0x%lx of type %s, which needs %u-byte alignment, at %s:%u", kind,
         pointer, data->type->name, 1u << data->log_alignment, data->location.file, data->location.line);
}

// --- what the Python driver calls ------------------------------------------------------------

// The driver maps device memory itself (a Python mmap object owns each mapping, so that it
// is unmapped exactly when the allocation object is gone); here its first and last pages
// become guards and the buffer is placed to end at the last guard. Returns the buffer.
extern "C" uintptr_t emu_register(uintptr_t map, size_t map_bytes, size_t bytes) {
    const size_t data = round_up(std::max<size_t>(bytes, 1), 16);
    if (map_bytes < data + 2 * kPage) return 0;
    mprotect(reinterpret_cast<void*>(map), kPage, PROT_NONE);
    mprotect(reinterpret_cast<void*>(map + map_bytes - kPage), kPage, PROT_NONE);
    const uintptr_t start = map + map_bytes - kPage - data;
    std::lock_guard<std::mutex> lock(g_alloc_lock);
    // Entries of mappings that were unmapped without an explicit free overlap this one: drop them.
    for (auto it = g_allocations.lower_bound(map > (1 << 30) ? map - (1 << 30) : 0); it != g_allocations.end();) {
        const Allocation& old = it->second;
        if (old.map >= map + map_bytes) break;
        it = old.map + old.map_bytes > map ? g_allocations.erase(it) : std::next(it);
    }
    g_allocations[start] = {map, map_bytes, start, bytes};
    return start;
}

extern "C" void emu_unregister(uintptr_t start) {
    std::lock_guard<std::mutex> lock(g_alloc_lock);
    g_allocations.erase(start);
}

// 0 when [address, address + bytes) lies inside one allocation, else -1.
extern "C" int emu_check_range(uintptr_t address, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_alloc_lock);
    auto it = g_allocations.upper_bound(address);
    if (it == g_allocations.begin()) return -1;
    const Allocation& a = std::prev(it)->second;
    return address >= a.data && address + bytes <= a.data + a.bytes ? 0 : -1;
}

// Stops the launch in progress with `why` as its error (see on_stop); 1 if one was running.
extern "C" int emu_stop(const char* why) { return g_pool && g_pool->stop(why) ? 1 : 0; }

extern "C" int emu_workers(void) { return int(std::max(1u, std::thread::hardware_concurrency())); }

// Runs a launch to completion on `workers` OS threads, or co-resident (one per block) when it
// has at most `resident` blocks; a launch with clusters of more than one block (`cluster`, whose
// extents divide the grid's), cluster by cluster, each co-resident. `instrument`: 0, or for a kernel
// built with ThreadSanitizer's calls, RACECHECK (racecheck.cpp: a race stops it as a fault does) or
// TRACE (trace.cpp, on one worker: its accesses are counted, emu_trace_rows). Returns 0, or -1 with
// the error of the lowest failing block (fail) in `error`.
extern "C" int emu_launch(void (*entry)(void**), void** args, const char* name, const unsigned* grid,
                          const unsigned* block, const unsigned* cluster, size_t shared_bytes, int workers,
                          int resident, int instrument, char* error, size_t error_bytes) {
    enum { RACECHECK = 1, TRACE = 2 };
    const bool racecheck = instrument == RACECHECK, traced = instrument == TRACE;
    std::lock_guard<std::mutex> serial(g_launch_lock);  // one stream: launches run in order
    if (!g_pool) g_pool = new Pool;
    const dim3 g(grid[0], grid[1], grid[2]), c(cluster[0], cluster[1], cluster[2]);
    const long long size = (long long)c.x * c.y * c.z, clusters = (long long)g.x * g.y * g.z / size;
    const bool alone = workers == 1 || size > 1 || (long long)g.x * g.y * g.z <= resident;  // blocks take turns
    if (racecheck) racecheck::launch_begin(g, dim3(block[0], block[1], block[2]), alone);
    if (traced) trace::launch_begin();
    struct End {  // race checking and tracing stop with the launch, however it ends
        bool racecheck, traced;
        ~End() {
            if (racecheck) racecheck::launch_end();
            if (traced) trace::launch_end();
        }
    } end{racecheck, traced};
    for (long long k = 0; k < (size > 1 ? clusters : 1); ++k) {
        Launch l;
        l.entry = entry;
        l.args = args;
        l.name = name;
        l.grid = g;
        l.block = dim3(block[0], block[1], block[2]);
        l.cluster = c;
        l.shared_bytes = shared_bytes;
        l.racecheck = racecheck;
        l.trace = traced;
        l.total = size > 1 ? size : (long long)g.x * g.y * g.z;
        l.resident = size > 1 ? size : resident;
        l.co_resident = l.total <= l.resident;
        if (l.co_resident) l.exited.assign(size_t(l.total), 0);
        if (size > 1) {  // cluster k, in the order of the blocks of its rank 0
            const unsigned across = g.x / c.x, down = g.y / c.y;
            l.origin = {unsigned(k % across) * c.x, unsigned(k / across % down) * c.y,
                        unsigned(k / ((long long)across * down)) * c.z};
            l.members.assign(size_t(size), nullptr);
            l.barrier = l.barrier_words = "cluster.sync()";
        }
        g_pool->run(l, l.co_resident ? int(l.total) : workers);
        fflush(stdout);  // a kernel's printf shows when the launch returns, as after a GPU's sync
        if (l.failed) {
            snprintf(error, error_bytes, "%s", l.error.c_str());
            return -1;
        }
    }
    return 0;
}
