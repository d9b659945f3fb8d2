"""The record tree: every record lives at a path, interior nodes roll up their subtree.

Leaves (``root/host-a/rank1``) hold raw records ``{step, t, metrics}``. An interior node holds,
per step, running sums and counts over every leaf record of that step in its subtree, so its
rollup (``loss (mean)``, ``throughput (sum)``) is read in O(metrics) and a ``/node`` answer costs
O(children), however large the tree. Publishing costs O(depth x metrics). Means are taken over
leaves, not over child means, so a host with 8 ranks weighs 8 times a host with one.

A node is either a leaf or interior: a path that holds records cannot get children (the
per-step sums would silently mix levels otherwise).
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from flodl_core import ConfigError, PathError, check_int

from ._alerts import Alert
from ._paths import ROOT, split_path

Listener = Callable[[str, Any], None]  # ("record", Record) or ("alert", Alert)
ROLLUP_RULES = ("mean", "sum")
# Metrics whose rollup is a sum: rates and counts add up across ranks, losses average.
DEFAULT_SUM = frozenset({"throughput", "samples", "tokens", "items", "batches", "count"})


class Record:
    """One leaf record. ``metrics`` values are floats, ``None`` for NaN/inf."""

    __slots__ = ("metrics", "path", "step", "t")

    def __init__(self, path: str, step: int, t: float, metrics: dict[str, float | None]) -> None:
        self.path, self.step, self.t, self.metrics = path, step, t, metrics

    def to_json(self) -> dict[str, Any]:
        t = round(self.t, 3)
        return {"path": self.path, "step": self.step, "t": t, "metrics": self.metrics}


class _Acc:
    """Sums and counts of one step over the leaves of a subtree."""

    __slots__ = ("counts", "n", "sums", "t")

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.n = 0
        self.t = 0.0


class _Node:
    __slots__ = ("alerts", "children", "leaves", "order", "parent", "path", "records", "steps")

    def __init__(self, path: str, parent: _Node | None, history: int, alerts: int) -> None:
        self.path = path
        self.parent = parent
        self.children: dict[str, _Node] = {}
        self.records: deque[Record] = deque(maxlen=history)  # leaves only
        self.steps: dict[int, _Acc] = {}  # interior only
        self.order: list[int] = []  # sorted keys of steps
        self.leaves = 0
        self.alerts: deque[Alert] = deque(maxlen=alerts)


class RecordTree:
    """A thread-safe tree of records addressed by path (see the module docstring).

    ``rollup`` maps metric names (the full name or its last dotted segment) to ``"mean"`` or
    ``"sum"``; unnamed metrics average, except counts and rates in ``DEFAULT_SUM``. ``history``
    caps the records (leaf) or steps (interior) each node keeps in memory.
    """

    def __init__(
        self,
        *,
        rollup: Mapping[str, str] | None = None,
        history: int = 10_000,
        alerts: int = 100,
        stale_after: float | None = 60.0,
    ) -> None:
        for name, rule in (rollup or {}).items():
            if rule not in ROLLUP_RULES:
                raise ConfigError(f"rollup rule for {name!r} is {rule!r}; expected 'mean' or 'sum'")
        history = check_int(history, "history", ge=1)
        if stale_after is not None and not stale_after > 0:
            raise ConfigError(f"stale_after must be > 0 seconds or None, got {stale_after!r}")
        self._rules = dict(rollup or {})
        self._history = history
        self._alerts_cap = alerts
        self.stale_after = stale_after
        self._lock = threading.RLock()
        self._root = _Node(ROOT, None, history, alerts)
        self._nodes: dict[str, _Node] = {ROOT: self._root}
        self._last_t: dict[str, float] = {}  # leaf -> last publish time
        self._lost: set[str] = set()
        self._closed: set[str] = set()
        self._alert_keys: set[tuple[str, str, str]] = set()
        self._listeners: list[Listener] = []

    # ---- writing ---------------------------------------------------------------------------

    def rule(self, metric: str) -> str:
        """``"mean"`` or ``"sum"``: how ``metric`` rolls up."""
        rule = self._rules.get(metric) or self._rules.get(metric.rsplit(".", 1)[-1])
        if rule is not None:
            return rule
        return "sum" if metric.rsplit(".", 1)[-1] in DEFAULT_SUM else "mean"

    def add_listener(self, fn: Listener) -> None:
        """Call ``fn(kind, item)`` after every record or alert (on the publishing thread)."""
        with self._lock:
            self._listeners = [*self._listeners, fn]

    def remove_listener(self, fn: Listener) -> None:
        with self._lock:
            self._listeners = [f for f in self._listeners if f is not fn]

    def publish(
        self,
        path: str,
        metrics: Mapping[str, float | None],
        *,
        step: int | None = None,
        t: float | None = None,
    ) -> Record:
        """Append a record at leaf ``path`` (created on first use) and update every ancestor.

        ``step`` defaults to the leaf's previous step + 1 (0 first) and must increase strictly.
        Non-finite values are stored as ``None`` and left out of rollups.
        """
        clean: dict[str, float | None] = {}
        for name, v in metrics.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"metric names must be non-empty strings, got {name!r}")
            try:
                f = float(v) if v is not None else math.nan
            except (TypeError, ValueError):
                raise ConfigError(f"metric {name!r} is {v!r}; expected a number") from None
            clean[name] = f if math.isfinite(f) else None
        segments = split_path(path)
        t = time.time() if t is None else float(t)
        with self._lock:
            leaf = self._leaf(path, segments)
            last = leaf.records[-1].step if leaf.records else -1
            step = last + 1 if step is None else step
            if not isinstance(step, int) or step <= last:
                raise ConfigError(
                    f"step at {path!r} must be an int > {last} (the last one), got {step!r}"
                )
            rec = Record(path, step, t, clean)
            leaf.records.append(rec)
            self._last_t[path] = t
            self._lost.discard(path)
            node = leaf.parent
            while node is not None:
                self._accumulate(node, rec)
                node = node.parent
            listeners = self._listeners
        for fn in listeners:
            fn("record", rec)
        return rec

    def _leaf(self, path: str, segments: tuple[str, ...]) -> _Node:
        node = self._nodes.get(path)
        if node is not None:
            if node.children:
                raise PathError(
                    f"record path {path!r} has children; records go to leaves only",
                    node.children,
                )
            return node
        parent = self._root
        for i in range(1, len(segments)):
            if parent.records:
                raise PathError(
                    f"cannot add {path!r}: {parent.path!r} already holds records (a leaf); "
                    "publish the parent's own records at a sibling path instead"
                )
            sub = "/".join(segments[: i + 1])
            child = parent.children.get(segments[i])
            if child is None:
                child = _Node(sub, parent, self._history, self._alerts_cap)
                parent.children[segments[i]] = child
                self._nodes[sub] = child
            parent = child
        if parent.children:  # the target existed as an interior node of a longer path
            raise PathError(f"record path {path!r} has children; records go to leaves only")
        anc = parent.parent
        while anc is not None:
            anc.leaves += 1
            anc = anc.parent
        return parent

    def _accumulate(self, node: _Node, rec: Record) -> None:
        acc = node.steps.get(rec.step)
        if acc is None:
            if len(node.order) >= self._history and rec.step < node.order[0]:
                return  # older than everything kept: a straggler's long-evicted step
            acc = node.steps[rec.step] = _Acc()
            bisect.insort(node.order, rec.step)
            if len(node.order) > self._history:
                del node.steps[node.order.pop(0)]
        acc.n += 1
        acc.t = max(acc.t, rec.t)
        for name, v in rec.metrics.items():
            if v is not None:
                acc.sums[name] = acc.sums.get(name, 0.0) + v
                acc.counts[name] = acc.counts.get(name, 0) + 1

    # ---- alerts ----------------------------------------------------------------------------

    def alert(self, alert: Alert) -> bool:
        """Record ``alert`` on its node and every ancestor, once per key. True if new."""
        with self._lock:
            if not self._record_alert(alert):
                return False
            listeners = self._listeners
        for fn in listeners:  # outside the lock: a listener may call back into the tree
            fn("alert", alert)
        return True

    def _record_alert(self, alert: Alert) -> bool:
        """Add ``alert`` to the tree unless its key was seen. The caller holds the lock."""
        if alert.key in self._alert_keys:
            return False
        self._alert_keys.add(alert.key)
        node = self._nodes.get(alert.path, self._root)
        while node is not None:
            node.alerts.append(alert)
            node = node.parent
        return True

    def close(self, path: str) -> None:
        """Mark a leaf finished: it will not be reported lost when it goes quiet."""
        with self._lock:
            self._closed.add(path)

    def check_stale(self, now: float | None = None) -> list[Alert]:
        """Raise ``rank_lost`` for leaves silent for ``stale_after`` seconds (with >= 2 leaves)."""
        if self.stale_after is None:
            return []
        now = time.time() if now is None else now
        with self._lock:
            if self._root.leaves < 2:
                return []
            lost = [
                (p, t)
                for p, t in self._last_t.items()
                if now - t > self.stale_after and p not in self._lost and p not in self._closed
            ]
            self._lost.update(p for p, _ in lost)
            out: list[Alert] = []
            for p, t in lost:
                a = Alert("rank_lost", p, f"{p} stopped reporting {now - t:.0f}s ago", None, now)
                # A rank that came back and left again alerts again: forget the old key and
                # record the new alert in one step, so no other thread sees the key missing.
                self._alert_keys.discard(a.key)
                if self._record_alert(a):
                    out.append(a)
            listeners = self._listeners
        for a in out:
            for fn in listeners:
                fn("alert", a)
        return out

    # ---- reading ---------------------------------------------------------------------------

    def _get(self, path: str) -> _Node:
        split_path(path)
        node = self._nodes.get(path)
        if node is None:
            parent_path = path.rsplit("/", 1)[0]
            parent = self._nodes.get(parent_path)
            raise PathError(f"no record path {path!r}", parent.children if parent else ())
        return node

    def require(self, path: str) -> None:
        """Raise ``ConfigError`` for a malformed path, ``PathError`` for an unknown one."""
        with self._lock:
            self._get(path)

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and path in self._nodes

    def paths(self) -> list[str]:
        """Every path, parents before children."""
        with self._lock:
            return sorted(self._nodes)

    def _rollup(self, node: _Node, step: int) -> dict[str, Any]:
        acc = node.steps[step]
        metrics = {
            k: acc.sums[k] if self.rule(k) == "sum" else acc.sums[k] / c
            for k, c in acc.counts.items()
        }
        return {
            "path": node.path,
            "step": step,
            "t": round(acc.t, 3),
            "metrics": metrics,
            "agg": {k: self.rule(k) for k in metrics},
            "n": acc.n,
            "of": node.leaves,
        }

    def _latest(self, node: _Node) -> dict[str, Any] | None:
        if node.records:
            return node.records[-1].to_json()
        if node.order:
            return self._rollup(node, node.order[-1])
        return None

    def _child(self, name: str, c: _Node) -> dict[str, Any]:
        return {
            "name": name,
            "path": c.path,
            "kind": "interior" if c.children else "leaf",
            "lost": c.path in self._lost,
            "latest": self._latest(c),
        }

    def children(self, path: str, names: list[str]) -> list[dict[str, Any]]:
        """Summaries of the named children of ``path`` (unknown names are skipped)."""
        with self._lock:
            node = self._get(path)
            return [self._child(n, node.children[n]) for n in names if n in node.children]

    def node(self, path: str, *, alerts: int = 20) -> dict[str, Any]:
        """Summary of one node: its latest record or rollup, its children's, recent alerts.

        Costs O(children x metrics). Raises :class:`~flodl_core.PathError` for unknown paths.
        """
        with self._lock:
            node = self._get(path)
            kind = "interior" if node.children else "leaf"
            return {
                "path": node.path,
                "kind": kind,
                "leaves": node.leaves if node.children else 1,
                "latest": self._latest(node),
                "children": [self._child(name, c) for name, c in node.children.items()],
                "alerts": [a.to_json() for a in list(node.alerts)[-alerts:]] if alerts > 0 else [],
            }

    def history(self, path: str, n: int | None = None) -> list[dict[str, Any]]:
        """The last ``n`` records (leaf) or per-step rollups (interior), oldest first."""
        with self._lock:
            node = self._get(path)
            if node.records:
                recs = list(node.records)[-n:] if n else list(node.records)
                return [r.to_json() for r in recs]
            steps = node.order[-n:] if n else node.order
            return [self._rollup(node, s) for s in steps]

    def record_at(self, path: str, step: int) -> dict[str, Any] | None:
        """The record or rollup of ``step`` at ``path``, or ``None`` if it is not kept."""
        with self._lock:
            node = self._get(path)
            if node.children or not node.records:
                return self._rollup(node, step) if step in node.steps else None
            for r in reversed(node.records):
                if r.step == step:
                    return r.to_json()
            return None

    def snapshot(self, n: int = 2_000) -> dict[str, Any]:
        """Every node's last ``n`` history entries and alerts, for an offline page."""
        with self._lock:
            return {
                p: {"node": self.node(p, alerts=self._alerts_cap), "history": self.history(p, n)}
                for p in sorted(self._nodes)
            }
