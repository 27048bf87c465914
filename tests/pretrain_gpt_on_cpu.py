"""Run Megatron-LM's own pretrain_gpt.py on CPU (one process, gloo): how tests/test_megatron_lm.py proves that
launch.json launches Megatron-LM (tag core_v0.16.1) on both datasets of a build.

usage: python tests/pretrain_gpt_on_cpu.py MEGATRON_LM_DIR [--args-only] -- <pretrain_gpt.py args...>

With --args-only it runs only Megatron-LM's parse_args and validate_args on the line (a curriculum phase of
64K-token rows is out of reach on CPU, its command line is not) and prints what they made of it as JSON.

Nothing of Megatron-LM is copied: this patches torch and megatron at runtime where they assume CUDA (each patch
says which assumption it removes), then runs MEGATRON_LM_DIR/pretrain_gpt.py as __main__. What core_v0.16.1
needs besides these patches on a CPU, as flags: --transformer-impl local (no TransformerEngine),
--no-gradient-accumulation-fusion and --no-rope-fusion (fused CUDA kernels), --no-persist-layer-norm,
--distributed-backend gloo; and --data-cache-path, else Megatron writes its index cache beside the .bin/.idx.
Run it in its own process: the patches are global.
"""
import contextlib
import functools
import glob
import importlib.metadata
import os
import runpy
import socket
import sys
import types

ARGS_ONLY = len(sys.argv) > 2 and sys.argv[2] == "--args-only"
if ARGS_ONLY:
    del sys.argv[2]
if len(sys.argv) < 3 or sys.argv[2] != "--":
    sys.exit(__doc__)
MLM = os.path.abspath(sys.argv[1])

# Megatron's jit_fuser is torch.compile; on CPU inductor would build C++ kernels (slow, needs
# a compiler) for the fused bias-gelu/dropout-add. Run them eagerly unless told otherwise.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

# The Megatron-LM tree (megatron/training, gpt_builders, ...) must win over the installed
# megatron-core wheel; the tree's megatron/core is the same code, minus the compiled
# dataset helpers, so the wheel's datasets dir is appended to find helpers_cpp*.so.
_so = [p for d in sys.path for p in glob.glob(os.path.join(d, "megatron/core/datasets/helpers_cpp*.so"))]
assert _so, "megatron-core (with its compiled helpers_cpp) is not installed"
sys.path.insert(0, MLM)
import megatron.core.datasets
import torch

megatron.core.datasets.__path__.append(os.path.dirname(_so[0]))
assert megatron.core.__version__ == importlib.metadata.version("megatron-core"), "tree/wheel mismatch"

# megatron.training.initialize imports batch_invariant_kernels, which does a bare
# `import triton` (GPU-only). Give it a stub for that one import only, so that the
# `try: import triton` guards elsewhere (and torch) still see triton as absent.
import megatron.core.transformer.custom_layers  # noqa: E402
import megatron.core.utils  # noqa: E402,F401

_tl = types.ModuleType("triton.language")
_tl.__getattr__ = lambda name: object  # tl.constexpr annotations etc.
_triton = types.ModuleType("triton")
_triton.jit, _triton.language = (lambda fn=None, **kw: fn or (lambda f: f)), _tl
sys.modules.update({"triton": _triton, "triton.language": _tl})
import megatron.core.transformer.custom_layers.batch_invariant_kernels

del sys.modules["triton"], sys.modules["triton.language"]

import megatron.core.datasets.utils as mds_utils
import megatron.core.optimizer.optimizer as mopt
import megatron.training.initialize as minit
import megatron.training.training as mtrain

# initialize_megatron asserts torch.cuda.is_available() unless allow_no_cuda=True.
mtrain.initialize_megatron = functools.partial(mtrain.initialize_megatron, allow_no_cuda=True)
# Rank 0 runs `make` to build helpers_cpp (needs pybind11); the wheel's prebuilt .so is used.
mds_utils.compile_helpers = lambda: None
# fused_kernels.load probes nvcc under CUDA_HOME (None here) to build CUDA extensions.
minit.fused_kernels.load = lambda args: None
# clip_grad_by_total_norm_fp32 asserts grads are torch.cuda.FloatTensor and uses a
# multi-tensor-apply kernel; scale the grads in place the same way instead.
def _clip_grads(parameters, max_norm, total_norm, use_decoupled_grad=False):
    coeff = max_norm / (total_norm + 1.0e-6)
    for p in parameters if coeff < 1.0 else ():
        g = p.decoupled_grad if use_decoupled_grad else p.grad
        if g is not None:
            g.detach().mul_(coeff)
mopt.clip_grad_by_total_norm_fp32 = _clip_grads

cuda = torch.cuda
# _initialize_distributed only builds the model-parallel groups when device_count() > 0.
cuda.device_count = lambda: 1
cuda.set_device = lambda device: None
# Megatron allocates with device=torch.cuda.current_device(); make that the CPU.
cuda.current_device = lambda: "cpu"
# Timers and barriers call torch.cuda.synchronize(); there is nothing to wait for.
cuda.synchronize = lambda *a, **k: None
# The tensor-parallel RNG tracker reads the CUDA generator state; give it an empty one
# (its seeding/restoring is queued by torch's lazy CUDA init and never runs, so weights
# and dropout draw from the CPU generator, seeded by --seed).
cuda.get_rng_state = cuda.random.get_rng_state = lambda *a, **k: torch.empty(0, dtype=torch.uint8)


class _NoOp:  # a CUDA stream whose every method does nothing
    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        return lambda *a, **k: None


# get_model() builds DDP inside a side `torch.cuda.stream(torch.cuda.Stream())`.
cuda.Stream = _NoOp
cuda.current_stream = lambda *a, **k: _NoOp()
cuda.stream = lambda *a, **k: contextlib.nullcontext()


# Remaining device="cuda" allocations and tensor.cuda() calls (get_batch, loss reductions).
class _CudaToCpu(torch.overrides.TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        d = kwargs.get("device")
        if isinstance(d, (str, torch.device)) and torch.device(d).type == "cuda":
            kwargs["device"] = "cpu"
        return func(*args, **kwargs)


_CudaToCpu().__enter__()

# Single-process "distributed" run on a free local port.
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))

sys.argv = [os.path.join(MLM, "pretrain_gpt.py")] + sys.argv[3:]
if ARGS_ONLY:
    import json

    from megatron.training.arguments import parse_args, validate_args

    parsed = parse_args()
    validate_args(parsed)
    print(json.dumps({k: getattr(parsed, k) for k in ("seq_length", "max_position_embeddings", "train_data_path",
                                                      "valid_data_path", "reset_position_ids",
                                                      "reset_attention_mask", "eod_mask_loss")}))
    sys.exit(0)
runpy.run_path(sys.argv[0], run_name="__main__")
