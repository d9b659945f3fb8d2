"""A streamed epoch of a per-item dataset with reader threads: flodl's ``num_workers`` vs torch's.

Two map-style datasets of ``--samples`` samples, batch 32, read in epoch order:

- *waiting*: each ``ds[i]`` waits ``--wait-ms`` without holding the GIL, as a read from a network
  file system or a cold disk does;
- *Python-bound*: each ``ds[i]`` loads a small ``.npy`` file from the page cache, mostly Python
  work under the GIL.

Contenders: flodl's default (one background thread), flodl with ``num_workers`` threads, torch's
default loader and torch with ``num_workers`` worker processes. Each figure is the median of
``--rounds`` interleaved rounds after one warm-up epoch each.

Usage: ``python benchmarks/data_workers.py [--samples 1024] [--wait-ms 0.5] [--workers 4]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from data_loader import consume, median_epochs  # this folder: the same timing rules
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import Dataset

from flodl_core import DataLoader


class Waiting(Dataset):
    """``ds[i]`` waits ``wait_s`` (releasing the GIL) and returns a small sample."""

    def __init__(self, n: int, wait_s: float) -> None:
        self.n, self.wait_s = n, wait_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.wait_s)
        return torch.full((16,), float(i)), i


class NpyFiles(Dataset):
    """``ds[i]`` loads ``folder/i.npy``, a 32 x 32 float32 array."""

    def __init__(self, folder: Path, n: int) -> None:
        self.folder, self.n = folder, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(np.load(self.folder / f"{i}.npy")), i


def contenders(ds: Dataset, workers: int) -> dict[str, Callable[[], int]]:
    epoch = [0]
    default = DataLoader(ds, batch_size=32)
    threaded = DataLoader(ds, batch_size=32, num_workers=workers)
    procs = TorchLoader(ds, batch_size=32, num_workers=workers, persistent_workers=True)

    def ours(loader: DataLoader) -> int:
        epoch[0] += 1
        return consume(loader.epoch(epoch[0]))

    return {
        "flodl default (one thread)": lambda: ours(default),
        f"flodl num_workers={workers} (threads)": lambda: ours(threaded),
        "torch default (num_workers=0)": lambda: consume(TorchLoader(ds, batch_size=32)),
        f"torch num_workers={workers} (processes)": lambda: consume(procs),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=1024)
    p.add_argument("--wait-ms", type=float, default=0.5)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rng = np.random.default_rng(0)
        for i in range(args.samples):
            np.save(folder / f"{i}.npy", rng.standard_normal((32, 32), dtype=np.float32))
        sets = {
            f"waiting ({args.wait_ms:g} ms per sample)": Waiting(args.samples, args.wait_ms / 1e3),
            "Python-bound (cached .npy files)": NpyFiles(folder, args.samples),
        }
        print(
            f"one epoch of {args.samples} samples, batch 32, {args.rounds} interleaved rounds, "
            f"median; torch {torch.__version__}"
        )
        for label, ds in sets.items():
            med = median_epochs(contenders(ds, args.workers), args.rounds)
            ref = med["flodl default (one thread)"]
            print(f"\n{label}\n{'loader':40s} {'epoch ms':>9s} {'speed vs flodl default':>23s}")
            for name, s in med.items():
                print(f"{name:40s} {s * 1e3:9.1f} {ref / s:22.2f}x")


if __name__ == "__main__":
    main()
