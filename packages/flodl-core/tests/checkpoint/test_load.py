"""load_checkpoint: round trips, strict and partial loads, and every bad file leaves the model
bit-identical."""

from __future__ import annotations

import gzip
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from flodl_core import CheckpointError, ConfigError
from flodl_core.checkpoint import (
    CheckpointNotFoundError,
    LoadReport,
    checkpoint_keys,
    load_checkpoint,
    save_checkpoint,
    write_checkpoint,
)

HASH_A, HASH_B = "aa" * 32, "bb" * 32


@pytest.mark.parametrize("suffix", [".fdl", ".fdl.gz"])
def test_round_trip_params_and_buffers(
    tmp_path: Path,
    suffix: str,
    make_net: Callable[..., nn.Module],
    state_bytes: Any,
    net_names: list[str],
) -> None:
    src, dst = make_net(seed=0), make_net(seed=1)
    path = tmp_path / f"net{suffix}"
    save_checkpoint(src, path)
    params_before = list(dst.parameters())
    report = load_checkpoint(dst, path)
    assert report == LoadReport(
        loaded=net_names, skipped=[], missing=[], metadata={}, verified=True
    )
    assert state_bytes(dst) == state_bytes(src)
    assert dst.bn.num_batches_tracked.item() == 1
    # values are copied into the existing tensors: optimizers keep valid references
    assert all(a is b for a, b in zip(params_before, dst.parameters(), strict=True))


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str
)
def test_round_trip_every_float_dtype_bit_exact(
    tmp_path: Path, dtype: torch.dtype, make_net: Callable[..., nn.Module], state_bytes: Any
) -> None:
    src, dst = make_net(seed=0).to(dtype), make_net(seed=1).to(dtype)
    save_checkpoint(src, tmp_path / "n.fdl")
    load_checkpoint(dst, tmp_path / "n.fdl")
    assert state_bytes(dst) == state_bytes(src)


def test_values_convert_to_the_model_dtype(
    tmp_path: Path, make_net: Callable[..., nn.Module]
) -> None:
    src = make_net(seed=0).double()
    dst = make_net(seed=1)
    save_checkpoint(src, tmp_path / "n.fdl")
    load_checkpoint(dst, tmp_path / "n.fdl")
    assert dst.fc.weight.dtype is torch.float32
    assert torch.equal(dst.fc.weight, src.fc.weight.float())


def test_metadata_is_reported_and_hidden_from_names(
    tmp_path: Path, make_net: Callable[..., nn.Module]
) -> None:
    path = tmp_path / "n.fdl"
    save_checkpoint(make_net(), path, metadata={"frozen": "fc.weight,fc.bias"})
    report = load_checkpoint(make_net(seed=2), path)
    assert report.metadata == {"frozen": "fc.weight,fc.bias"}
    assert "__flodl_meta__" not in report.loaded + report.skipped


def test_matching_hashes_and_zero_hashes_load(
    tmp_path: Path, make_net: Callable[..., nn.Module]
) -> None:
    hashed, plain = tmp_path / "h.fdl", tmp_path / "p.fdl"
    save_checkpoint(make_net(), hashed, hash=HASH_A)
    save_checkpoint(make_net(), plain)
    load_checkpoint(make_net(), hashed, expected_hash=HASH_A)
    load_checkpoint(make_net(), hashed)  # no expectation: no check
    load_checkpoint(make_net(), plain, expected_hash=HASH_B)  # file without hash: no check


class Wider(nn.Module):
    """Net plus an extra layer: the Net's file misses ``extra.*``; its own file has extras."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.extra = nn.Linear(3, 3)


def test_strict_load_lists_missing_and_unexpected(
    tmp_path: Path, make_net: Callable[..., nn.Module], state_bytes: Any
) -> None:
    path = tmp_path / "n.fdl"
    save_checkpoint(make_net(), path)
    model = Wider()
    before = state_bytes(model)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(model, path)
    msg = str(info.value)
    assert "missing from the file: extra.weight, extra.bias" in msg
    assert "not in the model: bn.weight, bn.bias, head.weight" in msg
    assert "strict=False" in msg
    assert state_bytes(model) == before


def test_partial_load_reports_and_loads_the_overlap(
    tmp_path: Path, make_net: Callable[..., nn.Module], net_names: list[str]
) -> None:
    src = make_net()
    path = tmp_path / "n.fdl"
    save_checkpoint(src, path)
    model = Wider()
    extra_before = model.extra.weight.clone()
    report = load_checkpoint(model, path, strict=False)
    assert report.loaded == ["fc.weight", "fc.bias"]
    assert report.missing == ["extra.weight", "extra.bias"]
    assert report.skipped == [n for n in net_names if not n.startswith("fc.")]
    assert torch.equal(model.fc.weight, src.fc.weight)
    assert torch.equal(model.extra.weight, extra_before)


# --- bad files: each is a clear CheckpointError and the model is untouched ------------------


def good_bytes(tmp_path: Path, net: nn.Module, **kw: Any) -> bytes:
    path = tmp_path / "good.fdl"
    save_checkpoint(net, path, **kw)
    return path.read_bytes()


def assert_refused(
    model: nn.Module, path: Path, match: str, state_bytes: Any, **kw: Any
) -> CheckpointError:
    before = state_bytes(model)
    with pytest.raises(CheckpointError, match=match) as info:
        load_checkpoint(model, path, **kw)
    assert state_bytes(model) == before
    return info.value


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.05, 0.1, 0.3, 0.5, 0.9, 0.999])
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_truncated_files(
    tmp_path: Path,
    fraction: float,
    gz: bool,
    make_net: Callable[..., nn.Module],
    state_bytes: Any,
) -> None:
    data = good_bytes(tmp_path, make_net(seed=0), metadata={"k": "v"})
    cut = data[: int(len(data) * fraction)]
    path = tmp_path / ("cut.fdl.gz" if gz else "cut.fdl")
    path.write_bytes(gzip.compress(cut) if gz else cut)
    assert_refused(make_net(seed=1), path, "truncated", state_bytes)


def test_truncated_gzip_stream(
    tmp_path: Path, make_net: Callable[..., nn.Module], state_bytes: Any
) -> None:
    packed = gzip.compress(good_bytes(tmp_path, make_net()))
    path = tmp_path / "cut.fdl.gz"
    path.write_bytes(packed[: len(packed) // 2])
    assert_refused(make_net(seed=1), path, "corrupt gzip stream", state_bytes)


def test_foreign_files(
    tmp_path: Path, make_net: Callable[..., nn.Module], state_bytes: Any
) -> None:
    zipped = tmp_path / "model.fdl"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("data.pkl", b"not a checkpoint")
    assert_refused(
        make_net(), zipped, r"not a \.fdl checkpoint: magic b'PK\\x03\\x04'", state_bytes
    )

    st = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in make_net().state_dict().items()}, str(st))
    assert_refused(make_net(), st, r"not a \.fdl checkpoint", state_bytes)

    hidden_gz = tmp_path / "packed.fdl"
    hidden_gz.write_bytes(gzip.compress(good_bytes(tmp_path, make_net())))
    assert_refused(make_net(), hidden_gz, r"looks gzip-compressed: name it \*\.gz", state_bytes)


@pytest.mark.parametrize("version", [0, 3])
def test_unsupported_versions(
    tmp_path: Path, version: int, make_net: Callable[..., nn.Module], state_bytes: Any
) -> None:
    data = bytearray(good_bytes(tmp_path, make_net()))
    data[4:8] = struct.pack("<I", version)
    path = tmp_path / "v.fdl"
    path.write_bytes(bytes(data))
    assert_refused(make_net(seed=1), path, f"unsupported checkpoint version {version}", state_bytes)


def test_unknown_dtype_tag(tmp_path: Path, state_bytes: Any) -> None:
    model = nn.Linear(2, 2)
    data = bytearray(good_bytes(tmp_path, model))
    # first entry: header 44, name_len 4 + "weight" 6, ndim 4 + 2 dims 16 -> tag at 74
    assert data[74] == 3
    data[74] = 9
    path = tmp_path / "t.fdl"
    path.write_bytes(bytes(data))
    assert_refused(nn.Linear(2, 2), path, r"entry 0 \('weight'\): unknown dtype tag 9", state_bytes)


def test_shape_mismatch_names_key_and_both_shapes(
    tmp_path: Path, make_net: Callable[..., nn.Module], state_bytes: Any
) -> None:
    path = tmp_path / "n.fdl"
    save_checkpoint(make_net(hidden=5), path)
    err = assert_refused(
        make_net(hidden=3),
        path,
        r"shape mismatch .*fc.weight: file \[5, 4\] vs model \[3, 4\]",
        state_bytes,
        strict=False,
    )
    assert "head.weight: file [2, 5] vs model [2, 3]" in str(err)


def test_hash_mismatch(
    tmp_path: Path, make_net: Callable[..., nn.Module], state_bytes: Any
) -> None:
    path = tmp_path / "n.fdl"
    save_checkpoint(make_net(), path, hash=HASH_A)
    assert_refused(
        make_net(seed=1),
        path,
        f"architecture mismatch: file={HASH_A} model={HASH_B}",
        state_bytes,
        expected_hash=HASH_B,
    )


def test_missing_file_is_file_not_found(tmp_path: Path, make_net: Callable[..., nn.Module]) -> None:
    path = tmp_path / "absent.fdl"
    with pytest.raises(FileNotFoundError, match=r"absent\.fdl") as info:
        load_checkpoint(make_net(), path)
    assert isinstance(info.value, CheckpointNotFoundError)


def test_a_folder_is_refused_by_name(
    tmp_path: Path, make_net: Callable[..., nn.Module], state_bytes: Any
) -> None:
    assert_refused(make_net(), tmp_path, "is a directory; give the path of the file", state_bytes)


def test_gz_path_holding_plain_data(
    tmp_path: Path, make_net: Callable[..., nn.Module], state_bytes: Any
) -> None:
    path = tmp_path / "n.fdl.gz"
    path.write_bytes(good_bytes(tmp_path, make_net()))
    assert_refused(make_net(seed=1), path, "not gzip data", state_bytes)


def test_duplicate_entries(tmp_path: Path, state_bytes: Any) -> None:
    data = bytearray(good_bytes(tmp_path, nn.Linear(2, 2, bias=False)))
    entry = data[44:]  # weight, then the metadata entry
    data[40:44] = struct.pack("<I", 4)
    path = tmp_path / "d.fdl"
    path.write_bytes(bytes(data + entry))
    assert_refused(nn.Linear(2, 2, bias=False), path, "duplicate entry name 'weight'", state_bytes)


def test_bad_expected_hash_is_a_config_error(
    tmp_path: Path, make_net: Callable[..., nn.Module]
) -> None:
    path = tmp_path / "n.fdl"
    save_checkpoint(make_net(), path)
    with pytest.raises(ConfigError, match="expected_hash must be 64 hex characters"):
        load_checkpoint(make_net(), path, expected_hash="abc")


def test_module_hook_errors_become_checkpoint_errors(tmp_path: Path) -> None:
    class Picky(nn.Linear):
        def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("picky module says no")

    path = tmp_path / "p.fdl"
    save_checkpoint(nn.Linear(2, 2), path)
    with pytest.raises(CheckpointError, match="module refused the state: picky module says no"):
        load_checkpoint(Picky(2, 2), path)


@pytest.mark.gpu
def test_values_move_to_the_model_device(
    tmp_path: Path, make_net: Callable[..., nn.Module]
) -> None:
    src = make_net(seed=0)
    path = tmp_path / "n.fdl"
    save_checkpoint(src.cuda(), path)
    dst = make_net(seed=1).cuda().half()
    load_checkpoint(dst, path)
    assert dst.fc.weight.device.type == "cuda" and dst.fc.weight.dtype is torch.float16
    assert torch.equal(dst.fc.weight.cpu(), src.fc.weight.cpu().half())


def test_swapped_arguments_say_so(tmp_path: Path) -> None:
    path = tmp_path / "m.fdl"
    save_checkpoint(nn.Linear(2, 2), path)
    with pytest.raises(ConfigError, match=r"swapped .* load_checkpoint\(model, path\)"):
        load_checkpoint(str(path), nn.Linear(2, 2))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"swapped .* save_checkpoint\(model, path\)"):
        save_checkpoint(path, nn.Linear(2, 2))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"module must be a torch\.nn\.Module, got dict"):
        load_checkpoint({}, path)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"path must be a str or os\.PathLike, got int"):
        load_checkpoint(nn.Linear(2, 2), 3)  # type: ignore[arg-type]


class _Net(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.enc = nn.Linear(3, 4)
        self.norm = nn.BatchNorm1d(4)
        self.head = nn.Linear(4, 2)


def _equal_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return [k.replace("_orig_mod.", "") for k in sa] == [
        k.replace("_orig_mod.", "") for k in sb
    ] and all(torch.equal(x, y) for x, y in zip(sa.values(), sb.values(), strict=True))


def _compiled_enc(seed: int) -> nn.Module:
    net = _Net(seed)
    net.enc = torch.compile(net.enc)  # type: ignore[assignment]
    return net


# torch.compile's first import (dynamo) warns about torch.jit deprecations of its own
COMPILE_WARNINGS = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@COMPILE_WARNINGS
@pytest.mark.parametrize(
    ("make_src", "make_dst"),
    [
        (lambda s: torch.compile(_Net(s)), _Net),
        (_Net, lambda s: torch.compile(_Net(s))),
        (_compiled_enc, _Net),
        (_Net, _compiled_enc),
    ],
    ids=["compiled->plain", "plain->compiled", "compiled-part->plain", "plain->compiled-part"],
)
def test_a_checkpoint_moves_between_a_compiled_model_and_the_plain_one(
    tmp_path: Path, make_src: Callable[[int], nn.Module], make_dst: Callable[[int], nn.Module]
) -> None:
    """``torch.compile``'s wrapper puts ``_orig_mod.`` before the keys under it; the file names
    tensors without it, and a load maps the names back (it was a mismatch either way)."""
    src, dst = make_src(1), make_dst(2)
    save_checkpoint(src, tmp_path / "m.fdl")
    assert all("_orig_mod" not in k.name for k in checkpoint_keys(tmp_path / "m.fdl"))
    report = load_checkpoint(dst, tmp_path / "m.fdl")
    assert report.missing == report.skipped == [] and "enc.weight" in report.loaded
    assert _equal_state(src, dst)


@COMPILE_WARNINGS
def test_a_file_written_with_compiled_names_loads_into_the_plain_model(tmp_path: Path) -> None:
    src = torch.compile(_Net(1))
    write_checkpoint(tmp_path / "old.fdl", src.state_dict())  # names with _orig_mod.
    dst = _Net(2)
    report = load_checkpoint(dst, tmp_path / "old.fdl")
    assert report.missing == report.skipped == []
    assert _equal_state(src, dst)
