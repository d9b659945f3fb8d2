"""flodl-hf vs transformers on the same BERT-base-sized weights: load time, peak RSS at load,
forward throughput (batch 8 x seq 128, eval, no grad).

    python benchmarks/hf.py [--rounds 5] [--layers 12] [--json out.json]

The random model is saved once by transformers (safetensors). Each load runs in a fresh
subprocess (cold imports excluded, OS page cache warm for both after the first round), rounds
alternate which side goes first, and the median per side is reported. Peak RSS at load is the
process's high-water mark (``VmHWM``) minus its RSS just before the load call. Forward
throughput runs both models in one process, interleaved. Ratios are printed side by side
(goals: load time <= 0.5x, peak RSS <= 1.2x the weight bytes, throughput >= 1.0x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_LOAD = r"""
import json, sys, time
import torch
side, folder = sys.argv[1], sys.argv[2]
if side == "flodl":
    import flodl_hf
    load = lambda: flodl_hf.AutoModel.from_pretrained(folder, tokenizer=False)
else:
    import transformers
    transformers.logging.set_verbosity_error()
    load = lambda: transformers.AutoModel.from_pretrained(folder)
def status(key):
    # VmHWM, not ru_maxrss: the latter carries the parent's peak over fork + exec.
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
before = status("VmRSS")
t0 = time.perf_counter()
model = load()
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "peak_rss_delta": status("VmHWM") - before}))
"""


def _make_model(folder: Path, layers: int) -> int:
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=layers)  # BERT-base shapes
    model = transformers.BertModel(cfg)
    model.save_pretrained(folder, safe_serialization=True)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _load_once(side: str, folder: Path) -> dict[str, float]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = subprocess.run(
        [sys.executable, "-c", _LOAD, side, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _throughput(folder: Path, rounds: int, batch: int, seq: int) -> dict[str, float]:
    import torch
    import transformers

    import flodl_hf

    transformers.logging.set_verbosity_error()
    ours = flodl_hf.AutoModel.from_pretrained(folder, tokenizer=False).eval()
    ref = transformers.AutoModel.from_pretrained(folder).eval()
    ids = torch.randint(1000, 30000, (batch, seq))
    mask = torch.ones_like(ids)
    mask[batch // 2 :, seq * 3 // 4 :] = 0  # some padding, as in real batches
    runs = {"flodl": lambda: ours(ids, mask), "transformers": lambda: ref(ids, attention_mask=mask)}
    times: dict[str, list[float]] = {"flodl": [], "transformers": []}
    with torch.inference_mode():
        for fn in runs.values():
            fn()  # warm-up
        for r in range(rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for side in order:
                t0 = time.perf_counter()
                runs[side]()
                times[side].append(time.perf_counter() - t0)
    return {side: batch / statistics.median(ts) for side, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        weight_bytes = _make_model(folder, args.layers)
        loads: dict[str, list[dict[str, float]]] = {"flodl": [], "transformers": []}
        for r in range(args.rounds):
            for side in ("flodl", "transformers") if r % 2 == 0 else ("transformers", "flodl"):
                loads[side].append(_load_once(side, folder))
        tput = _throughput(folder, args.rounds, args.batch, args.seq)
    res = {
        side: {
            "load_s": statistics.median(x["seconds"] for x in loads[side]),
            "peak_rss_mb": statistics.median(x["peak_rss_delta"] for x in loads[side]) / 2**20,
            "seq_per_s": tput[side],
        }
        for side in loads
    }
    f, t = res["flodl"], res["transformers"]
    wmb = weight_bytes / 2**20
    print(f"BERT-base-sized ({args.layers} layers), weights {wmb:.0f} MiB, rounds {args.rounds}")
    print(f"{'':24}{'flodl-hf':>12}{'transformers':>14}{'ratio':>9}  goal")
    print(
        f"{'load time (s)':24}{f['load_s']:12.3f}{t['load_s']:14.3f}"
        f"{f['load_s'] / t['load_s']:9.2f}  <= 0.50"
    )
    print(
        f"{'peak RSS at load (MiB)':24}{f['peak_rss_mb']:12.0f}{t['peak_rss_mb']:14.0f}"
        f"{f['peak_rss_mb'] / wmb:9.2f}  <= 1.20 x weights"
    )
    print(
        f"{'forward (seq/s, 8x128)':24}{f['seq_per_s']:12.2f}{t['seq_per_s']:14.2f}"
        f"{f['seq_per_s'] / t['seq_per_s']:9.2f}  >= 1.00"
    )
    if args.json:
        args.json.write_text(json.dumps({"weight_mib": wmb, **res}, indent=2) + "\n")


if __name__ == "__main__":
    main()
