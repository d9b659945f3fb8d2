"""Reading a cluster file as plain YAML: no anchors, no aliases, errors with ``file:line``.

A cluster file is a handful of keys; anchors (``&a``) and aliases (``*a``) buy nothing there and
let a few hundred bytes stand for a billion values (the "billion laughs" file: nine levels of ten
aliases each). pyyaml shares the aliased objects, so parsing is quick, but anything that then
walks or prints the values (an error message quoting one) expands them: seconds and gigabytes.
The file is scanned token by token first, which expands nothing, and any anchor or alias is
refused with its line before a single object is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._config import ClusterConfigError


def load_plain_yaml(path: Path) -> Any:
    """``path`` parsed by pyyaml's safe loader, after refusing anchors and aliases.

    Raises:
        ClusterConfigError: unreadable file, invalid YAML (``file:line: ...``), or an anchor or
            alias (``file:line: ... &name``).
    """
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ClusterConfigError(f"cannot read cluster file {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ClusterConfigError(f"{path}: not UTF-8 text ({e.reason})") from None
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, (yaml.AnchorToken, yaml.AliasToken)):
                sign = "&" if isinstance(token, yaml.AnchorToken) else "*"
                raise ClusterConfigError(
                    f"{path}:{token.start_mark.line + 1}: YAML anchors and aliases "
                    f"({sign}{token.value}) are not allowed in a cluster file; write each value "
                    "out where it is used"
                )
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ClusterConfigError(f"{where}: not valid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise ClusterConfigError(f"{path}: not valid YAML: {e}") from None
