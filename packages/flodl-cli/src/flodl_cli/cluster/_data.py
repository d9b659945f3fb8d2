"""The shared-data audit of ``fdl probe @cluster``: is the data where the cluster file says, on
every worker, readable, and the same?

Each worker lists its ``data_path`` (the worker's own, else the cluster's; ``~`` is that
worker's home): every file below it (symbolic links followed, each folder once) with its size,
sorted, and a SHA-256 over the listing. "The same data" means the same relative file names with
the same sizes: a cheap check that catches a missing shard, a half-copied file or another
version of the data set, without reading the bytes. The workers whose digest is the most common
are the reference; every other worker is told which files are missing, extra, or of another
size there.
"""

from __future__ import annotations

from typing import Any

LISTING_CAP = 20_000  # a worker sends its listing up to this many files, beyond only the digest
EXAMPLES = 3  # file names quoted per kind of difference in a check's detail
JSON_CAP = 100  # differences kept per kind in the JSON report

# Appended to the probe script (standard library only): fills out["data"] when a path is given
# as the script's first argument.
DATA_SCRIPT = r"""
import hashlib, os
def _data(path, cap):
    p = os.path.expanduser(path)
    d = {"path": p, "exists": os.path.exists(p)}
    if not d["exists"]:
        return d
    entries, bad, seen = [], [], set()
    def walk_error(e):
        bad.append(os.path.relpath(e.filename, p))
    if os.path.isdir(p):
        d["kind"] = "folder"
        for root, dirs, files in os.walk(p, onerror=walk_error, followlinks=True):
            st = os.stat(root)
            if (st.st_dev, st.st_ino) in seen:
                dirs[:] = []
                continue
            seen.add((st.st_dev, st.st_ino))
            for f in files:
                full = os.path.join(root, f)
                rel = os.path.relpath(full, p)
                try:
                    size = os.stat(full).st_size
                except OSError:
                    bad.append(rel)
                    continue
                if os.access(full, os.R_OK):
                    entries.append((rel, size))
                else:
                    bad.append(rel)
    else:
        d["kind"] = "file"
        if os.access(p, os.R_OK):
            entries.append((os.path.basename(p), os.stat(p).st_size))
        else:
            bad.append(os.path.basename(p))
    entries.sort()
    h = hashlib.sha256()
    for rel, size in entries:
        h.update(("%s\0%d\n" % (rel, size)).encode("utf-8", "surrogateescape"))
    d.update(files=len(entries), bytes=sum(s for _, s in entries), digest=h.hexdigest(),
             unreadable=sorted(bad)[:5], unreadable_count=len(bad),
             listing=entries if len(entries) <= cap else None)
    return d
if len(sys.argv) > 1:
    out["data"] = _data(sys.argv[1], %(cap)d)
""".replace("%(cap)d", str(LISTING_CAP))


def size_text(n: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable


def data_check(data: dict[str, Any] | None, wanted: str | None) -> tuple[bool, str]:
    """One worker's own verdict on its data (before the cross-worker comparison)."""
    if wanted is None:
        return True, "-"
    if not data:
        return False, f"{wanted}: not checked"
    path = data.get("path", wanted)
    if not data.get("exists"):
        return False, f"{path} missing"
    if data.get("unreadable_count"):
        n = data["unreadable_count"]
        first = (data.get("unreadable") or ["?"])[0]
        return False, f"{path}: {n} unreadable (e.g. {first})"
    return True, f"{data.get('files', 0)} files, {size_text(int(data.get('bytes', 0)))}"


def diff_listings(mine: list[Any], ref: list[Any]) -> dict[str, list[Any]]:
    """What ``mine`` lacks, has extra, and holds at another size, against ``ref``."""
    a = {str(k): int(v) for k, v in mine}
    b = {str(k): int(v) for k, v in ref}
    return {
        "missing": sorted(k for k in b if k not in a),
        "extra": sorted(k for k in a if k not in b),
        "size": sorted([k, a[k], b[k]] for k in a if k in b and a[k] != b[k]),
    }


def describe(diff: dict[str, list[Any]], ref_host: str) -> str:
    """``differs from alpha: 1 missing (x.bin); 1 of another size (y.bin: 10 B, 12 B on alpha)``."""

    def examples(items: list[str]) -> str:
        shown = ", ".join(items[:EXAMPLES])
        return shown + (", ..." if len(items) > EXAMPLES else "")

    parts = []
    if diff["missing"]:
        parts.append(f"{len(diff['missing'])} missing ({examples(diff['missing'])})")
    if diff["extra"]:
        parts.append(f"{len(diff['extra'])} extra ({examples(diff['extra'])})")
    if diff["size"]:
        sized = [f"{k}: {size_text(a)}, {size_text(b)} on {ref_host}" for k, a, b in diff["size"]]
        parts.append(f"{len(diff['size'])} of another size ({examples(sized)})")
    return f"differs from {ref_host}: " + ("; ".join(parts) or "same names and sizes")


def compare_data(reports: list[Any]) -> None:
    """Cross-worker check of the data: the most common digest is the reference (the first
    worker holding it names it); every other worker's ``data`` check fails with what differs.
    Listings are dropped from the facts afterwards (the JSON report keeps the differences)."""
    have = [
        r
        for r in reports
        if r.checks.get("data", (False, ""))[0] and (r.facts.get("data") or {}).get("digest")
    ]
    digests = [r.facts["data"]["digest"] for r in have]
    if len(set(digests)) > 1:
        ref_digest = max(set(digests), key=lambda d: (digests.count(d), -digests.index(d)))
        ref = next(r for r in have if r.facts["data"]["digest"] == ref_digest)
        for r in have:
            if r.facts["data"]["digest"] == ref_digest:
                continue
            mine, theirs = r.facts["data"].get("listing"), ref.facts["data"].get("listing")
            if mine is None or theirs is None:
                d, t = r.facts["data"], ref.facts["data"]
                r.checks["data"] = (
                    False,
                    f"differs from {ref.host}: {d['files']} files, {size_text(d['bytes'])} here, "
                    f"{t['files']} files, {size_text(t['bytes'])} there (more than "
                    f"{LISTING_CAP} files: too many to list the differences)",
                )
                continue
            diff = diff_listings(mine, theirs)
            r.checks["data"] = (False, describe(diff, ref.host))
            r.facts["data_diff"] = {
                "reference": ref.host,
                **{k: v[:JSON_CAP] for k, v in diff.items()},
                "counts": {k: len(v) for k, v in diff.items()},
            }
    for r in reports:
        if isinstance(r.facts.get("data"), dict):
            r.facts["data"].pop("listing", None)
