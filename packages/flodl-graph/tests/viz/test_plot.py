"""HTML epoch charts and CSV export over plain series."""

from __future__ import annotations

import csv
import json
import os
import re
import stat
from html.parser import HTMLParser
from pathlib import Path

import pytest

from flodl_core import ConfigError
from flodl_graph.viz._files import write_text_atomic
from flodl_graph.viz._plot import export_trends_csv, render_plot_html, write_plot_html


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


def test_html_is_self_contained_and_carries_the_data(tmp_path: Path) -> None:
    series = {"loss": [1.0, 0.5, float("nan"), 0.25], "acc</script>": [0.1, 0.9]}
    out = write_plot_html(tmp_path / "t.html", series, title="My <run>")
    text = out.read_text()
    p = _Collector()
    p.feed(text)
    # Nothing is fetched: no src/href attributes at all.
    assert not [a for _, a in p.tags if "src" in a or "href" in a]
    assert re.search(r"https?://", text) is None
    canvases = [a for t, a in p.tags if t == "canvas"]
    assert len(canvases) == 2
    data = json.loads(p.scripts[0].replace("<\\/", "</"))
    assert data["title"] == "My <run>"
    assert data["series"][0]["values"] == [1.0, 0.5, None, 0.25]
    assert data["series"][1]["name"] == "acc</script>"
    assert "<title>My &lt;run&gt;</title>" in text
    # the table fallback has one row per epoch
    assert text.count("<tr><td>") == 4


def test_html_render_is_pure() -> None:
    assert render_plot_html({"a": [1.0]}) == render_plot_html({"a": [1.0]})


def test_csv_one_column_per_series_ragged_rows(tmp_path: Path) -> None:
    path = export_trends_csv(tmp_path / "t.csv", {"loss": [0.5, 0.25, 0.125], "acc": [0.9]})
    rows = list(csv.reader(path.read_text().splitlines()))
    assert rows[0] == ["epoch", "loss", "acc"]
    assert rows[1] == ["1", "0.5", "0.9"]
    assert rows[3] == ["3", "0.125", ""]
    assert float(rows[2][1]) == 0.25


def test_csv_rejects_unquotable_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be a CSV column"):
        export_trends_csv(tmp_path / "t.csv", {"a,b": [1.0]})
    assert not (tmp_path / "t.csv").exists()


def test_atomic_write_missing_dir_and_no_temp_left(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_text_atomic(tmp_path / "nope" / "x.svg", "x")
    write_text_atomic(tmp_path / "x.svg", "one")
    write_text_atomic(tmp_path / "x.svg", "two")
    assert (tmp_path / "x.svg").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["x.svg"]


@pytest.mark.parametrize("path", [None, 3, True])
def test_atomic_write_refuses_what_is_not_a_path(path: object) -> None:
    with pytest.raises(ConfigError, match=r"output path must be a str or os\.PathLike"):
        write_text_atomic(path, "x")  # type: ignore[arg-type]


def test_written_files_follow_the_umask(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        out = write_text_atomic(tmp_path / "x.html", "x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
