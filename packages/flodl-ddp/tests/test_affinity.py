"""Binding ranks to cores: the slices, the refusals, the builder switch."""

from __future__ import annotations

import os

import pytest
import torch

from flodl_core import ConfigError
from flodl_ddp import Trainer
from flodl_ddp import _affinity as affinity


@pytest.fixture
def eight_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that may use cores 2..9 (as under ``taskset -c 2-9``)."""
    monkeypatch.setattr(affinity, "usable_cores", lambda: list(range(2, 10)))


@pytest.mark.usefixtures("eight_cores")
def test_each_local_rank_gets_its_own_equal_slice() -> None:
    assert [affinity.cores_for(r, 2, None) for r in (0, 1)] == [[2, 3, 4, 5], [6, 7, 8, 9]]
    # 8 // 3 = 2 cores each; the two left over stay unused
    assert [affinity.cores_for(r, 3, None) for r in range(3)] == [[2, 3], [4, 5], [6, 7]]
    assert affinity.cores_for(0, 1, None) == list(range(2, 10))
    assert affinity.cores_for(3, 4, 2) == [8, 9]


@pytest.mark.usefixtures("eight_cores")
@pytest.mark.parametrize(
    ("world", "threads", "needle"),
    [
        (9, None, "9 rank(s) on this host with 1 thread(s) each need 9 cores"),
        (3, 3, "3 rank(s) on this host with 3 thread(s) each need 9 cores"),
    ],
)
def test_too_few_cores_is_refused_naming_the_counts(
    world: int, threads: int | None, needle: str
) -> None:
    with pytest.raises(ConfigError) as e:
        affinity.cores_for(0, world, threads)
    assert needle in str(e.value) and "may use 8 (2, 3, 4, 5, 6, 7, 8, 9)" in str(e.value)


def test_a_platform_without_affinity_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    with pytest.raises(ConfigError, match=r"bind_cores needs os.sched_setaffinity"):
        affinity.check_bindable(2, None)


def test_the_builder_switch_is_checked_and_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    b = Trainer.builder(
        lambda: torch.nn.Linear(2, 1),
        lambda p: torch.optim.SGD(p, 0.1),
        lambda m, batch: m(batch[0]).pow(2).mean(),
    )
    with pytest.raises(ConfigError, match="bind_cores must be True or False, got 'yes'"):
        b.bind_cores("yes")  # type: ignore[arg-type]
    monkeypatch.setattr(affinity, "supported", lambda: True)
    monkeypatch.setattr(affinity, "usable_cores", lambda: [0])
    x = torch.zeros(64, 2)
    b = b.dataset((x, x[:, :1])).batch_size(8).num_epochs(1).devices(["cpu", "cpu"])
    b = b.bind_cores()
    with pytest.raises(ConfigError, match=r"2 rank\(s\) on this host .* need 2 cores"):
        b.run()  # refused in this process: no rank was spawned


@pytest.mark.skipif(not affinity.supported(), reason="needs os.sched_setaffinity")
def test_bind_pins_the_calling_thread_only() -> None:
    import threading

    usable = affinity.usable_cores()
    got: list[list[int]] = []

    def body() -> None:
        got.append(affinity.bind(0, len(usable), None))
        got.append(sorted(os.sched_getaffinity(0)))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert got == [[usable[0]], [usable[0]]]
    assert affinity.usable_cores() == usable  # this (the main) thread is left as it was
