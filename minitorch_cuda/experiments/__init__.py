"""Experiments whose JSON the book cites, one module each, run on a GPU machine as
``python -m minitorch_cuda.experiments.<name>`` (``minitorch_cuda/book/campaign.py`` has the
command that makes each record the book reads):

- ``ncu``: Nsight Compute counters and SASS behind chapters 7-21's causes (ncu_<topic>.json);
- ``torch_profile``: chapter 5's PyTorch profile of the step, eager and graphed (torch_profile.json);
- ``step_split``: chapter 16's MNIST steps split into host and GPU time (step_split.json);
- ``tf32_variants``: chapter 19's mma.sync kernel compiled at several tile shapes (ch19_async_variants.json);
- ``tf32_wgmma``: chapter 19's warpgroup-MMA kernels (wgmma.cu, the TMA-fed wgmma_tma.cu) against
  mma.sync and cuBLAS (tf32_wgmma.json);
- ``tma_ablation``: chapter 19's TMA kernel with one feature taken away at a time, beside cuBLAS
  TF32 (ch19_tma_ablation.json);
- ``latency_floor``: chapter 21's floors, stages 10, 11 and 13 beside PyTorch's peers, and the
  persistent kernel's phases (ch21_floor.json).
"""
