"""The CUDA backend: runtime (compile, launch, copy), memory, kernel registry, ops."""
