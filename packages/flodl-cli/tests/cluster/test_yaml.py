"""Cluster files are plain YAML: anchors and aliases are refused, with the line, before anything
is built (a billion-laughs file costs nothing)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flodl_cli.cluster import ClusterConfig, ClusterConfigError


def test_an_alias_is_refused_with_its_line(tmp_path: Path) -> None:
    f = tmp_path / "fdl.cluster.yml"
    f.write_text(
        "cluster:\n"
        "  controller: {host: 10.0.0.1}\n"
        "  env: &common {OMP_NUM_THREADS: 1}\n"
        "  workers:\n"
        "    - {host: a, env: *common}\n"
    )
    with pytest.raises(ClusterConfigError) as info:
        ClusterConfig.load(f)
    assert str(info.value) == (
        f"{f}:3: YAML anchors and aliases (&common) are not allowed in a cluster file; "
        "write each value out where it is used"
    )


def test_a_merge_key_alias_is_refused_too(tmp_path: Path) -> None:
    f = tmp_path / "c.yml"
    f.write_text("x: &x {a: 1}\ncluster:\n  <<: *x\n")
    with pytest.raises(ClusterConfigError, match=r"c\.yml:1: YAML anchors and aliases \(&x\)"):
        ClusterConfig.load(f)
    g = tmp_path / "d.yml"
    g.write_text("cluster:\n  controller:\n    host: *nowhere\n")  # an alias alone: line 3
    with pytest.raises(ClusterConfigError, match=r"d\.yml:3: .*\(\*nowhere\)"):
        ClusterConfig.load(g)


def test_billion_laughs_is_refused_at_once(tmp_path: Path) -> None:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 9):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]")
    lines.append("cluster: {controller: {host: 10.0.0.1}, workers: *l8, env: {A: *l8}}")
    f = tmp_path / "fdl.cluster.yml"
    f.write_text("\n".join(lines) + "\n")
    t = time.perf_counter()
    with pytest.raises(ClusterConfigError, match=r"fdl\.cluster\.yml:1: YAML anchors"):
        ClusterConfig.load(f)
    assert time.perf_counter() - t < 1.0


def test_anchor_like_text_in_a_string_is_fine(tmp_path: Path) -> None:
    f = tmp_path / "fdl.cluster.yml"
    f.write_text(
        "cluster:\n  controller: {host: 10.0.0.1}\n"
        "  env: {NOTE: 'a & b * c', OTHER: x&y}\n  workers: [{host: a}]\n"
    )
    assert ClusterConfig.load(f).env == {"NOTE": "a & b * c", "OTHER": "x&y"}
