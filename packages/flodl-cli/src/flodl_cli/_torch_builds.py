"""Which torch wheel a machine needs, and whether a torch build covers a GPU.

PyTorch publishes one wheel per accelerator on its own index
(``https://download.pytorch.org/whl/<variant>``). Each CUDA wheel carries kernels for a range of
compute capabilities; a GPU outside that range cannot run it. The table below is the one
``fdl setup`` chooses from (``--variant`` overrides it):

=========  ======================  ================================================
variant    covers                  for
=========  ======================  ================================================
cpu        -                       no GPU
cu126      sm_50 .. sm_90          Maxwell, Pascal (GTX 10xx) up to Hopper
cu128      sm_70 .. sm_120         Volta up to Blackwell (RTX 50xx)
rocm6.4    gfx9xx, gfx10xx, gfx11  AMD GPUs (Linux)
=========  ======================  ================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._hardware import Gpu

INDEX = "https://download.pytorch.org/whl/"


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str  # "cpu" | "cuda" | "rocm"
    lowest: tuple[int, int] | None = None  # lowest compute capability with kernels
    highest: tuple[int, int] | None = None  # highest major.minor family with kernels

    @property
    def index_url(self) -> str:
        return INDEX + self.name

    def covers(self, gpu: Gpu) -> bool:
        if self.kind == "rocm":
            return gpu.vendor == "amd"
        if self.kind != "cuda" or gpu.vendor != "nvidia" or gpu.compute_capability is None:
            return False
        assert self.lowest is not None and self.highest is not None
        # Kernels built for sm_XY run on any sm_XZ with Z >= Y (same major): compare majors
        # against the highest family, the full pair against the lowest.
        return (
            self.lowest <= gpu.compute_capability and gpu.compute_capability[0] <= (self.highest[0])
        )

    def describe(self) -> str:
        if self.kind == "cuda":
            assert self.lowest is not None and self.highest is not None
            lo, hi = "sm_{}{}".format(*self.lowest), "sm_{}{}".format(*self.highest)
            return f"{self.name} (CUDA kernels for {lo}..{hi})"
        return self.name


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("cpu", "cpu"),
        Variant("cu126", "cuda", (5, 0), (9, 0)),
        Variant("cu128", "cuda", (7, 0), (12, 0)),
        Variant("rocm6.4", "rocm"),
    )
}
# Newest first: when several cover every GPU, the newest CUDA is the better pick.
_CUDA_PREFERENCE = ("cu128", "cu126")


@dataclass(frozen=True)
class Choice:
    """The chosen variant, the GPUs it leaves uncovered, and why."""

    variant: Variant
    reason: str
    uncovered: tuple[Gpu, ...] = ()


def choose(gpus: list[Gpu]) -> Choice:
    """The torch variant for these GPUs (see the module table)."""
    if not gpus:
        return Choice(VARIANTS["cpu"], "no GPU found")
    if all(g.vendor == "amd" for g in gpus):
        return Choice(VARIANTS["rocm6.4"], f"{len(gpus)} AMD GPU(s)")
    nvidia = [g for g in gpus if g.vendor == "nvidia"]
    archs = ", ".join(sorted({g.arch for g in nvidia}))
    for name in _CUDA_PREFERENCE:
        v = VARIANTS[name]
        if all(v.covers(g) for g in nvidia):
            return Choice(v, f"covers every GPU ({archs})")
    # No single wheel covers the mix: take the one that covers most GPUs, report the rest.
    best = max((VARIANTS[n] for n in _CUDA_PREFERENCE), key=lambda v: sum(map(v.covers, nvidia)))
    left = tuple(g for g in nvidia if not best.covers(g))
    return Choice(best, f"no single build covers {archs}", left)


def variant_of(version: str, cuda_requires: bool = False) -> str | None:
    """The variant named by an installed torch version (``2.13.0+cpu`` -> ``cpu``).

    A version without a local tag is PyPI's default wheel: CUDA on Linux when it requires the
    ``nvidia-*`` runtime packages (``cuda_requires``), else CPU.
    """
    _, _, local = version.partition("+")
    if local:
        return local
    return "pypi-cuda" if cuda_requires else "cpu"


def base_version(version: str) -> str:
    return version.split("+", 1)[0]


def arch_covered(arch_list: list[str], gpu: Gpu) -> bool:
    """Whether a torch build compiled for ``arch_list`` (``torch.cuda.get_arch_list()``, e.g.
    ``["sm_80", "sm_90", "compute_90"]``) can run on ``gpu``: a ``sm_XY`` kernel of the same
    major with Y <= the GPU's minor, or PTX (``compute_XY``) at or below the GPU's capability."""
    cc = gpu.compute_capability
    if cc is None:
        return gpu.gfx is not None and gpu.gfx in arch_list
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)", arch)
        if m is None:
            continue
        built = (int(m.group(2)), int(m.group(3)))
        if m.group(1) == "sm" and built[0] == cc[0] and built[1] <= cc[1]:
            return True
        if m.group(1) == "compute" and built <= cc:
            return True
    return False
