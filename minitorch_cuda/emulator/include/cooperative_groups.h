// cooperative_groups.h for the CPU emulator: thread block clusters (this_cluster) only; compiler.py
// refuses the other groups by name. The runtime runs a cluster's blocks at once, each on a worker
// of its own, taking turns as the blocks of a grid barrier's launch do: cluster.sync() is that
// barrier over the cluster, and map_shared_rank finds the same variable in another block's shared
// memory. A block's static __shared__ variables are thread_local (one copy per worker), at the same
// offset from any other thread_local of this library in every worker: `anchor` is that other.
#pragma once

namespace cooperative_groups {
namespace emu_detail {
static thread_local char anchor;
}

class cluster_group {
  public:
    explicit cluster_group(uint3 dims) : dims_(dims) {}
    unsigned num_blocks() const { return dims_.x * dims_.y * dims_.z; }
    dim3 dim_blocks() const { return dim3(dims_.x, dims_.y, dims_.z); }
    dim3 block_index() const { return dim3(blockIdx.x % dims_.x, blockIdx.y % dims_.y, blockIdx.z % dims_.z); }
    unsigned block_rank() const {
        const dim3 i = block_index();
        return i.x + dims_.x * (i.y + dims_.y * i.z);
    }
    void sync(EMU_SITE) const { __emu_cluster_sync(__file, __line); }
    template <class T>
    T* map_shared_rank(T* address, unsigned rank, EMU_SITE) const {
        return static_cast<T*>(__emu_cluster_map(address, rank, &emu_detail::anchor, __file, __line));
    }

  private:
    uint3 dims_;
};

inline cluster_group this_cluster() { return cluster_group(__emu_cluster_enter(&emu_detail::anchor)); }
}  // namespace cooperative_groups
