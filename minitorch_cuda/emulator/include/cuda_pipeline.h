// cuda_pipeline.h for the CPU emulator: what it declares is not modelled, so including it is refused.
#error "the CPU emulator does not model asynchronous copies (cp.async, __pipeline_memcpy_async); a kernel that uses them needs a GPU"
