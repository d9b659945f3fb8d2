"""``python -m ddp_bench``: parse and check the command line, then run, report and validate.

Every bad argument exits 2 with the usage, the error and a one-line hint.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from flodl_core import ConfigError
from flodl_ddp import MODES

from ._cells import BENCH_MODES, DILOCO, parse_cell
from ._config import PRESET_HELP, PRESETS, BenchConfig
from .models import MODEL_NAMES, SPECS

LIST_HINT = "python -m ddp_bench --list shows the models, modes and presets"


class UsageError(Exception):
    """A bad argument: ``message`` says what is wrong, ``hint`` what to do."""

    def __init__(self, message: str, hint: str = LIST_HINT) -> None:
        super().__init__(message)
        self.hint = hint


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        fail(self, message, "python -m ddp_bench --help lists every option")


def fail(parser: argparse.ArgumentParser, message: str, hint: str) -> NoReturn:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}\nhint: {hint}", file=sys.stderr)
    raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m ddp_bench",
        description="DDP validation sweeps: each model in each mode, compared with one device.",
    )
    p.add_argument("preset", nargs="?", help=f"one of: {', '.join(PRESETS)} (options win)")
    a = p.add_argument
    a("--model", help=f"{'|'.join(MODEL_NAMES)}|all, or a comma list (default all)")
    a(
        "--mode",
        help=f"solo-0|solo-1|<the six modes>|{DILOCO}|all, or a comma list (default all)",
    )
    a("--devices", help="comma list, e.g. cpu,cpu or cuda:0,cuda:1 (default: 2 GPUs, else cpu,cpu)")
    a("--epochs", help="epochs per run (default: each model's own)")
    a("--batches", help="cap on the global batches of each epoch")
    a("--batch-size", help="per-rank batch size (default 64)")
    a("--lr-scale", help="learning-rate scale ratio handed to the trainer (default 1.0)")
    a("--seed", help="seed of every run (default 42)")
    a("--repeats", help="rounds of every mode; speedups use median times (default 1)")
    a(
        "--seeds",
        help="rounds on N consecutive seeds from --seed; eval gaps to solo-0 are averaged over "
        "them, seed by seed (default 1)",
    )
    a("--output", help="runs folder: <output>/<model>/<mode>/ (default runs)")
    a("--data-dir", help="dataset files and download cache (default data)")
    a("--monitor", metavar="PORT", help="serve the live dashboard on 127.0.0.1:PORT")
    a(
        "--report",
        nargs="?",
        const="@output/report.md",
        metavar="FILE|-",
        help="write the Markdown report (default <output>/report.md; - for stdout)",
    )
    a(
        "--validate",
        action="store_true",
        default=None,
        help="compare with --baseline, exit 1 on a regression",
    )
    a("--save-baseline", action="store_true", default=None, help="save the runs as the baseline")
    a(
        "--baseline",
        metavar="FILE",
        help="baseline file (default baselines/baseline.json; the validate preset's: the "
        "committed ddp-bench/baselines/cpu-validate.json)",
    )
    a("--tolerance", help="relative tolerance of --validate (default 0.15)")
    a(
        "--slowdown",
        action="append",
        metavar="RANK=FACTOR",
        help="rank RANK runs FACTOR (>= 1) times slower (repeatable); 1 = not slowed, which "
        "undoes a preset's slowdown",
    )
    a(
        "--slow-factors",
        metavar="F,F,...",
        help="a slow-factor sweep: everything once per factor, the last device slowed F times "
        "(1 = not slowed), under <output>/slow-F/; the report compares each mode's speedup "
        "with the ideal 1 + 1/F",
    )
    a(
        "--no-bind-cores",
        action="store_true",
        help="leave CPU ranks' placement on cores to the OS (default: each rank of a multi-rank "
        "CPU run is bound to its own cores, on Linux)",
    )
    a("--list", action="store_true", help="list models, modes and presets, then exit")
    return p


def _int(opt: str, text: str, minimum: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise UsageError(
            f"{opt}: {text!r} is not an integer", f"{opt} takes a whole number >= {minimum}"
        ) from None
    if v < minimum:
        raise UsageError(
            f"{opt}: {v} is below {minimum}", f"{opt} takes a whole number >= {minimum}"
        )
    return v


def _float(opt: str, text: str, low: float, high: float | None = None) -> float:
    rng = f"> {low}" if high is None else f"in ({low}, {high})"
    try:
        v = float(text)
    except ValueError:
        raise UsageError(
            f"{opt}: {text!r} is not a number", f"{opt} takes a number {rng}"
        ) from None
    if not (v > low and (high is None or v < high)):
        raise UsageError(f"{opt}: {v} is out of range", f"{opt} takes a number {rng}")
    return v


def _models(text: str) -> tuple[str, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return MODEL_NAMES
    bad = [n for n in names if n not in SPECS]
    if bad or not names:
        raise UsageError(
            f"--model: unknown model {', '.join(map(repr, bad)) or repr(text)}; "
            f"expected {', '.join(MODEL_NAMES)} or all"
        )
    return tuple(dict.fromkeys(names))


def _modes(text: str, n_devices: int) -> tuple[str, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        solos = tuple(f"solo-{i}" for i in range(min(n_devices, 2)))
        return (*solos, *BENCH_MODES) if n_devices >= 2 else solos
    out = []
    for n in names:
        if n.lower().startswith("solo-"):
            idx = n[5:]
            if not idx.isdigit() or int(idx) >= n_devices:
                raise UsageError(
                    f"--mode: {n!r} names no device; --devices lists {n_devices}",
                    "solo-N runs device N of --devices alone (0-based)",
                )
            out.append(f"solo-{int(idx)}")
            continue
        try:
            out.append(parse_cell(n))
        except ConfigError as e:
            raise UsageError(f"--mode: {e}") from None
        if n_devices < 2:
            raise UsageError(
                f"--mode {out[-1]} needs at least 2 devices, --devices has {n_devices}",
                "use --devices cpu,cpu (two CPU ranks) or a solo-N mode",
            )
    if not out:
        raise UsageError(f"--mode: {text!r} names no mode")
    return tuple(dict.fromkeys(out))


def _devices(text: str) -> tuple[str, ...]:
    devs = tuple(d.strip() for d in text.split(",") if d.strip())
    for d in devs:
        kind, _, idx = d.partition(":")
        if kind not in ("cpu", "cuda") or (idx and not idx.isdigit()) or (kind == "cpu" and idx):
            raise UsageError(
                f"--devices: {d!r} is not a device",
                "devices are cpu, cuda or cuda:N, comma-separated",
            )
    if not devs:
        raise UsageError("--devices: no device given", "e.g. --devices cpu,cpu")
    return devs


def _slowdown(items: Sequence[str], n_devices: int) -> dict[int, float]:
    out: dict[int, float] = {}
    hint = "--slowdown RANK=FACTOR, e.g. --slowdown 1=2 (rank 1 twice as slow)"
    for item in items:
        rank, eq, factor = item.partition("=")
        if not eq:
            raise UsageError(f"--slowdown: {item!r} is not RANK=FACTOR", hint)
        r = _int("--slowdown RANK", rank.strip(), 0)
        if r >= n_devices:
            raise UsageError(
                f"--slowdown: rank {r} does not exist with {n_devices} device(s)", hint
            )
        f = _float("--slowdown FACTOR", factor.strip(), 0.0)
        if f < 1.0:
            raise UsageError(
                f"--slowdown: factor {f} is below 1 (it can only slow a rank down)", hint
            )
        if f > 1.0:  # 1 = as fast as it is: no entry, no "slowed 1x" in the logs
            out[r] = f
    return out


def _check_machine_has(devices: tuple[str, ...]) -> None:
    """CUDA devices this machine cannot give fail here, not in every run of the sweep."""
    from flodl_core import ConfigError
    from flodl_ddp.testing import check_cuda_devices

    try:
        check_cuda_devices(list(devices))
    except ConfigError as e:
        raise UsageError(f"--devices: {e}", "python -m ddp_bench --devices cpu,cpu") from None


def default_devices() -> tuple[str, ...]:
    """Two GPUs when there are, else two CPU ranks (GPU detection does not initialise CUDA)."""
    from flodl_core import detect_gpus

    gpus = detect_gpus()
    return tuple(f"cuda:{g.index}" for g in gpus) if len(gpus) >= 2 else ("cpu", "cpu")


def _resolve_devices(
    ns: argparse.Namespace, preset: dict[str, Any], detect: bool, fallback: tuple[str, ...]
) -> tuple[str, ...]:
    """``--devices``, else the preset's, else the machine's (or ``fallback`` without detection)."""
    if ns.devices is not None:
        devices = _devices(ns.devices)
        if detect:
            _check_machine_has(devices)
        return devices
    if "devices" in preset:
        return preset["devices"]
    return default_devices() if detect else fallback


def _training_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The explicitly given numeric training options, checked."""
    out: dict[str, Any] = {}
    if ns.epochs is not None:
        out["epochs"] = _int("--epochs", ns.epochs, 1)
    if ns.batches is not None:
        out["batches"] = _int("--batches", ns.batches, 1)
    if ns.batch_size is not None:
        out["batch_size"] = _int("--batch-size", ns.batch_size, 1)
    if ns.lr_scale is not None:
        out["lr_scale"] = _float("--lr-scale", ns.lr_scale, 0.0)
    if ns.seed is not None:
        out["seed"] = _int("--seed", ns.seed, 0)
    if ns.repeats is not None:
        out["repeats"] = _int("--repeats", ns.repeats, 1)
    if ns.seeds is not None:
        out["seeds"] = _int("--seeds", ns.seeds, 1)
    return out


def _output_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The explicitly given output, data, dashboard and baseline options, checked."""
    out: dict[str, Any] = {}
    if ns.output is not None:
        out["output"] = Path(ns.output)
    if ns.data_dir is not None:
        out["data_dir"] = Path(ns.data_dir)
    if ns.monitor is not None:
        out["monitor"] = _int("--monitor", ns.monitor, 1)
        if out["monitor"] > 65535:
            raise UsageError(
                f"--monitor: port {out['monitor']} is above 65535", "pick a port in 1..65535"
            )
    if ns.baseline is not None:
        out["baseline"] = Path(ns.baseline)
    if ns.tolerance is not None:
        out["tolerance"] = _float("--tolerance", ns.tolerance, 0.0, 1.0)
    return out


def _set_baseline_flags(ns: argparse.Namespace, changes: dict[str, Any]) -> None:
    """Apply ``--validate`` / ``--save-baseline`` over the preset's: an explicit
    ``--save-baseline`` turns a preset's validation into saving (``validate --save-baseline``
    re-creates the committed baseline); both given explicitly exclude each other."""
    if ns.validate and ns.save_baseline:
        raise UsageError(
            "--validate and --save-baseline exclude each other",
            "save a baseline once, then validate later runs against it",
        )
    if ns.validate:
        changes["validate"] = True
    if ns.save_baseline:
        changes["save_baseline"] = True
        changes["validate"] = False
    if changes.get("sweep_factors") and (changes.get("validate") or ns.save_baseline):
        raise UsageError(
            "a slow-factor sweep is not checked against a baseline (each factor repeats every "
            "cell)",
            "validate with the validate preset; sweep without --validate / --save-baseline",
        )


def _factors(text: str, n_devices: int) -> tuple[float, ...]:
    hint = "--slow-factors takes numbers >= 1, e.g. --slow-factors 1,2,4,8,16"
    out: list[float] = []
    for item in (t.strip() for t in text.split(",")):
        if item:
            f = _float("--slow-factors", item, 0.0)
            if f < 1.0:
                raise UsageError(f"--slow-factors: {f:g} is below 1 (it can only slow)", hint)
            if f in out:
                raise UsageError(f"--slow-factors: {f:g} is given twice", hint)
            out.append(f)
    if not out:
        raise UsageError(f"--slow-factors: {text!r} names no factor", hint)
    if n_devices < 2:
        raise UsageError(
            f"--slow-factors slows the second of two devices; --devices has {n_devices}",
            "use --devices cpu,cpu",
        )
    return tuple(out)


def _set_slowdowns(
    ns: argparse.Namespace, preset: dict[str, Any], changes: dict[str, Any], n_devices: int
) -> None:
    """``--slowdown`` / ``--slow-factors`` over the preset's; the two exclude each other, and an
    explicit ``--slowdown`` ends a preset's sweep."""
    if ns.slowdown:
        changes["slowdown"] = _slowdown(ns.slowdown, n_devices)
    elif "slowdown" in preset:
        changes["slowdown"] = {r: f for r, f in preset["slowdown"].items() if r < n_devices}
    if ns.slow_factors is not None:
        if ns.slowdown:
            raise UsageError(
                "--slow-factors and --slowdown exclude each other (the sweep sets the slowdown)",
                "give the factors to --slow-factors alone",
            )
        changes["sweep_factors"] = _factors(ns.slow_factors, n_devices)
        changes["slowdown"] = {}
    elif changes.get("sweep_factors") and ns.slowdown:
        changes["sweep_factors"] = ()


def resolve(ns: argparse.Namespace, detect: bool = True) -> BenchConfig:
    """The config of parsed arguments: defaults, then the preset, then explicit options."""
    cfg = BenchConfig()
    preset = dict(PRESETS.get(ns.preset, {})) if ns.preset else {}
    if ns.preset and ns.preset not in PRESETS:
        raise UsageError(f"unknown preset {ns.preset!r}; expected one of {', '.join(PRESETS)}")
    trains_by_default = ns.model is None and ns.mode is None and ns.preset is None
    devices = _resolve_devices(ns, preset, detect, cfg.devices)
    changes: dict[str, Any] = {"devices": devices, "preset": ns.preset}
    keys = (
        "models", "modes", "epochs", "batches", "slowdown", "repeats", "seeds", "output",
        "validate", "baseline", "sweep_factors",
    )  # fmt: skip
    for key in (*keys, "train"):
        if key in preset:
            changes[key] = preset[key]
    if ns.model is not None:
        changes["models"] = _models(ns.model)
    if ns.mode is not None:
        changes["modes"] = _modes(ns.mode, len(devices))
    elif "modes" not in preset:
        changes["modes"] = _modes("all", len(devices))
    changes.update(_training_options(ns))
    changes.update(_output_options(ns))
    _set_slowdowns(ns, preset, changes, len(devices))
    if ns.no_bind_cores:
        changes["bind_cores"] = False
    _set_baseline_flags(ns, changes)
    report = ns.report if ns.report is not None else preset.get("report")
    if trains_by_default and (ns.report is not None or ns.validate or ns.save_baseline):
        changes["train"] = False  # only --report / --validate / --save-baseline: use saved runs
    cfg = cfg.with_(**changes)
    if report is not None:
        cfg = cfg.with_(report=report.replace("@output", str(cfg.output)))
    return cfg


def list_text() -> str:
    lines = ["models:"]
    for s in SPECS.values():
        lines.append(f"  {s.name:<13} {s.dataset:<12} {s.architecture}")
    lines.append("modes:")
    lines.append("  solo-0, solo-1  one device alone (device N of --devices)")
    lines.append(f"  {', '.join(MODES)}")
    lines.append(f"  {DILOCO}  cpu-async with flodl_ddp.DiLoCo() as the outer optimizer")
    lines.append("presets:")
    width = max(13, *(len(name) for name in PRESETS))
    for name in PRESETS:
        lines.append(f"  {name:<{width}} {PRESET_HELP[name]}")
    return "\n".join(lines)


def parse(argv: Sequence[str] | None = None, detect: bool = True) -> BenchConfig | None:
    """The config of ``argv`` (``None`` after ``--list``); exits 2 on a bad argument."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.list:
        print(list_text())
        return None
    try:
        return resolve(ns, detect)
    except UsageError as e:
        fail(parser, str(e), e.hint)


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse(argv)
    if cfg is None:
        return 0
    from ._main import execute

    return execute(cfg)
