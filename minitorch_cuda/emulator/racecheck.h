// racecheck.h: what runtime.cpp and racecheck.cpp tell each other (race checking, racecheck.cpp).
#pragma once
#include <stddef.h>

#include <string>

#include "cuda_emu.h"

namespace emu {

// runtime.cpp's, for racecheck.cpp
[[noreturn]] void fail_in_kernel(const std::string& message);  // stops the launch, as a fault does
std::string describe_device_address(uintptr_t address);         // "" outside every device buffer

// racecheck.cpp's: the runtime calls them in a launch with race checking only, launch_begin and
// launch_end from the host thread, the others from the worker that runs the block (grid_opened
// while every block of the launch waits at the grid barrier).
namespace racecheck {
void launch_begin(dim3 grid, dim3 block, bool alone);  // alone: its blocks run one at a time
void launch_end();
void block_begin(Block& b, long long index, unsigned char* dynamic_shared, size_t shared_bytes);
void block_abandoned(Block& b);                 // a fault, a race or a stop abandoned the block
bool busy(Block& b);                            // its thread is in racecheck.cpp's locked code: a stop waits
void barrier(Block& b);                         // the block's __syncthreads opened
void warp_sync(Block& b, int warp, unsigned lanes);  // a warp operation completed for these lanes
void grid_opened();                             // a grid barrier (or cluster.sync()) opened
void grid_passed(Block& b);                     // and this block goes on past it
}  // namespace racecheck

}  // namespace emu
