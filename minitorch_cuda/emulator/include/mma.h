// mma.h for the CPU emulator: what it declares is not modelled, so including it is refused.
#error "the CPU emulator does not model tensor-core fragments (nvcuda::wmma); a kernel that uses them needs a GPU"
