"""Fused CPU kernels (``cpu_kernels.cpp``, ``additive_kernel.cpp``): the inference paths of ``cosine`` and
``euclidean``, and additive attention with its backward.

At short lengths the extra work of ``cosine`` and ``euclidean`` is memory traffic, not
arithmetic: the heads arrive as strided views of one projection, and eager
PyTorch normalises a view in three passes (a contiguous copy, a norm, a
rescale). :func:`unit_rows` reads each row once and writes the unit vector
once; :func:`row_sq_norms` reads ‖k‖² off the strided view without a copy.
At B=256, n=48, 4 heads of 32, one thread, measured quiet, this brings
``cosine`` from 1.15–1.19× to 1.10–1.13× of ``scaled_dot`` and ``euclidean``
from 1.12–1.16× to 1.10–1.13× (``attnbench bench short --eager``,
docs/cost.md). These two have no autograd, so the score functions use them only
where no gradient is needed (validation, test, inference: :func:`kernels_for`).

:func:`additive_attention` is ``softmax_j(wᵀtanh(a_i + b_j))·value`` fused, forward
and backward (:class:`FusedAdditiveAttention`), for float32 and float64: each query
row streams over its sequence's keys with vectorised tanh (the SLEEF routine
``torch.tanh`` uses), so nothing of size Lq×Lk×d_a is stored; the backward
recomputes tanh. It applies in training and inference (:func:`additive_kernels_for`).

The kernels are compiled on first use with :func:`torch.utils.cpp_extension.load`
(a C++ compiler and ninja; about a minute, once per machine and source version,
cached in :func:`build_directory`). They run on CPU tensors in plain eager execution
(not under ``torch.compile``, ``torch.jit.trace``, ``torch.func`` transforms or
FakeTensorMode); everywhere else, and when the build fails (one warning says
why) or ``ATTNBENCH_CPU_KERNELS=0`` is set, the eager formulas run. Both paths
compute the same formula; they differ by float32 rounding (tests/test_cpu_kernels.py,
tests/test_additive_kernel.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import sys
import warnings
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

try:
    import fcntl
except ImportError:  # not POSIX: no OS lock, and a stale torch lock is left for the user to delete
    fcntl = None

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("cpu_kernels.cpp")
# every file the build reads: the compiled sources, then the header additive_kernel.cpp includes
SOURCES = (SOURCE, SOURCE.with_name("additive_kernel.cpp"))
HEADERS = (SOURCE.with_name("additive_kernel_rows.h"),)
ENV_SWITCH = "ATTNBENCH_CPU_KERNELS"  # "0" turns the kernels off (the eager formulas run)


def build_directory() -> Path:
    """Where the extension is built and cached: ``$TORCH_EXTENSIONS_DIR`` (default: torch's
    ``~/.cache/torch_extensions``) / ``attnbench_cpu_kernels-py<major><minor>-torch<version>``, one folder per
    Python and torch version (a build is tied to both)."""
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return Path(root) / f"attnbench_cpu_kernels-{py}-torch{torch.__version__.replace('+', '_')}"


@contextlib.contextmanager
def _exclusive(folder: Path):
    """Hold an OS lock on ``folder`` (``fcntl.flock``; none where fcntl is missing) and clear a stale torch lock.

    torch's own build lock (``<folder>/lock``, a plain file) stays behind when a build is killed (SIGKILL, a
    batch system's time limit), and every later ``load`` would wait on it forever. Every attnbench process takes
    this flock before ``load``, and the OS releases it when its holder dies, so a ``lock`` file found while
    holding it was left by a dead build and is removed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "attnbench.flock", "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        stale = folder / "lock"
        if fcntl is not None and stale.exists():
            log.warning("removing %s, left by a build of the CPU kernels that was killed", stale)
            stale.unlink(missing_ok=True)
        yield


@functools.cache
def _build() -> ModuleType | None:
    """The compiled extension, or ``None`` (switched off, or the build failed: one warning says why)."""
    if os.environ.get(ENV_SWITCH, "1").strip() == "0":
        return None
    try:
        from torch.utils.cpp_extension import load

        log.info("loading the fused CPU kernels of cosine/euclidean inference and additive attention (compiled on "
                 "first use, about a minute; %s=0 skips them)", ENV_SWITCH)
        folder = build_directory()
        # torch rebuilds when a source or a flag changes, but does not read included headers: their digest is a flag
        headers = hashlib.sha256(b"".join(p.read_bytes() for p in HEADERS)).hexdigest()[:16]
        with _exclusive(folder):
            return load(name="attnbench_cpu_kernels", sources=[str(p) for p in SOURCES],
                        extra_cflags=["-O3", "-fopenmp", f"-DATTNBENCH_HEADERS_{headers}"],
                        extra_ldflags=["-fopenmp"], build_directory=str(folder), verbose=False)
    except Exception as err:  # no compiler, no ninja, a failed build: the eager path is exact too, only slower
        warnings.warn(f"attnbench: the fused CPU kernels could not be built ({type(err).__name__}: "
                      f"{str(err).strip().splitlines()[-1] if str(err).strip() else err!r}); cosine and euclidean "
                      f"inference and additive attention use the eager formulas (slower, same results). Install a C++ "
                      f"compiler and ninja, or set {ENV_SWITCH}=0 to silence this.", RuntimeWarning, stacklevel=2)
        return None


def _plain_eager(*tensors: Tensor | None) -> bool:
    """True outside ``torch.jit.trace``, ``torch.compile`` and ``torch.func`` transforms (vmap, grad, ...), for
    plain tensors (not FakeTensor or another subclass): the kernels are opaque to all of these (a trace would
    record their output as a constant; a vmapped or fake tensor has no data to read)."""
    if torch.jit.is_tracing() or torch.compiler.is_compiling():
        return False
    transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)
    if transforms_active is None or transforms_active():  # unknown (another torch): assume active, stay eager
        return False
    return all(t is None or type(t) in (torch.Tensor, torch.nn.Parameter) for t in tensors)


def kernels_for(x: Tensor, *also: Tensor | None) -> ModuleType | None:
    """The kernels if they apply to ``x`` (B×H×L×d) and the other inputs ``also`` of the result, else ``None``.

    They apply to a float32 CPU ``x`` with a contiguous last dimension (and float32 CPU ``also``), with no
    gradient to track (grad mode off, or neither ``x`` nor any tensor of ``also``
    requires one: e.g. :class:`CosineScore`'s τ, a trained parameter, passes
    itself here, so a frozen projection still trains τ), in plain eager
    execution (:func:`_plain_eager`); and only once the extension is built.
    """
    if x.dim() != 4 or x.stride(-1) != 1 or any(
            t is not None and (t.device.type != "cpu" or t.dtype != torch.float32) for t in (x, *also)):
        return None
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, *also)):
        return None
    if not _plain_eager(x, *also):
        return None
    return _build()


def _built() -> ModuleType:
    """The built extension; RuntimeError when it is not (switched off or failed: check :func:`kernels_for`)."""
    kernels = _build()
    if kernels is None:
        raise RuntimeError("attnbench's CPU kernels are not available; call kernels_for(x) first")
    return kernels


def unit_rows(x: Tensor, scale: Tensor | None, eps: float) -> Tensor:
    """``x / max(‖x‖₂, eps) · scale[h]`` along the last dim in one pass (:class:`CosineScore`'s normalisation).

    Args:
        x: B×H×L×d float32 on CPU, last dim contiguous (e.g. a head view of the projection).
        scale: H float32 factors (τ per head), or ``None``.
        eps: lower bound of the norm before dividing (as ``F.normalize``).

    Returns:
        A new contiguous B×H×L×d tensor.

    Raises:
        RuntimeError: the kernels are not available (check :func:`kernels_for` first) or ``x`` is not as above.
    """
    return _built().unit_rows(x, scale if scale is not None else x.new_empty(0), float(eps))


def row_sq_norms(x: Tensor) -> Tensor:
    """``Σ_c x_c²`` along the last dim, read off ``x`` without a copy (the ‖k‖² of :class:`EuclideanScore`).

    Args:
        x: B×H×L×d float32 on CPU, last dim contiguous.

    Returns:
        B×H×L float32.

    Raises:
        RuntimeError: the kernels are not available (check :func:`kernels_for` first) or ``x`` is not as above.
    """
    return _built().row_sq_norms(x)


def additive_kernels_for(*tensors: Tensor | None) -> ModuleType | None:
    """The kernels if :func:`additive_attention` applies to these inputs, else ``None``.

    It applies to CPU tensors all float32 or all float64 (``None`` entries are skipped), with or without a
    gradient to track, in plain eager execution (:func:`_plain_eager`), once the extension is built.
    """
    present = [t for t in tensors if t is not None]
    if not present or present[0].dtype not in (torch.float32, torch.float64):
        return None
    if any(t.device.type != "cpu" or t.dtype != present[0].dtype for t in present):
        return None
    if not _plain_eager(*present):
        return None
    return _build()


class FusedAdditiveAttention(torch.autograd.Function):
    """Autograd of the fused kernel: the forward keeps its inputs, the output and one log-sum-exp per query
    (O(B·H·L·(d_a + d)) in all); the backward recomputes tanh row by row."""

    @staticmethod
    def forward(ctx, q_proj: Tensor, k_proj: Tensor, score_vector: Tensor, value: Tensor,
                key_padding_mask: Tensor) -> Tensor:
        out, lse = _built().additive_attention_forward(q_proj, k_proj, score_vector, value, key_padding_mask)
        ctx.save_for_backward(q_proj, k_proj, score_vector, value, key_padding_mask, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q_proj, k_proj, score_vector, value, key_padding_mask, out, lse = ctx.saved_tensors
        d_q, d_k, d_w, d_value = _built().additive_attention_backward(
            grad_out, q_proj, k_proj, score_vector, value, key_padding_mask, out, lse)
        return d_q, d_k, d_w, d_value, None


def additive_attention(q_proj: Tensor, k_proj: Tensor, score_vector: Tensor, value: Tensor,
                       key_padding_mask: Tensor | None = None) -> Tensor:
    """``softmax_j(wᵀ tanh(q_proj_i + k_proj_j))·value`` fused, with autograd (Bahdanau et al. 2015, A.1.2).

    Per (batch, head), every query row streams over the non-padding keys: d_a vectorised tanh per key
    (SLEEF's 1-ulp routine, the one ``torch.tanh`` calls; AVX-512, AVX2 or plain C++, picked at run time), the
    row's softmax and its weighted sum of values. Memory beyond the inputs and output: one row of Lk scores per
    thread in the forward, that row's d_a×Lk tanh values per thread in the backward (which recomputes them:
    tanh' = 1 − tanh² is multiply-adds). No dropout: callers with ``dropout_p > 0`` use the blocked path.

    Args:
        q_proj: B×H×Lq×d_a, W_q q. k_proj: B×H×Lk×d_a, W_k k. score_vector: H×d_a, w.
        value: B×H×Lk×d_v (any strides). key_padding_mask: optional bool B×Lk, True = padding.
        All float32 or all float64, on CPU (:func:`additive_kernels_for`).

    Returns:
        B×H×Lq×d_v; rows whose keys are all padding are zero, with zero gradients.

    Raises:
        RuntimeError: the kernels are not available (check :func:`additive_kernels_for` first), or the shapes
        or dtypes disagree (the message names them).
    """
    mask = key_padding_mask if key_padding_mask is not None else q_proj.new_empty(0, dtype=torch.bool)
    return FusedAdditiveAttention.apply(q_proj, k_proj, score_vector, value, mask)
