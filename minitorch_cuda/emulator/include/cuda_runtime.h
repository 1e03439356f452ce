// cuda_runtime.h for the CPU emulator: everything lives in the force-included cuda_emu.h.
