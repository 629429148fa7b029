"""autotune for PyTorch: the ``autotune::gemm`` operator, and ``nn.Linear`` layers that run it.

``autotune.torch.gemm(a, b, c=None, alpha=1.0, beta=0.0)`` is ``alpha * a @ b + beta * c`` as a
PyTorch operator (``torch.ops.autotune.gemm``): autograd differentiates it, ``torch.compile``
traces it (``fullgraph=True`` included), and on a CUDA tensor it runs the tuned kernel the
runtime's table picks for its shape, on PyTorch's current stream, where it is predicted faster
than cuBLAS once the operator's host time is counted. Whatever no tuned kernel serves (a dtype the
table has no kernels for, a transposed ``b``, a CPU tensor, a shape the table leaves to cuBLAS, a
GEMM too short to gain from a kernel) runs on PyTorch's own matmul; :func:`explain` says which and
why. ``a`` may have leading batch dimensions (``... x k``).

:class:`Linear` is an ``nn.Linear`` (the same weight, ``out x in``, and state dict) whose ``x @ weight.T`` runs the
operator with ``weight.T`` as it is stored (layout "nt"), from the rows where a kernel can repay the operator's
host time (below them it calls PyTorch's ``linear`` itself); :func:`use_autotune` turns every ``nn.Linear`` of a
model into one, in place. Where a model's calls are captured in CUDA graphs (``torch.compile(...,
mode="reduce-overhead")``), ``cuda_graphs=True`` (to :func:`gemm`, :class:`Linear` or :func:`use_autotune`) has
the table pick by the kernels' times alone: a replay pays no host time per call.
"""

try:
    import torch  # noqa: F401
except ImportError as error:
    raise ImportError(f"autotune.torch needs PyTorch ({error}): pip install 'autotune[torch]'") from None

from autotune.torch.linear import Linear, use_autotune  # noqa: E402
from autotune.torch.ops import explain, gemm  # noqa: E402

__all__ = ["gemm", "explain", "Linear", "use_autotune"]
