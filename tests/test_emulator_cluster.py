"""Thread block clusters (``__cluster_dims__``, cooperative groups' ``this_cluster``) on the CPU
emulator (no GPU needed) and on a Hopper GPU (marked ``gpu``).

The emulator runs a cluster launch cluster by cluster, the blocks of each at once, in turns,
each until it waits at ``cluster.sync()`` or exits (the block that arrived last runs on first).
So the exchange below gives its answer, and the two mistakes a GPU lets through by chance are
errors every run: reading another block's shared memory before it is there (a missing first
sync) and after its block has exited (a missing last one).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from minitorch_cuda.cuda.kernel_table import KERNEL_DIR

# Every block stores its values in its shared memory; after the sync, each reads those of the
# next rank in its cluster; the last sync keeps every block's shared memory until all have read.
EXCHANGE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void __cluster_dims__(CX, CY, 1) exchange(float* out, int first_sync, int last_sync) {
    __shared__ float mine[64];
    extern __shared__ float spare[];
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank(), t = threadIdx.x;
    const unsigned block = blockIdx.x + gridDim.x * blockIdx.y;
    mine[t] = 1000.0f * block + t;
    spare[t] = -mine[t];
    if (first_sync) cluster.sync();
    const unsigned next = (rank + 1) % cluster.num_blocks();
    out[block * blockDim.x + t] = *cluster.map_shared_rank(&mine[t], next) + *cluster.map_shared_rank(&spare[t], next)
                                  + 0.5f * *cluster.map_shared_rank(&mine[t], next);
    if (t == 0) out[gridDim.x * gridDim.y * blockDim.x + block] = cluster.num_blocks() * 100.0f + rank;
    if (last_sync) cluster.sync();
}
"""
THREADS = 64


def expected(grid: tuple[int, int], cluster: tuple[int, int]) -> np.ndarray:
    """Each block's values as its cluster's next rank stored them (0.5 x its ``mine``), then
    each block's 100 x cluster size + rank."""
    (gx, gy), (cx, cy) = grid, cluster
    values, ranks = np.zeros((gx * gy, THREADS)), np.zeros(gx * gy)
    for y in range(gy):
        for x in range(gx):
            rank = x % cx + cx * (y % cy)
            nxt = (rank + 1) % (cx * cy)
            other = (x - x % cx + nxt % cx) + gx * (y - y % cy + nxt // cx)
            values[x + gx * y] = 0.5 * (1000.0 * other + np.arange(THREADS))
            ranks[x + gx * y] = 100 * cx * cy + rank
    return np.concatenate([values.ravel(), ranks])


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("the emulator builds kernels with g++")
    from minitorch_cuda.emulator import compiler, driver

    cache = str(tmp_path_factory.getbasetemp() / "emulator-cache")

    def function(source: str, name: str, signature: str, options=()):
        module = compiler.SourceModule(
            source, no_extern_c=True, cache_dir=cache, include_dirs=[str(KERNEL_DIR)], options=list(options)
        )
        return module.get_function(name).prepare(signature)

    return driver, function


def run_exchange(driver, function, grid, cluster, first_sync=1, last_sync=1):
    kernel = function(EXCHANGE, "exchange", "Pii", [f"-DCX={cluster[0]}", f"-DCY={cluster[1]}"])
    n = grid[0] * grid[1]
    out = driver.to_device(np.full(n * (THREADS + 1), np.nan, np.float32))
    kernel.prepared_call((*grid, 1), (THREADS, 1, 1), out, first_sync, last_sync, shared_size=THREADS * 4)
    got = np.empty(n * (THREADS + 1), np.float32)
    driver.memcpy_dtoh(got, out)
    return got


@pytest.mark.parametrize(
    ("grid", "cluster"), [((4, 1), (2, 1)), ((6, 2), (3, 1)), ((4, 4), (2, 2)), ((8, 1), (8, 1)), ((3, 2), (1, 1))]
)
def test_blocks_read_the_next_ranks_shared_memory(emu, grid, cluster):
    got = run_exchange(*emu, grid, cluster)
    np.testing.assert_array_equal(got, expected(grid, cluster).astype(np.float32))


def test_reading_a_rank_before_its_stores_is_an_error(emu):
    from minitorch_cuda.emulator.errors import LaunchError

    with pytest.raises(LaunchError, match=r"the block of rank 1 has not reached this_cluster\(\) yet"):
        run_exchange(*emu, (4, 1), (2, 1), first_sync=0)


def test_reading_a_rank_that_has_exited_is_an_error(emu):
    from minitorch_cuda.emulator.errors import LaunchError

    with pytest.raises(LaunchError, match=r"block \(0, 0, 0\).*the block of rank 1 has exited"):
        run_exchange(*emu, (4, 1), (2, 1), last_sync=0)


def test_a_block_that_leaves_before_the_sync_is_an_error(emu):
    from minitorch_cuda.emulator.errors import LaunchError

    driver, function = emu
    source = (
        "#include <cooperative_groups.h>\n"
        'extern "C" __global__ void __cluster_dims__(2, 1, 1) leaves(float* out) {\n'
        "    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();\n"
        "    if (cluster.block_rank() == 1) return;\n"
        "    cluster.sync();\n"
        "}\n"
    )
    out = driver.to_device(np.zeros(4, np.float32))
    with pytest.raises(LaunchError, match=r"cluster.sync\(\) divergence: 1 of 2 blocks of the cluster wait"):
        function(source, "leaves", "P").prepared_call((2, 1, 1), (32, 1, 1), out)


def test_a_grid_that_is_no_whole_number_of_clusters_is_refused(emu):
    from minitorch_cuda.emulator.errors import LaunchError

    with pytest.raises(LaunchError, match=r"invalid cluster size \(grid \(3, 1, 1\) in clusters of \(2, 1, 1\)"):
        run_exchange(*emu, (3, 1), (2, 1))


def test_other_cooperative_groups_are_refused_by_name(emu):
    from minitorch_cuda.emulator.errors import CompileError

    source = (
        "#include <cooperative_groups.h>\n"
        "namespace cg = cooperative_groups;\n"
        'extern "C" __global__ void whole_grid(float* out) { cg::this_grid().sync(); }\n'
    )
    with pytest.raises(CompileError, match="does not model cooperative groups other than clusters"):
        emu[1](source, "whole_grid", "P")


@pytest.mark.gpu
@pytest.mark.parametrize(("grid", "cluster"), [((4, 1), (2, 1)), ((6, 2), (3, 1)), ((4, 4), (2, 2))])
def test_the_same_exchange_on_a_hopper_gpu(grid, cluster):
    """The emulator's answer is the GPU's: the same kernel through PyCUDA on compute capability 9.0."""
    import pycuda.driver as drv
    from pycuda.compiler import SourceModule

    from minitorch_cuda.cuda import probe, runtime

    if not probe.clusters_fit(runtime.arch()):
        pytest.skip(f"thread block clusters need compute capability 9.0; this GPU is {runtime.arch()}")
    module = SourceModule(
        EXCHANGE, no_extern_c=True, arch=runtime.arch(), options=[f"-DCX={cluster[0]}", f"-DCY={cluster[1]}"]
    )
    kernel = module.get_function("exchange").prepare("Pii")
    n = grid[0] * grid[1]
    out = drv.to_device(np.full(n * (THREADS + 1), np.nan, np.float32))
    kernel.prepared_call((*grid, 1), (THREADS, 1, 1), out, 1, 1, shared_size=THREADS * 4)
    np.testing.assert_array_equal(drv.from_device(out, (n * (THREADS + 1),), np.float32), expected(grid, cluster))
