"""What a rank engine holds, as state that can travel: to a checkpoint, to a healing peer, back
to the start of a window that did not commit. Shared state is what every rank holds alike; rank
state is this rank's own (optimizer, RNG, scheduler position, its replica under EASGD).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch


class EngineState:
    """The state half of :class:`~flodl_ddp._rank.RankEngine` (a mixin over its attributes)."""

    rank: int
    world: int
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    device: torch.device
    scheduler: Any
    sched_step: int
    next_epoch: int
    cursor: int
    window: int
    global_step: int
    averager: Any

    _SHARED = ("elche", "guard", "averager", "overshoot", "tally")

    def shared_state(self) -> dict[str, Any]:
        """ElChe, guard, meta-controller, averager, overshoot, the epoch's tally and counters."""
        out = {name: getattr(self, name).state_dict() for name in self._SHARED}
        meta = getattr(self, "meta", None)
        out["meta"] = meta.state_dict() if meta is not None else None
        out["counters"] = [self.next_epoch, self.cursor, self.window, self.global_step]
        return out

    def load_shared_state(self, state: dict[str, Any]) -> None:
        for name in self._SHARED:
            getattr(self, name).load_state_dict(state[name])
        meta = getattr(self, "meta", None)
        if meta is not None and state.get("meta") is not None:
            meta.load_state_dict(state["meta"])
        self.next_epoch, self.cursor, self.window, self.global_step = map(int, state["counters"])

    def rank_state(self) -> dict[str, Any]:
        """This rank's own: optimizer, RNG, scheduler position (and its replica under EASGD)."""
        out: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "sched_step": self.sched_step,
            "scaler": self.scaler.state_dict(),  # {} when off
        }
        if self.device.type == "cuda":
            out["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        if callable(getattr(self.scheduler, "state_dict", None)):
            out["scheduler"] = self.scheduler.state_dict()
        if self.averager.alpha is not None:
            out["params"] = [p.detach().to("cpu", copy=True) for p in self.model.parameters()]
        return out

    def load_rank_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if "params" in state:
            with torch.no_grad():
                for p, t in zip(self.model.parameters(), state["params"], strict=True):
                    p.copy_(t)
        self.sched_step = int(state.get("sched_step", 0))
        if state.get("scaler"):  # a run without loss scaling saved {}
            self.scaler.load_state_dict(state["scaler"])
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        if "cuda_rng" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)

    def state_dict(self) -> dict[str, Any]:
        """The committed state a healing rank receives: weights, optimizer, shared state."""
        return self._state(lambda v: v.detach().to("cpu", copy=True), lambda x: x)

    def snapshot(self) -> dict[str, Any]:
        """:meth:`state_dict` as deep copies on the device (a window's start, to roll back to)."""
        return self._state(lambda v: v.detach().clone(), copy.deepcopy)

    def _state(self, tensor: Callable[[Any], Any], obj: Callable[[Any], Any]) -> dict[str, Any]:
        model = {k: tensor(v) for k, v in self.model.state_dict().items()}
        return {
            "model": model,
            "optimizer": obj(self.optimizer.state_dict()),
            "shared": obj(self.shared_state()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.load_shared_state(state["shared"])
