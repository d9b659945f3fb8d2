"""Every ```python block in the READMEs, the tutorials and the guides runs, in order, one
namespace per file.

Each file runs in a fresh temporary working directory, in a subprocess (so tutorials cannot leak
state, threads or servers into each other, and a hung tutorial is bounded by a timeout).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "docs" / "README.md",
        ROOT / "docs" / "ddp.md",
        *(ROOT / "docs" / "tutorials").glob("*.md"),
        *(ROOT / "docs" / "guides").glob("*.md"),
    ]
)
_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fences of a Markdown text, in order."""
    return [m.group(1) for m in _BLOCK.finditer(text)]


def test_block_extraction() -> None:
    text = "a\n```python\nx = 1\n```\n```text\nnot run\n```\n```python title\ny = x + 1\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x + 1\n"]


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_doc_code_runs(doc: Path, tmp_path: Path, run_script: Callable[..., object]) -> None:
    blocks = python_blocks(doc.read_text())
    if not blocks:
        pytest.skip(f"{doc.name} has no python blocks")
    # Block markers map a failure back to the document.
    source = "\n".join(
        f"# --- {doc.name} block {i + 1} ---\n{block}" for i, block in enumerate(blocks)
    )
    script = tmp_path / f"{doc.stem}.py"
    script.write_text(source)
    run_script(script, MPLBACKEND="Agg")
