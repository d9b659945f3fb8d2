"""The record tree: leaves, per-step rollups over leaves, paths, alerts, stale ranks."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from flodl_core import ConfigError, PathError
from flodl_monitor import Alert, RecordTree


def _cluster(tree: RecordTree, steps: int = 3) -> None:
    """host-a: rank0, rank1; host-b: rank2. loss = rank + step, throughput = 10 * (rank + 1)."""
    for s in range(steps):
        for host, rank in (("host-a", 0), ("host-a", 1), ("host-b", 2)):
            tree.publish(
                f"root/{host}/rank{rank}",
                {"loss": rank + s, "throughput": 10.0 * (rank + 1)},
                step=s,
            )


def test_interior_rollups_mean_over_leaves_and_sum_rates() -> None:
    tree = RecordTree()
    _cluster(tree)
    root = tree.node("root")
    assert root["kind"] == "interior" and root["leaves"] == 3
    latest = root["latest"]
    assert latest["step"] == 2 and latest["n"] == 3 and latest["of"] == 3
    assert latest["metrics"]["loss"] == pytest.approx((2 + 3 + 4) / 3)  # leaf-weighted mean
    assert latest["metrics"]["throughput"] == pytest.approx(60.0)
    assert latest["agg"] == {"loss": "mean", "throughput": "sum"}
    host_a = tree.node("root/host-a")["latest"]
    assert host_a["metrics"] == {"loss": pytest.approx(2.5), "throughput": pytest.approx(30.0)}
    children = {c["name"]: c for c in root["children"]}
    assert set(children) == {"host-a", "host-b"}
    assert children["host-b"]["latest"]["metrics"]["loss"] == pytest.approx(4.0)


def test_leaf_node_holds_raw_records() -> None:
    tree = RecordTree()
    _cluster(tree)
    leaf = tree.node("root/host-a/rank1")
    assert leaf["kind"] == "leaf" and leaf["children"] == []
    assert leaf["latest"]["metrics"] == {"loss": 3.0, "throughput": 20.0}
    assert [r["step"] for r in tree.history("root/host-a/rank1", 2)] == [1, 2]


def test_history_of_interior_node_is_per_step_rollups_in_step_order() -> None:
    tree = RecordTree()
    tree.publish("root/a", {"loss": 1.0}, step=5)  # a fast rank creates step 5 first
    tree.publish("root/b", {"loss": 3.0}, step=2)
    tree.publish("root/a", {"loss": 2.0}, step=6)
    hist = tree.history("root")
    assert [h["step"] for h in hist] == [2, 5, 6]
    assert [h["n"] for h in hist] == [1, 1, 1]
    assert tree.record_at("root", 5)["metrics"]["loss"] == 1.0
    assert tree.record_at("root", 99) is None


def test_custom_rollup_rules_by_full_name_or_last_segment() -> None:
    tree = RecordTree(rollup={"tokens_seen": "sum", "val.loss": "sum"})
    for r in range(2):
        tree.publish(
            f"root/r{r}", {"tokens_seen": 5.0, "val.loss": 1.0, "acc": 0.5, "x.samples": 2.0}
        )
    m = tree.node("root")["latest"]["metrics"]
    assert m == {"tokens_seen": 10.0, "val.loss": 2.0, "acc": 0.5, "x.samples": 4.0}
    with pytest.raises(ConfigError, match="'median'"):
        RecordTree(rollup={"loss": "median"})


def test_non_finite_values_are_null_and_left_out_of_rollups() -> None:
    tree = RecordTree()
    tree.publish("root/a", {"loss": math.nan})
    tree.publish("root/b", {"loss": 2.0})
    assert tree.node("root/a")["latest"]["metrics"] == {"loss": None}
    assert tree.node("root")["latest"]["metrics"]["loss"] == 2.0


def test_steps_default_to_next_and_must_increase() -> None:
    tree = RecordTree()
    assert tree.publish("root/a", {"x": 1}).step == 0
    assert tree.publish("root/a", {"x": 1}).step == 1
    with pytest.raises(ConfigError, match="must be an int > 1"):
        tree.publish("root/a", {"x": 1}, step=1)


@pytest.mark.parametrize(
    "path",
    [
        "",
        "host",
        "root/../etc",
        "root/..",
        "root//a",
        "root/.hidden",
        "root/a b",
        "root/a\\b",
        "root/" + "x" * 65,
        "/".join(["root"] + ["a"] * 8),
        "root/x.jsonl",
    ],
)
def test_malformed_paths_are_refused(path: str) -> None:
    tree = RecordTree()
    with pytest.raises(ConfigError, match="record path"):
        tree.publish(path, {"x": 1.0})
    with pytest.raises(ConfigError):
        tree.node(path)


def test_unknown_path_names_the_valid_children() -> None:
    tree = RecordTree()
    _cluster(tree, 1)
    with pytest.raises(PathError, match="host-a, host-b"):
        tree.node("root/host-c")


def test_leaf_and_interior_cannot_mix() -> None:
    tree = RecordTree()
    tree.publish("root", {"loss": 1.0})
    with pytest.raises(PathError, match="already holds records"):
        tree.publish("root/rank0", {"loss": 1.0})
    other = RecordTree()
    other.publish("root/h/r0", {"loss": 1.0})
    with pytest.raises(PathError, match="has children"):
        other.publish("root/h", {"loss": 1.0})


def test_bad_metric_values_are_refused() -> None:
    tree = RecordTree()
    with pytest.raises(ConfigError, match="'loss' is 'abc'"):
        tree.publish("root", {"loss": "abc"})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="non-empty"):
        tree.publish("root", {"": 1.0})


def test_history_cap_evicts_oldest() -> None:
    tree = RecordTree(history=3)
    for s in range(5):
        tree.publish("root/a", {"x": float(s)}, step=s)
    assert [r["step"] for r in tree.history("root/a")] == [2, 3, 4]
    assert [r["step"] for r in tree.history("root")] == [2, 3, 4]
    tree.publish("root/b", {"x": 0.0}, step=0)  # a straggler's evicted step is not resurrected
    assert [r["step"] for r in tree.history("root")] == [2, 3, 4]


def test_alerts_bubble_to_ancestors_once() -> None:
    tree = RecordTree()
    _cluster(tree, 1)
    seen: list[str] = []
    tree.add_listener(lambda kind, item: seen.append(kind))
    a = Alert("nan_loss", "root/host-b/rank2", "loss is NaN at epoch 1", 0)
    assert tree.alert(a) is True
    assert tree.alert(Alert("nan_loss", "root/host-b/rank2", "loss is NaN at epoch 2", 1)) is False
    assert seen == ["alert"]
    assert [x["path"] for x in tree.node("root")["alerts"]] == ["root/host-b/rank2"]
    assert tree.node("root/host-b")["alerts"] and not tree.node("root/host-a")["alerts"]


def test_rank_that_stops_reporting_is_lost_once_and_can_come_back() -> None:
    tree = RecordTree(stale_after=10.0)
    tree.publish("root/r0", {"loss": 1.0}, t=100.0)
    tree.publish("root/r1", {"loss": 1.0}, t=100.0)
    tree.publish("root/r0", {"loss": 1.0}, t=115.0)
    assert tree.check_stale(now=105.0) == []
    lost = tree.check_stale(now=115.0)
    assert [a.path for a in lost] == ["root/r1"] and lost[0].kind == "rank_lost"
    assert tree.check_stale(now=120.0) == []  # printed once
    assert {c["name"]: c["lost"] for c in tree.node("root")["children"]} == {
        "r0": False,
        "r1": True,
    }
    tree.publish("root/r1", {"loss": 1.0}, t=121.0)  # it is back
    assert tree.node("root")["children"][1]["lost"] is False
    tree.close("root/r0")
    assert [a.path for a in tree.check_stale(now=140.0)] == ["root/r1"]


class _OwnedLock:
    """An RLock that knows its owner, to check what runs under it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self) -> None:
        self._lock.acquire()
        self._owner = threading.get_ident()
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self._lock.release()

    def held(self) -> bool:
        return self._owner == threading.get_ident()


class _GuardedSet(set):  # type: ignore[type-arg]
    def __init__(self, lock: _OwnedLock) -> None:
        super().__init__()
        self.lock = lock
        self.unguarded: list[str] = []

    def add(self, item: Any) -> None:
        if not self.lock.held():
            self.unguarded.append(f"add {item}")
        super().add(item)

    def discard(self, item: Any) -> None:
        if not self.lock.held():
            self.unguarded.append(f"discard {item}")
        super().discard(item)


def test_alert_keys_change_only_under_the_lock() -> None:
    tree = RecordTree(stale_after=10.0)
    lock = _OwnedLock()
    keys = _GuardedSet(lock)
    tree._lock = lock  # type: ignore[assignment]
    tree._alert_keys = keys
    seen: list[tuple[str, bool]] = []
    tree.add_listener(
        lambda kind, a: seen.append((a.path, lock.held())) if kind == "alert" else None
    )
    tree.publish("root/r0", {"loss": 1.0}, t=100.0)
    tree.publish("root/r1", {"loss": 1.0}, t=100.0)
    tree.alert(Alert("nan", "root/r0", "loss is NaN", 3, 100.0))
    assert [a.path for a in tree.check_stale(now=120.0)] == ["root/r0", "root/r1"]
    tree.publish("root/r1", {"loss": 1.0}, t=121.0)
    assert [a.path for a in tree.check_stale(now=140.0)] == ["root/r1"]  # lost again
    assert keys.unguarded == []
    # listeners run outside the lock (they may call back into the tree from another thread)
    assert seen == [("root/r0", False), ("root/r0", False), ("root/r1", False), ("root/r1", False)]


def test_single_leaf_is_never_lost() -> None:
    tree = RecordTree(stale_after=1.0)
    tree.publish("root", {"loss": 1.0}, t=0.0)
    assert tree.check_stale(now=1000.0) == []
    assert RecordTree(stale_after=None).check_stale() == []


def test_paths_and_snapshot() -> None:
    tree = RecordTree()
    _cluster(tree, 2)
    paths = tree.paths()
    assert paths[0] == "root" and "root/host-a/rank1" in paths and len(paths) == 6
    snap = tree.snapshot(n=1)
    assert set(snap) == set(paths)
    assert len(snap["root"]["history"]) == 1 and snap["root"]["node"]["leaves"] == 3


def test_node_children_summaries_are_shallow() -> None:
    """A /node answer reads each child's latest entry only, never the grandchildren."""
    tree = RecordTree()
    for h in range(3):
        for r in range(100):
            tree.publish(f"root/h{h}/r{r}", {"loss": float(r)}, step=0)
    root = tree.node("root")
    assert len(root["children"]) == 3
    assert all(c["latest"]["n"] == 100 for c in root["children"])
    assert tree.children("root", ["h2", "nope"])[0]["name"] == "h2"
