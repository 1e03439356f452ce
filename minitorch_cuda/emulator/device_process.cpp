// device_process.cpp: the emulated device as a process of its own, for kernels the caller must
// not trust (device_process.py starts it; the grader runs every emulated launch here).
//
// It loads the emulator's runtime, then installs a seccomp filter before any kernel library is
// loaded, so a library's constructors and its kernels alike run under it: memory mapping, futexes,
// threads of this process, clocks, reading and writing the descriptors it was given; no exec, no
// fork, no file opened by name, no socket, no signal to another process, no ptrace. A system call
// outside the filter is trapped: the SIGSYS handler reports its number to the caller and the process
// ends. The one name it opens is /proc/self/fd/N/..., a descriptor the caller sent (dlopen needs a path):
// the handler answers that openat with a copy of the descriptor, so nothing new becomes reachable.
//
// Device memory is the caller's: each allocation is a memfd it sends with its address, mapped here
// at the same address, so pointers in arguments and in device memory mean the same in both. Requests
// and replies are plain data on a SOCK_SEQPACKET socket (one message each); the caller treats every
// reply as untrusted.
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <malloc.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <ucontext.h>
#include <unistd.h>

#include <linux/audit.h>
#include <sched.h>

#include <algorithm>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#error "the device process's system call filter is written for x86-64"
#endif

namespace {

// --- the protocol (device_process.py holds the same layout) ----------------------------------

enum Kind : uint32_t { MAP = 1, UNMAP = 2, LOAD = 3, LAUNCH = 4, TRACE_ROWS = 5 };
enum Status : int32_t { OK = 0, FAILED = 1, SYSCALL = 2 };

struct Request {
    uint32_t kind, count;
    uint64_t serial;  // echoed in the reply: an answer out of turn (forged by a kernel) shows
};
struct Region {  // MAP: where the caller mapped a memfd, and the buffer's size; UNMAP: data is the buffer
    uint64_t map, map_bytes, bytes_or_data;
};
struct Symbol {  // LOAD's reply, per kernel name
    uint64_t entry;
    int32_t bounds;  // __launch_bounds__' threads, or 0
    uint32_t cluster[3];
};
struct Launch {
    uint64_t entry;
    uint32_t grid[3], block[3], cluster[3];
    uint64_t shared_bytes;
    int32_t workers, resident, instrument;
    uint32_t reserved;
    // then `count` 8-byte argument slots, then the kernel's name
};
struct Reply {
    uint64_t serial;  // the request's
    int32_t status, syscall;
    uint32_t length;  // of the text that follows
    uint32_t reserved;
};

constexpr size_t kMaxMessage = 1 << 16;
constexpr int kMaxFds = 200;

int g_socket = -1;
uint64_t g_serial = 0;  // of the request being served

void reply(int32_t status, const std::string& text = "", int32_t syscall_nr = 0) {
    std::string message(sizeof(Reply), '\0');
    const Reply head{g_serial, status, syscall_nr, uint32_t(std::min(text.size(), kMaxMessage - sizeof(Reply))), 0};
    memcpy(&message[0], &head, sizeof head);
    message.append(text, 0, head.length);
    send(g_socket, message.data(), message.size(), MSG_NOSIGNAL);
}

// --- the filter ---------------------------------------------------------------------------------

// A system call outside the filter, or an openat: answer /proc/self/fd/N with a copy of N, else
// report the call and end the process. Only raw system calls here (it runs inside a signal).
void on_sigsys(int, siginfo_t* info, void* context) {
    greg_t* r = static_cast<ucontext_t*>(context)->uc_mcontext.gregs;
    if (info->si_syscall == SYS_openat) {
        const char* path = reinterpret_cast<const char*>(r[REG_RSI]);
        static const char kPrefix[] = "/proc/self/fd/";
        if (path && strncmp(path, kPrefix, sizeof kPrefix - 1) == 0) {
            char* end = nullptr;
            const long fd = strtol(path + sizeof kPrefix - 1, &end, 10);
            if (end && (*end == '\0' || *end == '/') && fd >= 0) {  // (what follows N only names the load)
                r[REG_RAX] = syscall(SYS_fcntl, int(fd), F_DUPFD_CLOEXEC, 0);
                if (long(r[REG_RAX]) == -1) r[REG_RAX] = -errno;
                return;
            }
        }
    }
    const Reply head{g_serial, SYSCALL, info->si_syscall, 0, 0};
    syscall(SYS_sendto, g_socket, &head, sizeof head, MSG_NOSIGNAL, nullptr, 0);
    syscall(SYS_exit_group, 125);
}

struct Filter {
    std::vector<sock_filter> code;
    void add(uint16_t op, uint32_t k, uint8_t jt = 0, uint8_t jf = 0) { code.push_back({op, jt, jf, k}); }
    void load_nr() { add(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)); }
    void load_arg(int i) { add(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args) + 8 * i); }  // low half
    void ret(uint32_t action) { add(BPF_RET | BPF_K, action); }
    void allow(long nr) {
        add(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, 1);
        ret(SECCOMP_RET_ALLOW);
    }
    void answer(long nr, int error) {  // refused with an error code: callers that cope with it
        add(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, 1);
        ret(SECCOMP_RET_ERRNO | uint32_t(error));
    }
    // nr is allowed where its argument `arg` is one of `values` (with `set`: has a bit of values[0]).
    void allow_if(long nr, int arg, std::vector<uint32_t> values, bool set = false) {
        add(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, uint8_t(values.size() + 3));
        load_arg(arg);
        for (size_t i = 0; i < values.size(); ++i)
            add(BPF_JMP | (set ? BPF_JSET : BPF_JEQ) | BPF_K, values[i], uint8_t(values.size() - i), 0);
        ret(SECCOMP_RET_TRAP);
        ret(SECCOMP_RET_ALLOW);  // (every path of the block returns: A is nr again after a skip)
    }
    void allow_unless(long nr, int arg, uint32_t value) {  // nr is allowed but where `arg` is value
        add(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, 4);
        load_arg(arg);
        add(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1);
        ret(SECCOMP_RET_TRAP);
        ret(SECCOMP_RET_ALLOW);
    }
};

bool install_filter() {
    Filter f;
    f.add(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
    f.add(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    f.ret(SECCOMP_RET_KILL_PROCESS);
    f.load_nr();
    f.add(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1);  // the x32 ABI's numbers
    f.ret(SECCOMP_RET_KILL_PROCESS);
    // memory, threads, time, the process's own signals, its descriptors
    for (long nr : {SYS_read, SYS_write, SYS_readv, SYS_writev, SYS_pread64, SYS_close, SYS_fstat, SYS_newfstatat,
                    SYS_mmap, SYS_munmap, SYS_mprotect, SYS_madvise, SYS_mremap, SYS_brk, SYS_futex,
                    SYS_set_robust_list, SYS_rseq, SYS_sched_yield, SYS_sched_getaffinity, SYS_getpid, SYS_gettid,
                    SYS_clock_gettime, SYS_clock_getres, SYS_gettimeofday, SYS_nanosleep, SYS_clock_nanosleep,
                    SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_sigaltstack, SYS_restart_syscall, SYS_getrandom,
                    SYS_exit, SYS_exit_group, SYS_sendto, SYS_sendmsg, SYS_recvfrom, SYS_recvmsg})
        f.allow(nr);
    f.allow_if(SYS_clone, 0, {CLONE_THREAD}, true);  // a thread of this process, never a new process
    f.allow_unless(SYS_rt_sigaction, 0, SIGSYS);  // any handler but the one that stops forbidden calls
    f.allow_if(SYS_tgkill, 0, {uint32_t(getpid())});  // abort() signals its own thread
    f.allow_if(SYS_fcntl, 1, {F_GETFD, F_SETFD, F_GETFL, F_DUPFD_CLOEXEC});  // not F_SETOWN (SIGIO to another)
    f.answer(SYS_clone3, ENOSYS);  // glibc then creates threads with clone, whose flags the filter reads
    f.answer(SYS_ioctl, ENOTTY);   // stdio asks whether stdout is a terminal
    f.answer(SYS_lseek, ESPIPE);
    f.ret(SECCOMP_RET_TRAP);
    sock_fprog program{uint16_t(f.code.size()), f.code.data()};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

// --- requests ------------------------------------------------------------------------------------

using LaunchFn = int (*)(void (*)(void**), void**, const char*, const unsigned*, const unsigned*, const unsigned*,
                         size_t, int, int, int, char*, size_t);
using RegisterFn = uintptr_t (*)(uintptr_t, size_t, size_t);
using UnregisterFn = void (*)(uintptr_t);
using TraceRowsFn = size_t (*)(void*, size_t);
LaunchFn g_launch;
RegisterFn g_register;
UnregisterFn g_unregister;
TraceRowsFn g_trace_rows;

void map_regions(const char* body, size_t size, uint32_t count, const int* fds, int nfds) {
    std::string problem;
    for (uint32_t i = 0; i < count; ++i) {
        Region region;
        if (size < (i + 1) * sizeof region || int(i) >= nfds) {
            problem = "a MAP request without its descriptors";
            break;
        }
        memcpy(&region, body + i * sizeof region, sizeof region);
        void* at = mmap(reinterpret_cast<void*>(region.map), region.map_bytes, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_FIXED_NOREPLACE, fds[i], 0);
        if (at != reinterpret_cast<void*>(region.map)) {
            if (at != MAP_FAILED) munmap(at, region.map_bytes);
            problem = "device memory at 0x" + std::to_string(region.map) + " could not be mapped: " + strerror(errno);
            break;
        }
        g_register(region.map, region.map_bytes, region.bytes_or_data);
    }
    for (int i = 0; i < nfds; ++i) close(fds[i]);
    problem.empty() ? reply(OK) : reply(FAILED, problem);
}

void unmap_regions(const char* body, size_t size, uint32_t count) {
    for (uint32_t i = 0; i < count && (i + 1) * sizeof(Region) <= size; ++i) {
        Region region;
        memcpy(&region, body + i * sizeof region, sizeof region);
        g_unregister(region.bytes_or_data);
        munmap(reinterpret_cast<void*>(region.map), region.map_bytes);
    }
    reply(OK);
}

void load(const char* body, size_t size, uint32_t count, const int* fds, int nfds) {
    if (nfds != 1) return reply(FAILED, "a LOAD request without its library");
    // unique per load: dlopen takes a path it has seen for the library it loaded then
    static int loads = 0;
    const std::string path = "/proc/self/fd/" + std::to_string(fds[0]) + "/" + std::to_string(++loads);
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    close(fds[0]);
    if (!library) return reply(FAILED, std::string("the kernel library could not be loaded: ") + dlerror());
    std::string out;
    const std::string names(body, size);
    size_t start = 0;
    for (uint32_t i = 0; i < count && start <= names.size(); ++i) {
        const std::string name = names.substr(start, names.find('\0', start) - start);
        start += name.size() + 1;
        Symbol symbol{reinterpret_cast<uint64_t>(dlsym(library, ("__emu_entry_" + name).c_str())), 0, {1, 1, 1}};
        if (auto* bounds = static_cast<const int*>(dlsym(library, ("__emu_bounds_" + name).c_str())))
            symbol.bounds = *bounds;
        if (auto* cluster = static_cast<const unsigned*>(dlsym(library, ("__emu_cluster_" + name).c_str())))
            memcpy(symbol.cluster, cluster, sizeof symbol.cluster);
        out.append(reinterpret_cast<const char*>(&symbol), sizeof symbol);
    }
    reply(OK, out);
}

void launch(const char* body, size_t size, uint32_t count) {
    Launch l;
    if (size < sizeof l + 8 * size_t(count)) return reply(FAILED, "a LAUNCH request cut short");
    memcpy(&l, body, sizeof l);
    std::vector<uint64_t> slots(count + 1);
    memcpy(slots.data(), body + sizeof l, 8 * size_t(count));
    std::vector<void*> args(count + 1);
    for (uint32_t i = 0; i < count; ++i) args[i] = &slots[i];
    const std::string name(body + sizeof l + 8 * size_t(count), size - sizeof l - 8 * size_t(count));
    char error[4096] = "";
    const int rc = g_launch(reinterpret_cast<void (*)(void**)>(l.entry), args.data(), name.c_str(), l.grid, l.block,
                            l.cluster, l.shared_bytes, l.workers, l.resident, l.instrument, error, sizeof error);
    rc == 0 ? reply(OK) : reply(FAILED, error);
}

// TRACE_ROWS: the last traced launch's rows (trace.h's Row, `count` bytes each) from the index the body
// holds (8 bytes): their total (8 bytes), then as many as one message holds.
void trace_rows(const char* body, size_t size, uint32_t row_bytes) {
    uint64_t start = 0;
    if (size < sizeof start || row_bytes == 0) return reply(FAILED, "a TRACE_ROWS request cut short");
    memcpy(&start, body, sizeof start);
    const uint64_t total = g_trace_rows(nullptr, 0);
    std::vector<char> all(total * row_bytes);
    g_trace_rows(all.data(), total);
    const uint64_t fit = (kMaxMessage - sizeof(Reply) - sizeof total) / row_bytes;
    const uint64_t first = std::min(start, total), count = std::min(total - first, fit);
    std::string out(reinterpret_cast<const char*>(&total), sizeof total);
    out.append(all.data() + first * row_bytes, count * row_bytes);
    reply(OK, out);
}

}  // namespace

// device_process SOCKET_FD RUNTIME_LIBRARY [LIBRARY...]: the libraries are loaded before the filter
int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s SOCKET_FD RUNTIME_LIBRARY [LIBRARY...] (started by device_process.py)\n",
                argv[0]);
        return 2;
    }
    g_socket = atoi(argv[1]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the caller
    // glibc trims a worker thread's heap after large frees, and reads /proc/sys/vm/overcommit_memory
    // the first time it does: a file the filter refuses. Memory a launch frees stays the process's.
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    // Past 8 threads, glibc sizes its arena limit from the online CPUs, read from /sys (a file the
    // filter refuses) the first time a further thread allocates: set here, as glibc would (8 a core).
    mallopt(M_ARENA_MAX, int(8 * std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))));
    signal(SIGXFSZ, SIG_IGN);          // a printf past the file-size limit fails, as in the caller
    void* runtime = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
    if (!runtime) {
        reply(FAILED, std::string("the emulator's runtime could not be loaded: ") + dlerror());
        return 1;
    }
    for (int i = 3; i < argc; ++i) {  // what kernel libraries link against beyond the runtime's own
        if (!dlopen(argv[i], RTLD_NOW | RTLD_LOCAL)) {
            reply(FAILED, std::string("a library kernels need could not be loaded: ") + dlerror());
            return 1;
        }
    }
    g_launch = reinterpret_cast<LaunchFn>(dlsym(runtime, "emu_launch"));
    g_register = reinterpret_cast<RegisterFn>(dlsym(runtime, "emu_register"));
    g_unregister = reinterpret_cast<UnregisterFn>(dlsym(runtime, "emu_unregister"));
    g_trace_rows = reinterpret_cast<TraceRowsFn>(dlsym(runtime, "emu_trace_rows"));
    struct sigaction action {};
    action.sa_sigaction = on_sigsys;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    if (!g_launch || !g_register || !g_unregister || !g_trace_rows || sigaction(SIGSYS, &action, nullptr) != 0 || !install_filter()) {
        reply(FAILED, std::string("the system call filter could not be installed: ") + strerror(errno));
        return 1;
    }
    reply(OK);  // ready
    std::vector<char> buffer(kMaxMessage);
    for (;;) {
        char control[CMSG_SPACE(kMaxFds * sizeof(int))];
        iovec io{buffer.data(), buffer.size()};
        msghdr message{};
        message.msg_iov = &io;
        message.msg_iovlen = 1;
        message.msg_control = control;
        message.msg_controllen = sizeof control;
        const ssize_t got = recvmsg(g_socket, &message, MSG_CMSG_CLOEXEC);
        if (got <= 0) return 0;  // the caller is gone
        int fds[kMaxFds];
        int nfds = 0;
        for (cmsghdr* c = CMSG_FIRSTHDR(&message); c; c = CMSG_NXTHDR(&message, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                const int n = int((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                for (int i = 0; i < n && nfds < kMaxFds; ++i) memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            }
        }
        Request request;
        if (size_t(got) < sizeof request) return 1;
        memcpy(&request, buffer.data(), sizeof request);
        g_serial = request.serial;
        const char* body = buffer.data() + sizeof request;
        const size_t size = size_t(got) - sizeof request;
        switch (request.kind) {
            case MAP: map_regions(body, size, request.count, fds, nfds); break;
            case UNMAP: unmap_regions(body, size, request.count); break;
            case LOAD: load(body, size, request.count, fds, nfds); break;
            case LAUNCH: launch(body, size, request.count); break;
            case TRACE_ROWS: trace_rows(body, size, request.count); break;
            default: reply(FAILED, "an unknown request");
        }
    }
}
