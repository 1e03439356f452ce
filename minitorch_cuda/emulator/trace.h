// trace.h: what runtime.cpp, racecheck.cpp and trace.cpp tell each other (access tracing, trace.cpp).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "cuda_emu.h"

namespace emu {

// runtime.cpp's, for trace.cpp: the device buffer that holds `address` ([*start, *end)), or false
bool device_buffer(uintptr_t address, uintptr_t* start, uintptr_t* end);

namespace trace {

// One row of a traced launch's result: one instruction (code address) and memory space. Read by
// driver.py through ctypes (TRACE_ROW there), so its layout is theirs too.
struct Row {
    uint64_t pc;        // the code address's offset in its library (the access's call), for the line table
    uint32_t kind;      // LOAD, STORE or ATOMIC
    uint32_t space;     // GLOBAL or SHARED
    uint32_t bytes;     // of each lane's access
    uint32_t sample_lanes;     // the lanes of the sample request (bit i: lane i)
    uint64_t requests;  // warp-level executions (ncu: l1tex__t_requests_... for global)
    uint64_t sectors;   // global: 32-byte sectors summed over requests (l1tex__t_sectors_...)
    uint64_t wavefronts;  // shared: l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld/st
    uint64_t ideal;       // shared: the wavefronts with no bank conflict; wavefronts - ideal = conflicts
    uint64_t lanes;       // lane accesses summed over requests
    uint64_t sample_region;   // the sample's region: a device buffer's or a shared variable's start
    uint64_t sample_block, sample_warp;  // the sample: the first request of the lowest warp of the first block
    uint64_t sample[32];      // its lanes' byte offsets in their region
};
enum Kind { LOAD = 0, STORE = 1, ATOMIC = 2 };
enum Space { GLOBAL = 0, SHARED = 1 };

extern bool g_on;  // a traced launch is running: racecheck.cpp's entry points call access()

void launch_begin();
void launch_end();  // the rows are kept for emu_trace_rows
void block_begin(Block& b, unsigned char* dynamic_shared, size_t shared_bytes);
void block_end(Block& b);  // its requests are counted here
void access(uintptr_t address, size_t size, int kind, uintptr_t pc);
void shared_variable(uintptr_t address, size_t bytes);  // a static __shared__ variable of the running block

}  // namespace trace
}  // namespace emu
