"""One rank of the admission test: join a gloo group through the parent's store, prove the token.

``python cluster_admission_worker.py RANK WORLD PORT TOKEN`` prints ``ADMITTED`` then
``SUM <all_reduce>`` (``GROUP GONE``, exit 4, when rank 0 left), or ``REFUSED <message>``
(exit 3).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from flodl_ddp import DdpError, admit


def main() -> int:
    rank, world, port, token = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(1)
    timeout = timedelta(seconds=20)
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timeout)
    dist.init_process_group(
        "gloo", store=dist.PrefixStore("pg", store), rank=rank, world_size=world, timeout=timeout
    )
    try:
        admit(dist.PrefixStore("ctl", store), rank, world, token, host=f"h{rank}", timeout_s=20)
    except DdpError as e:
        print(f"REFUSED {e}", flush=True)
        os._exit(3)
    print("ADMITTED", flush=True)
    t = torch.tensor([float(rank + 1)])
    try:
        dist.all_reduce(t)  # training may start: the group works (unless rank 0 refused someone)
    except Exception as e:
        print(f"GROUP GONE {type(e).__name__}", flush=True)
        os._exit(4)
    print(f"SUM {t.item():g}", flush=True)
    os._exit(0)  # skip gloo teardown (it can abort after the work is done)


if __name__ == "__main__":
    sys.exit(main())
