"""What the chapters show besides prose, computed from the package and the recorded results.

    excerpts     code read out of the package's files (Python by ``ast``, CUDA to its closing brace)
    tables       recorded results as text tables, and the display names of the kernels
    figures      plots of recorded measurements: the ladder, profiles, GFLOP/s, rooflines
    diagrams     schematics drawn by code: tiling, coalescing, the shuffle tree, ...
    ncu_records  the Nsight Compute records as the chapters show them

Nothing here needs a GPU. Import the modules themselves
(``from minitorch_cuda.book import excerpts``): this package imports nothing, so
reading code does not load matplotlib.
"""
