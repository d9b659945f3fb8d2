"""fdl.yml: discovery, the three command kinds, overlays, --gpus, validation messages."""

from __future__ import annotations

import itertools
from pathlib import Path

import yaml

from .conftest import Fdl

ARGV = "import sys, os; print(' '.join(sys.argv[1:])); print(os.environ.get('FDL_CONFIG', ''))"


def project(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "p.py").write_text(ARGV)
    (tmp_path / "fdl.yml").write_text(
        "description: demo\n"
        "commands:\n"
        "  echo:\n"
        "    description: print the args\n"
        "    run: python p.py first\n"
        "    append: [--last, 'a b']\n"
        "  short: python p.py short\n"
        "  bench:\n"
        "    path: sub\n"
    )
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "p.py").write_text(ARGV)
    (sub / "fdl.yml").write_text(
        "entry: python p.py\n"
        "options: {epochs: 5, model: mlp, fast: false}\n"
        "ddp: {mode: cpu-cadence}\n"
        "commands:\n"
        "  quick:\n"
        "    description: one epoch\n"
        "    options: {epochs: 1, fast: true}\n"
        "  where: python -c 'import os; print(os.getcwd())'\n"
    )
    (tmp_path / "fdl.ci.yml").write_text("commands:\n  echo:\n    append: --ci\n")
    return tmp_path


def test_run_command_composes_run_args_append(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("echo", "--", "--x", "1 2", cwd=project(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "first --x 1 2 --last a b"


def test_discovered_from_a_subfolder(fdl: Fdl, tmp_path: Path) -> None:
    deep = project(tmp_path) / "a" / "b"
    deep.mkdir(parents=True)
    assert fdl("short", cwd=deep).stdout.splitlines()[0] == "short"


def test_fdl_root_is_used_from_outside(fdl: Fdl, tmp_path: Path) -> None:
    root = project(tmp_path / "proj")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = fdl("short", cwd=elsewhere, FDL_ROOT=str(root))
    assert proc.stdout.splitlines()[0] == "short"


def test_args_before_dashdash_are_rejected(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("echo", "--x", cwd=project(tmp_path))
    assert proc.returncode == 2
    assert "arguments for 'echo' go after '--'" in proc.stderr
    assert "hint: fdl echo -- --x" in proc.stderr


def test_command_help(fdl: Fdl, tmp_path: Path) -> None:
    out = fdl("echo", "--help", cwd=project(tmp_path)).stdout
    assert "print the args" in out and "runs: python p.py first" in out
    assert "defined at fdl.yml:3" in out


def test_path_and_preset(fdl: Fdl, tmp_path: Path) -> None:
    root = project(tmp_path)
    proc = fdl("bench", "quick", "--", "--seed", "3", cwd=root)
    assert proc.returncode == 0, proc.stderr
    args, config = proc.stdout.splitlines()
    assert args == "--epochs 1 --model mlp --fast --seed 3"
    assert yaml.safe_load(config) == {"ddp": {"mode": "cpu-cadence"}}
    # No sub-command: the entry with the manifest's own options.
    assert fdl("bench", cwd=root).stdout.splitlines()[0] == "--epochs 5 --model mlp"
    # Run commands of a sub-manifest run in its folder.
    assert fdl("bench", "where", cwd=root).stdout.strip() == str((root / "sub").resolve())
    proc = fdl("bench", "nope", cwd=root)
    assert proc.returncode == 2 and "'bench' has no command 'nope'" in proc.stderr


def test_overlay_by_env_flag_at_sign_and_variable(fdl: Fdl, tmp_path: Path) -> None:
    root = project(tmp_path)
    expected = "first --last a b"
    assert fdl("echo", cwd=root).stdout.splitlines()[0] == expected
    ways: list[tuple[tuple[str, ...], dict[str, str]]] = [
        (("--env", "ci", "echo"), {}),
        (("@ci", "echo"), {}),
        (("echo",), {"FDL_ENV": "ci"}),
        (("ci", "echo"), {}),
    ]
    for args, env in ways:
        proc = fdl(*args, cwd=root, **env)
        assert proc.stdout.splitlines()[0] == "first --ci", (args, proc.stderr)
    proc = fdl("@prod", "echo", cwd=root)
    assert proc.returncode == 2
    assert "no overlay fdl.prod.yml" in proc.stderr and "environments here: ci" in proc.stderr


def test_an_environment_named_where_no_fdl_yml_is_refused(fdl: Fdl, tmp_path: Path) -> None:
    """`@prod` / `--env prod` with no fdl.yml at all was ignored silently; FDL_ENV (maybe
    exported for another project) still is."""
    (tmp_path / "s.py").write_text("print('ran')")
    for args in (("@prod", "run", "s.py"), ("--env", "prod", "run", "s.py")):
        proc = fdl(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stdout)
        assert "--env prod: no fdl.yml here or in a parent folder" in proc.stderr
        assert "ran" not in proc.stdout
    proc = fdl("run", "s.py", cwd=tmp_path, FDL_ENV="prod")
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr


def test_config_show_annotates_origins(fdl: Fdl, tmp_path: Path) -> None:
    root = project(tmp_path)
    out = fdl("config", "show", "ci", cwd=root).stdout
    assert "append: --ci" in out and "# fdl.ci.yml:3" in out
    assert "run: python p.py first" in out and "# fdl.yml:5" in out
    merged = yaml.safe_load(out)
    assert merged["commands"]["echo"] == {
        "description": "print the args", "run": "python p.py first", "append": "--ci"
    }  # fmt: skip
    assert fdl("--env", "ci", "config", "show", cwd=root).stdout == out
    plain = fdl("config", "show", cwd=root).stdout
    assert "fdl.ci.yml" not in plain and "append:" in plain


def test_config_show_without_manifest(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("config", "show", cwd=tmp_path)
    assert proc.returncode == 1 and "no fdl.yml" in proc.stderr


def test_gpus_sets_visible_devices_and_world_size(fdl: Fdl, tmp_path: Path) -> None:
    (tmp_path / "fdl.yml").write_text(
        "commands:\n  show: python -c \"import os; print(os.environ['CUDA_VISIBLE_DEVICES'], "
        "os.environ['FLODL_WORLD_SIZE'])\"\n"
    )
    rows = ["0, A100, 40960, 40000, 8.0, 550.54", "1, A100, 40960, 40000, 8.0, 550.54"]
    assert fdl("--gpus", "all", "show", gpus=rows).stdout.strip() == "0,1 2"
    assert fdl("--gpus", "1", "show", gpus=rows).stdout.strip() == "1 1"
    proc = fdl("--gpus", "3", "show", gpus=rows)
    assert proc.returncode == 1 and "no GPU 3 on this machine (GPUs: 0, 1)" in proc.stderr
    proc = fdl("--gpus", "0,x", "show", gpus=rows)
    assert proc.returncode == 2 and "expected 'all' or distinct GPU indices" in proc.stderr
    proc = fdl("--gpus", "all", "show")
    assert proc.returncode == 1 and "no GPU found" in proc.stderr


def _error(fdl: Fdl, tmp_path: Path, text: str) -> str:
    (tmp_path / "fdl.yml").write_text(text)
    proc = fdl("anything", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr


def test_validation_errors_name_file_line_key_and_what_is_allowed(fdl: Fdl, tmp_path: Path) -> None:
    err = _error(fdl, tmp_path, "commands:\n  train:\n    rn: python t.py\n")
    assert "fdl.yml:3: commands.train.rn: unknown key; allowed: description, run, append" in err
    err = _error(fdl, tmp_path, "comands: {}\n")
    assert "fdl.yml:1: comands: unknown key; allowed: description, entry, commands" in err
    err = _error(fdl, tmp_path, "commands:\n  t:\n    run: a\n    path: b\n")
    assert "fdl.yml:2: commands.t: a command is exactly one kind" in err and "run and path" in err
    err = _error(fdl, tmp_path, "commands:\n  t:\n    append: x\n    description: d\n")
    assert "exactly one kind" in err and "has none" in err
    err = _error(fdl, tmp_path, "commands:\n  t:\n    options: {a: 1}\n")
    assert "fdl.yml:2: commands.t: a preset calls the manifest's entry:" in err
    err = _error(fdl, tmp_path, "commands:\n  setup: {run: x}\n")
    assert "'setup' is a built-in fdl command" in err
    err = _error(fdl, tmp_path, "entry: x\nddp: {modee: a}\ncommands: {}\n")
    assert "fdl.yml:2: ddp.modee: unknown ddp key; allowed: mode, policy" in err
    err = _error(fdl, tmp_path, "commands:\n  t: {path: nowhere}\n")
    assert "fdl.yml:2: commands.t.path: no fdl.yml in" in err
    err = _error(fdl, tmp_path, "commands:\n  t: [\n")
    assert "fdl.yml:3: invalid YAML" in err
    err = _error(fdl, tmp_path, "commands:\n  lonely:\n")
    assert "empty command needs" in err


def test_empty_entry_is_a_sibling_folder(fdl: Fdl, tmp_path: Path) -> None:
    (tmp_path / "fdl.yml").write_text("commands:\n  tools:\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "fdl.yml").write_text("commands:\n  hi: echo hi\n")
    assert fdl("tools", "hi").stdout.strip() == "hi"


def test_manifest_can_replace_run_and_test(fdl: Fdl, tmp_path: Path) -> None:
    (tmp_path / "fdl.yml").write_text("commands:\n  test: echo project tests\n")
    assert fdl("test").stdout.strip() == "project tests"
    assert "project commands (fdl.yml)" in fdl("--help").stdout


def test_gpus_after_the_command_as_well_as_before(fdl: Fdl, tmp_path: Path) -> None:
    (tmp_path / "fdl.yml").write_text(
        "commands:\n  show: python -c \"import os, sys; print(os.environ['CUDA_VISIBLE_DEVICES'], "
        "os.environ['FLODL_WORLD_SIZE'], *sys.argv[1:])\"\n"
    )
    rows = ["0, A100, 40960, 40000, 8.0, 550.54", "1, A100, 40960, 40000, 8.0, 550.54"]
    assert fdl("show", "--gpus", "0,1", gpus=rows).stdout.strip() == "0,1 2"
    assert fdl("show", "--gpus=1", gpus=rows).stdout.strip() == "1 1"
    assert fdl("--gpus", "1", "show", "--gpus", "1", gpus=rows).stdout.strip() == "1 1"
    # After `--` the words are the command's own.
    assert (
        fdl("show", "--gpus", "1", "--", "--gpus", "7", gpus=rows).stdout.strip() == "1 1 --gpus 7"
    )
    both = fdl("--gpus", "0", "show", "--gpus", "1", gpus=rows)
    assert both.returncode == 2 and "two --gpus given: 0 and 1" in both.stderr
    bare = fdl("show", "--gpus", gpus=rows)
    assert bare.returncode == 2 and "--gpus needs a value" in bare.stderr
    # A path command's sub-command takes it too.
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "fdl.yml").write_text(
        "commands:\n  show: python -c \"import os; print(os.environ['CUDA_VISIBLE_DEVICES'])\"\n"
    )
    with open(tmp_path / "fdl.yml", "a") as f:
        f.write("  sub: {path: sub}\n")
    assert fdl("sub", "show", "--gpus", "1", gpus=rows).stdout.strip() == "1"


def test_names_the_manifest_found_in_a_parent_folder(fdl: Fdl, tmp_path: Path) -> None:
    root = project(tmp_path / "proj")
    deep = root / "a" / "b"
    deep.mkdir(parents=True)
    proc = fdl("short", cwd=deep)
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == "short"
    assert f"fdl: using {(root / 'fdl.yml').resolve()}\n" in proc.stderr
    assert "fdl: using" not in fdl("short", cwd=root).stderr
    assert "fdl: using" not in fdl("-q", "short", cwd=deep).stderr
    shown = fdl("config", "show", cwd=deep)
    assert f"fdl: using {(root / 'fdl.yml').resolve()}" in shown.stderr


def test_the_clone_fdl_inside_a_project_uses_the_project_manifest(fdl: Fdl, tmp_path: Path) -> None:
    # A flodl clone's ./fdl exports FDL_ROOT=<clone> (for the workspace); run from inside a
    # project, fdl works on that project's fdl.yml.
    clone = tmp_path / "clone"
    (clone / "packages" / "flodl-cli").mkdir(parents=True)
    (clone / "packages" / "flodl-cli" / "pyproject.toml").write_text("")
    (clone / "noxfile.py").write_text("")
    root = project(tmp_path / "proj")
    proc = fdl("short", cwd=root, FDL_ROOT=str(clone))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "short"
    (root / "data").mkdir()
    shown = fdl("config", "show", cwd=root / "data", FDL_ROOT=str(clone))
    assert shown.returncode == 0 and "short" in shown.stdout, shown.stderr


def test_yaml_anchors_and_aliases_are_refused_with_file_and_line(fdl: Fdl, tmp_path: Path) -> None:
    err = _error(fdl, tmp_path, "options: &o {epochs: 1}\ncommands:\n  t: {options: *o}\n")
    assert "fdl.yml:1: YAML anchor &o is not accepted" in err and "write the value out" in err
    err = _error(fdl, tmp_path, "commands:\n  t: {run: x}\n  u: *t\n")
    assert "fdl.yml:3: YAML alias *t is not accepted" in err


def test_a_billion_laughs_is_refused_before_it_expands(fdl: Fdl, tmp_path: Path) -> None:
    # 9 levels of 9 aliases each: 9**9 (387 M) leaves once expanded, from ~400 bytes.
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    names = "abcdefghij"
    for prev, cur in itertools.pairwise(names):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    (tmp_path / "fdl.yml").write_text("\n".join([*lines, "commands: {t: echo}"]) + "\n")
    proc = fdl("t", cwd=tmp_path, timeout=30)
    assert proc.returncode == 2
    assert "fdl.yml:1: YAML anchor &a is not accepted" in proc.stderr
