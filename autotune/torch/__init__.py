"""autotune for PyTorch: the ``autotune::gemm`` operator, and ``nn.Linear`` layers that run it.

``autotune.torch.gemm(a, b, c=None, alpha=1.0, beta=0.0)`` is ``alpha * a @ b + beta * c`` as a
PyTorch operator (``torch.ops.autotune.gemm``): autograd differentiates it, ``torch.compile``
traces it (``fullgraph=True`` included), and on a CUDA tensor it runs the tuned kernel the
runtime's table picks for its shape, on PyTorch's current stream, where it is predicted faster
than cuBLAS once the operator's host time is counted. Whatever no tuned kernel serves (a dtype the
table has no kernels for, a transposed ``b``, a CPU tensor, a shape the table leaves to cuBLAS, a
GEMM too short to gain from a kernel) runs on PyTorch's own matmul; :func:`explain` says which and
why. ``a`` may have leading batch dimensions (``... x k``).

:class:`Linear` is an ``nn.Linear`` whose weight is stored transposed (its ``weight`` is still
``out x in``, a view), so that ``x @ weight.T`` is a row-major product a tuned kernel serves (where no kernel can
repay the operator's host time it calls PyTorch's ``linear`` itself); :func:`use_autotune` turns every ``nn.Linear`` of a
model into one, in place.
"""

try:
    import torch  # noqa: F401
except ImportError as error:
    raise ImportError(f"autotune.torch needs PyTorch ({error}): pip install 'autotune[torch]'") from None

from autotune.torch.linear import Linear, use_autotune  # noqa: E402
from autotune.torch.ops import explain, gemm  # noqa: E402

__all__ = ["gemm", "explain", "Linear", "use_autotune"]
