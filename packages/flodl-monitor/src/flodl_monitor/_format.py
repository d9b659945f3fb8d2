"""Number and line formatting for the console, the text log and the dashboard.

The helpers reproduce floDl (Rust)'s console format exactly (metric precision that adapts to
magnitude, ETAs that drop to milliseconds, 1024-based byte sizes), so logs of the two
implementations read the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

_GIB = 1 << 30
_MIB = 1 << 20
_KIB = 1 << 10

# ANSI styles used only when the stream is a terminal; log files get plain text.
_DIM = "\x1b[2m"
_BOLD = "\x1b[1m"
_RESET = "\x1b[0m"


def format_metric(v: float) -> str:
    """``0`` -> ``"0"``; ``|v| < 1e-3`` -> ``"1.00e-4"``; ``|v| < 100`` -> 4 decimals; else 2."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == 0:
        return "0"
    a = abs(v)
    if a < 1e-3:
        mantissa, exponent = f"{v:.2e}".split("e")
        return f"{mantissa}e{int(exponent)}"  # "1.00e-4", not Python's "1.00e-04"
    if a < 100:
        return f"{v:.4f}"
    return f"{v:.2f}"


def format_eta(seconds: float) -> str:
    """A duration for humans: ``"49ms"``, ``"4.8s"``, ``"5s"``, ``"2m 05s"``, ``"1h 03m"``.

    Negative or non-finite durations (nothing known yet) give ``"—"``.
    """
    if not math.isfinite(seconds) or seconds < 0:
        return "—"
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        # Truncate to tenths, rounding at 1e-6 first so 4.8 (4.7999...) stays 4.8.
        whole, tenths = divmod(int(round(seconds * 10, 6)), 10)
        return f"{whole}s" if tenths == 0 else f"{whole}.{tenths}s"
    total = int(seconds)
    if total < 3600:
        return f"{total // 60}m {total % 60:02d}s"
    return f"{total // 3600}h {(total % 3600) // 60:02d}m"


def format_bytes(n: float) -> str:
    """1024-based sizes: ``"2.1 GB"``, ``"512 MB"``, ``"3 KB"``, ``"17 B"``."""
    if n >= _GIB:
        return f"{n / _GIB:.1f} GB"
    if n >= _MIB:
        return f"{n / _MIB:.0f} MB"
    if n >= _KIB:
        return f"{n / _KIB:.0f} KB"
    return f"{int(n)} B"


def format_vram(alloc: int, total: int | None) -> str:
    """Used over total in the total's unit: ``"2.1/6.0 GB"``, ``"300/512 MB"``.

    An unknown (or zero) total gives the used size alone (``"2.1 GB"``); use beyond the total
    (unified memory spilling into host RAM) is added as ``"7.0/6.0 GB +1.0 GB spill"``.
    """
    if not total:
        return format_bytes(alloc)
    if total >= _GIB:
        text = f"{alloc / _GIB:.1f}/{total / _GIB:.1f} GB"
    elif total >= _MIB:
        text = f"{alloc / _MIB:.0f}/{total / _MIB:.0f} MB"
    elif total >= _KIB:
        text = f"{alloc / _KIB:.0f}/{total / _KIB:.0f} KB"
    else:
        text = f"{int(alloc)}/{int(total)} B"
    if alloc > total:
        text += f" +{format_bytes(alloc - total)} spill"
    return text


def _style(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{_RESET}" if color else text


def epoch_line(
    epoch: int,
    total: int,
    metrics: Mapping[str, float],
    duration: float,
    remaining: float | None,
    *,
    vram_alloc: int | None = None,
    vram_total: int | None = None,
    gpu_util: float | None = None,
    color: bool = False,
) -> str:
    """The console line of one epoch (``epoch`` is 0-based, printed 1-based).

    ``"  epoch  10/100  loss=0.3817  [25ms  ETA 2.2s]  VRAM: 2.1/6.0 GB (82%)"``; the ETA is
    left out on the last epoch (``remaining=None``), VRAM when unknown. VRAM shows allocator bytes
    over the device total (:func:`format_vram`, with the spill beyond physical memory on
    unified-memory systems), then the GPU utilisation.
    """
    width = len(str(total))
    parts = [f"  epoch {epoch + 1:>{width}}/{total}"]
    for name, value in metrics.items():
        parts.append(f"  {_style(name, _BOLD, color)}={format_metric(value)}")
    timing = f"[{format_eta(duration)}"
    if remaining is not None:
        timing += f"  ETA {format_eta(remaining)}"
    parts.append("  " + _style(timing + "]", _DIM, color))
    if vram_alloc is not None:
        parts.append(f"  VRAM: {format_vram(vram_alloc, vram_total)}")
        if gpu_util is not None:
            parts.append(f" ({gpu_util:.0f}%)")
    return "".join(parts)


def finish_line(total_seconds: float, metrics: Mapping[str, float], *, color: bool = False) -> str:
    """``"  training complete in 2.8s  | loss: 0.0012"`` (the last epoch's metrics)."""
    parts = [f"  training complete in {format_eta(total_seconds)}"]
    for name, value in metrics.items():
        parts.append(f"  | {_style(name, _BOLD, color)}: {format_metric(value)}")
    return "".join(parts)
