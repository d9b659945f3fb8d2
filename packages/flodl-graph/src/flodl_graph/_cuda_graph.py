"""``CudaGraph``: capture one static-shape step on the GPU once, then replay it.

A CUDA graph records the kernels a step launches and replays them with one launch, removing
the per-kernel CPU cost (Python, dispatch, launch) that dominates small models. The price is
PyTorch's usual set of capture rules: shapes, dtypes and devices never change, the step never
synchronises with the host (no ``.item()``, no printing tensors, no data-dependent Python
branches), and every replay reads its inputs from and writes its outputs to the same memory.

This wraps ``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` the way PyTorch's CUDA-graph notes
describe a whole-step capture:

1. the inputs of the first call are copied into static buffers owned by the wrapper;
2. ``warmup`` eager runs happen on a side stream (lazy initialisation such as cuBLAS handles,
   autograd's accumulation buffers and optimizer state must not happen during capture), and the
   capture uses that same stream;
3. one run is captured; every later call copies its inputs into the static buffers and replays.

A training step works when it sets gradients to None at its start
(``optimizer.zero_grad(set_to_none=True)``) and its optimizer runs on the device without host
reads (``torch.optim.Adam(..., capturable=True)``; plain SGD needs nothing). The captured run is
a real step: after the first call the model has taken ``warmup + 1`` steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar

import torch
from torch import Tensor

from flodl_core import ConfigError, ShapeError, check_int, format_choices

__all__ = ["CaptureMode", "CudaGraph"]

T = TypeVar("T")
CaptureMode = Literal["global", "thread_local", "relaxed"]
_MODES = ("global", "thread_local", "relaxed")


def _require_cuda(what: str) -> None:
    if not torch.cuda.is_available():
        raise ConfigError(
            f"{what}: CUDA graphs need a CUDA device, and torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); run the "
            "step eagerly on this machine, or on a GPU with a CUDA build of PyTorch"
        )


class CudaGraph(Generic[T]):
    """``step = CudaGraph(fn)``; ``step(*inputs)`` captures on the first call, replays after.

    ``fn(*inputs) -> T``: the step, taking CUDA tensors ``inputs`` of fixed shapes and dtypes
    (e.g. ``x: (B, D)``, ``y: (B,)``) and returning a tensor or a tuple/list/dict of tensors.
    ``warmup``: eager runs before the capture (at least 1; PyTorch recommends a few).
    ``pool``: a memory pool to share with other graphs (``torch.cuda.graph_pool_handle()`` or
    ``other.pool``). ``capture_error_mode``: as ``torch.cuda.graph``'s.

    The returned outputs are the graph's static tensors: the next call overwrites them, so
    ``.clone()`` what must survive it. Refuses clearly on a machine without CUDA.
    """

    def __init__(
        self,
        fn: Callable[..., T],
        *,
        warmup: int = 3,
        pool: Any = None,
        capture_error_mode: CaptureMode = "global",
    ) -> None:
        if not callable(fn):
            raise ConfigError(f"CudaGraph: fn must be callable, got {type(fn).__name__}")
        warmup = check_int(warmup, "warmup", ge=1, where="CudaGraph", note="eager runs first")
        if capture_error_mode not in _MODES:
            raise ConfigError(
                f"CudaGraph: capture_error_mode must be one of {format_choices(_MODES)}, "
                f"got {capture_error_mode!r}"
            )
        _require_cuda("CudaGraph")
        self._fn = fn
        self._warmup = warmup
        self._pool = pool
        self._mode = capture_error_mode
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static_in: tuple[Tensor, ...] = ()
        self._static_out: T | None = None
        self._replays = 0

    # --- state -----------------------------------------------------------------------------

    @property
    def captured(self) -> bool:
        """Whether the step has been captured (the first call did it)."""
        return self._graph is not None

    @property
    def replays(self) -> int:
        """Replays since the capture (the capturing call is not one)."""
        return self._replays

    @property
    def static_inputs(self) -> tuple[Tensor, ...]:
        """The buffers the graph reads its inputs from (write into them and :meth:`replay`
        to skip the copy ``__call__`` makes)."""
        return self._static_in

    @property
    def static_output(self) -> T:
        """The outputs the graph writes on every replay."""
        if self._graph is None:
            raise ConfigError("CudaGraph.static_output: nothing captured yet; call the step once")
        return self._static_out  # type: ignore[return-value]

    @property
    def pool(self) -> Any:
        """This graph's memory pool handle, to share with another ``CudaGraph(pool=...)``."""
        if self._graph is None:
            raise ConfigError("CudaGraph.pool: nothing captured yet; call the step once")
        return self._graph.pool()

    # --- running ---------------------------------------------------------------------------

    def __call__(self, *inputs: Tensor) -> T:
        """Copy ``inputs`` into the static buffers and replay (capturing on the first call)."""
        if self._graph is None:
            return self.capture(*inputs)
        self._check(inputs)
        with torch.no_grad():
            for buf, x in zip(self._static_in, inputs, strict=True):
                buf.copy_(x, non_blocking=True)
        return self.replay()

    def replay(self) -> T:
        """Replay the captured step on whatever the static inputs hold now."""
        if self._graph is None:
            raise ConfigError("CudaGraph.replay: nothing captured yet; call the step once")
        self._graph.replay()
        self._replays += 1
        return self._static_out  # type: ignore[return-value]

    def capture(self, *inputs: Tensor) -> T:
        """Warm up, then capture ``fn`` on static copies of ``inputs``; returns the captured
        run's outputs (computed, like any call's)."""
        if self._graph is not None:
            raise ConfigError("CudaGraph.capture: already captured; call reset() to capture again")
        for i, x in enumerate(inputs):
            if not isinstance(x, Tensor):
                raise ConfigError(
                    f"CudaGraph: input {i} is a {type(x).__name__}; every input must be a tensor "
                    "(bind other arguments into fn, e.g. with functools.partial)"
                )
            if x.device.type != "cuda":
                raise ConfigError(
                    f"CudaGraph: input {i} is on {x.device}; CUDA graphs replay CUDA work only, "
                    "move the inputs (and the model) to a CUDA device first"
                )
        with torch.no_grad():
            static = tuple(x.detach().clone() for x in inputs)
        for buf, x in zip(static, inputs, strict=True):
            buf.requires_grad_(x.requires_grad)
        side = torch.cuda.Stream(device=static[0].device if static else None)
        side.wait_stream(torch.cuda.current_stream())
        # Warm-up and capture on one stream: lazily created per-stream handles (cuBLAS ...)
        # then exist before capture starts.
        with torch.cuda.stream(side):
            for _ in range(self._warmup):
                self._fn(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, stream=side, capture_error_mode=self._mode):
            out = self._fn(*static)
        self._graph, self._static_in, self._static_out = graph, static, out
        # Capture records without running: replay once so this call computes like any other.
        graph.replay()
        return out

    def reset(self) -> None:
        """Drop the captured graph and its buffers; the next call captures afresh."""
        if self._graph is not None:
            self._graph.reset()
        self._graph, self._static_in, self._static_out = None, (), None
        self._replays = 0

    def _check(self, inputs: tuple[Tensor, ...]) -> None:
        if len(inputs) != len(self._static_in):
            raise ConfigError(
                f"CudaGraph: captured with {len(self._static_in)} inputs, called with {len(inputs)}"
            )
        for i, (buf, x) in enumerate(zip(self._static_in, inputs, strict=True)):
            if not isinstance(x, Tensor):
                raise ConfigError(f"CudaGraph: input {i} is a {type(x).__name__}, not a tensor")
            if x.shape != buf.shape or x.dtype != buf.dtype:
                raise ShapeError(
                    f"CudaGraph: input {i} is {tuple(x.shape)} {x.dtype}, the graph was "
                    f"captured with {tuple(buf.shape)} {buf.dtype}; shapes and dtypes are "
                    "fixed at capture (pad the last batch, drop it, or keep one CudaGraph per "
                    "shape)"
                )

    def __repr__(self) -> str:
        state = f"captured, {self._replays} replays" if self.captured else "not captured"
        return f"CudaGraph({getattr(self._fn, '__name__', type(self._fn).__name__)}, {state})"
