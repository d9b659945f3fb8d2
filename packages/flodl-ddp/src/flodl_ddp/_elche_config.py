"""``ElCheConfig``: a mode and ElChe's knobs as one value, as floDl users write them
(``.elche(ElCheConfig.cpu_async().easgd_alpha(0.6))``). Every method returns a new value and
checks its knob at once by the builder's rule of that name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._options import check_option


class ElCheConfig:
    """A mode plus ElChe's options (anchor tuning, partition ratios, guard, EASGD, meta-controller,
    wire), from a preset: :meth:`default` (= :meth:`nccl_cadence`), :meth:`nccl_sync`,
    :meth:`nccl_async`, :meth:`cpu_sync`, :meth:`cpu_cadence`, :meth:`cpu_async`."""

    def __init__(self, mode: str = "nccl-cadence", **options: Any) -> None:
        self._options = {k: check_option(k, v) for k, v in {"mode": mode, **options}.items()}

    def _with(self, name: str, value: Any) -> ElCheConfig:
        return ElCheConfig(**{**self._options, name: value})

    def options(self) -> dict[str, Any]:
        """The :class:`~flodl_ddp.TrainerConfig` fields this value sets."""
        return dict(self._options)

    def __repr__(self) -> str:
        return f"ElCheConfig({', '.join(f'{k}={v}' for k, v in self._options.items())})"

    @classmethod
    def nccl_sync(cls) -> ElCheConfig:
        """Per-batch gradient all-reduce on the devices (the classic baseline)."""
        return cls("nccl-sync")

    @classmethod
    def nccl_cadence(cls) -> ElCheConfig:
        """``nccl-cadence``: the slow rank anchors, the fast ranks fill the window."""
        return cls("nccl-cadence")

    default = nccl_cadence  # the default mode

    @classmethod
    def nccl_async(cls) -> ElCheConfig:
        return cls("nccl-async")

    @classmethod
    def cpu_sync(cls) -> ElCheConfig:
        return cls("cpu-sync")

    @classmethod
    def cpu_cadence(cls) -> ElCheConfig:
        """Cadence averaged on CPU copies (no NVLink or P2P needed; mixes device kinds)."""
        return cls("cpu-cadence")

    @classmethod
    def cpu_async(cls) -> ElCheConfig:
        """Fast ranks keep training until every rank is ready; CPU-mediated averaging."""
        return cls("cpu-async")

    def anchor(self, n: int) -> ElCheConfig:
        return self._with("anchor", n)

    def max_anchor(self, n: int) -> ElCheConfig:
        return self._with("max_anchor", n)

    def min_anchor(self, n: int) -> ElCheConfig:
        return self._with("min_anchor", n)

    def overhead_target(self, f: float) -> ElCheConfig:
        return self._with("overhead_target", f)

    def max_batch_diff(self, n: int) -> ElCheConfig:
        return self._with("max_batch_diff", n)

    def speed_hint(self, slow_rank: int, ratio: float) -> ElCheConfig:
        return self._with("speed_hint", (slow_rank, ratio))

    def partition_ratios(self, ratios: Sequence[float]) -> ElCheConfig:
        return self._with("partition_ratios", ratios)

    def max_overshoot(self, n: int) -> ElCheConfig:
        return self._with("max_overshoot", n)

    def guard(self, guard: Any) -> ElCheConfig:
        return self._with("guard", guard)

    def divergence_threshold(self, f: float) -> ElCheConfig:
        return self._with("divergence_threshold", f)

    def meta_controller(self, on: bool = True) -> ElCheConfig:
        return self._with("meta_controller", on)

    def relax_up(self, on: bool = True) -> ElCheConfig:
        return self._with("elche_relax_up", on)

    def easgd_alpha(self, alpha: float) -> ElCheConfig:
        return self._with("easgd_alpha", alpha)

    def bf16_wire(self, on: bool = True) -> ElCheConfig:
        return self._with("bf16_wire", on)
