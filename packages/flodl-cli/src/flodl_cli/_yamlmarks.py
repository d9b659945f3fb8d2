"""YAML loaded with where each value came from, deep merges that keep it, and an annotated dump.

pyyaml parses (no hand-written YAML parsing); this module walks the composed node tree to
record, for every key path, ``file:line`` of the key. Overlays are merged over a base with the
origins following the values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import CliError

Path_ = tuple[str | int, ...]


@dataclass
class Doc:
    """A loaded YAML document: ``data`` and ``origin[path] = "file:line"`` for every key."""

    data: Any
    origin: dict[Path_, str] = field(default_factory=dict)
    file: str = ""


def _loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(path: Path, label: str | None = None) -> Doc:
    """Load ``path``; syntax errors become a :class:`CliError` naming the file and line."""
    import yaml

    label = label or path.name
    try:
        text = path.read_text()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None
    try:
        _refuse_aliases(text, label)
        loader = _loader()(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{label}:{mark.line + 1}" if mark is not None else label
        raise CliError(f"{where}: invalid YAML: {e.problem or e.context}", code=2) from None
    except yaml.YAMLError as e:
        raise CliError(f"{label}: invalid YAML: {e}", code=2) from None
    doc = Doc(data, file=label)
    if node is not None:
        _marks(node, (), label, doc.origin)
    return doc


def _refuse_aliases(text: str, label: str) -> None:
    """Refuse anchors (``&a``) and aliases (``*a``) from the token stream, before anything is
    composed: nested aliases expand a few hundred bytes into billions of nodes (the "billion
    laughs"), and a manifest has no need for them."""
    import yaml

    for token in yaml.scan(text, Loader=_loader()):
        if isinstance(token, (yaml.AnchorToken, yaml.AliasToken)):
            what = "anchor &" if isinstance(token, yaml.AnchorToken) else "alias *"
            raise CliError(
                f"{label}:{token.start_mark.line + 1}: YAML {what}{token.value} is not accepted "
                "(anchors and aliases can expand a small file into a huge one); "
                "fix: write the value out in full",
                code=2,
            )


def _marks(node: Any, path: Path_, label: str, out: dict[Path_, str]) -> None:
    import yaml

    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            sub = (*path, key)
            out[sub] = f"{label}:{key_node.start_mark.line + 1}"
            _marks(value_node, sub, label, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = (*path, i)
            out[sub] = f"{label}:{item.start_mark.line + 1}"
            _marks(item, sub, label, out)


def line_of(doc: Doc, path: Path_) -> str:
    """``file:line`` of ``path`` (or of its nearest ancestor), for error messages."""
    while path:
        if path in doc.origin:
            return doc.origin[path]
        path = path[:-1]
    return doc.file


def merge(base: Doc, over: Doc) -> Doc:
    """``over`` deep-merged into ``base``: mappings merge key by key, anything else replaces."""
    origin = dict(base.origin)

    def go(a: Any, b: Any, path: Path_) -> Any:
        if isinstance(a, dict) and isinstance(b, dict):
            out = dict(a)
            for k, v in b.items():
                sub = (*path, k)
                if k in out:
                    out[k] = go(out[k], v, sub)
                else:
                    out[k] = v
                    _take(sub)
                merged_maps = isinstance(a.get(k), dict) and isinstance(v, dict)
                if sub in over.origin and not merged_maps:
                    origin[sub] = over.origin[sub]
            return out
        # Replaced wholesale: the base's origins below this path no longer apply.
        for p in [p for p in origin if p[: len(path)] == path and len(p) > len(path)]:
            del origin[p]
        _take(path)
        return b

    def _take(path: Path_) -> None:
        for p, o in over.origin.items():
            if p[: len(path)] == path:
                origin[p] = o

    data = go(base.data if base.data is not None else {}, over.data, ())
    return Doc(data, origin, base.file)


def _scalar(value: Any) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def dump_annotated(doc: Doc) -> str:
    """``doc.data`` as YAML, each line ending in ``# file:line`` of where its value came from."""
    lines: list[tuple[str, str]] = []

    def go(value: Any, path: Path_, indent: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                sub = (*path, k)
                key = _scalar(k)
                nested = isinstance(v, dict) and bool(v)
                nested |= isinstance(v, list) and any(isinstance(i, (dict, list)) for i in v)
                if nested:
                    lines.append((f"{indent}{key}:", doc.origin.get(sub, "")))
                    go(v, sub, indent + "  ")
                else:
                    lines.append((f"{indent}{key}: {_scalar(v)}", doc.origin.get(sub, "")))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                sub = (*path, i)
                if isinstance(item, (dict, list)) and item:
                    lines.append((f"{indent}-", doc.origin.get(sub, "")))
                    go(item, sub, indent + "  ")
                else:
                    lines.append((f"{indent}- {_scalar(item)}", doc.origin.get(sub, "")))
        else:
            lines.append((f"{indent}{_scalar(value)}", ""))

    go(doc.data, (), "")
    width = max((len(t) for t, _ in lines), default=0)
    return "\n".join(f"{t.ljust(width)}  # {o}" if o else t for t, o in lines) + "\n"
