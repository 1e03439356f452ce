"""Experiments whose JSON the book cites, one module each, run on a GPU machine as
``python -m minitorch_cuda.experiments.<name>`` (``.ci/gpu_check.sh`` and
``.ci/refresh_results.sh`` name them):

- ``ncu``: Nsight Compute counters and SASS behind chapters 7-19's causes (ncu_<topic>.json);
- ``step_split``: chapter 16's MNIST steps split into host and GPU time (step_split.json);
- ``tf32_variants``: chapter 19's mma.sync kernel compiled at several tile shapes (ch19_async_variants.json);
- ``tf32_wgmma``: chapter 19's warpgroup-MMA kernel against mma.sync and cuBLAS (tf32_wgmma.json).
"""
