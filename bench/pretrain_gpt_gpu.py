"""Run Megatron-LM's own pretrain_gpt.py (tag core_v0.16.1) on GPUs, with the megatron-core wheel's compiled
dataset helpers: how bench/gpu_harness.sh shows that a build's launch.json launches Megatron-LM on an H200.

usage: torchrun --nproc-per-node N bench/pretrain_gpt_gpu.py MEGATRON_LM_DIR -- <pretrain_gpt.py args...>

Nothing of Megatron-LM is copied or changed. Two of its start-up steps build C++/CUDA code, which the GPU
machine cannot (no pybind11, no network) and need not do, so they are skipped here:
- rank 0 runs `make` to build the dataset helpers: the megatron-core wheel of the same release ships them
  prebuilt, and its datasets directory is added to the tree's package path to find them;
- `fused_kernels.load` probes nvcc for the legacy fused softmax, which the flags turn off
  (--no-masked-softmax-fusion; attention is megatron-core's local DotProductAttention).
Everything else is the tree's pretrain_gpt.py as __main__, flags as given.
"""
import glob
import importlib.metadata
import os
import runpy
import sys

if len(sys.argv) < 3 or sys.argv[2] != "--":
    sys.exit(__doc__)
MLM = os.path.abspath(sys.argv[1])
_so = [p for d in sys.path for p in glob.glob(os.path.join(d, "megatron/core/datasets/helpers_cpp*.so"))]
assert _so, "megatron-core (with its compiled helpers_cpp) is not installed"
sys.path.insert(0, MLM)  # the tree (megatron/training, gpt_builders, ...) before the wheel
import megatron.core.datasets  # noqa: E402

megatron.core.datasets.__path__.append(os.path.dirname(_so[0]))
assert megatron.core.__version__ == importlib.metadata.version("megatron-core"), "tree/wheel mismatch"
import megatron.core.datasets.utils as mds_utils  # noqa: E402
import megatron.training.initialize as minit  # noqa: E402

mds_utils.compile_helpers = lambda: None
minit.fused_kernels.load = lambda args: None

sys.argv = [os.path.join(MLM, "pretrain_gpt.py")] + sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
