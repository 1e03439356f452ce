"""Tile programming evaluated against CUDA C (chapter 20).

The same transform kernels written as CUDA C through PyCUDA, as Triton and
cuTile Python tile kernels, and as CuPy elementwise kernels; the benchmark
that compares them on every row of the evaluation (``python -m
minitorch_cuda.tile_eval``). Modules:

    cases        the benchmark set and its numpy references (CPU)
    interop      zero-copy TileArray (CUDA array interface, Triton) and HostArray (interpreter)
    transform.cu, cuda_c    the CUDA C kernels and their compilation
    triton_kernels, cutile_kernels, cupy_kernels    the other models
    availability which models can run here, and why not
    compare      bitwise / ULP differences
    timing, measure, rows, bench    the measurements (GPU)
    codegen      PTX/SASS evidence; sources: kernel text and lines; report: tables from the JSON
    diagnostics  the same mistake in every model

Nothing here imports PyCUDA, Triton, cuTile or CuPy until it is used.
"""
