"""``fdl hf embed|classify|fill-mask|export|verify-export MODEL ...``: flodl-hf from the shell.

``MODEL`` is a local folder or an ``owner/name`` Hub repo. flodl-hf (and torch) are imported
only when a subcommand runs; ``verify-export`` also needs ``transformers``, the reference it
checks an export against. Expected failures print one ``fdl hf: error: ...`` line and exit 1.
Options and positional words mix in any order (``embed MODEL --batch-size 2 "a" "b"``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

TASKS = ("base", "seqcls", "tokcls", "qa", "mlm")
_AUTO = {
    "base": "AutoModel",
    "seqcls": "AutoModelForSequenceClassification",
    "tokcls": "AutoModelForTokenClassification",
    "qa": "AutoModelForQuestionAnswering",
    "mlm": "AutoModelForMaskedLM",
}
_SUFFIX_TASK = {
    "ForSequenceClassification": "seqcls",
    "ForTokenClassification": "tokcls",
    "ForQuestionAnswering": "qa",
    "ForMaskedLM": "mlm",
    "Model": "base",
}
_DTYPES = ("float32", "float16", "bfloat16")


class _Failure(Exception):
    """An expected failure of a subcommand: one line, exit code 1."""


class _Intermixed(argparse.ArgumentParser):
    """Parses options and positionals in any order: plain argparse gives ``MODEL TEXT...`` to
    the positionals at the first run of words, so ``MODEL --top-k 2 TEXT`` would leave ``TEXT``
    unrecognized. ``parse_known_intermixed_args`` calls ``parse_known_args`` itself (twice),
    hence the flag."""

    _mixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._mixing:
            return super().parse_known_args(args, namespace)
        self._mixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._mixing = False


def _intermixed(base: type[argparse.ArgumentParser]) -> type[argparse.ArgumentParser]:
    """``base`` (fdl's parser, with its error style) that also mixes options and words."""
    if issubclass(base, _Intermixed):
        return base
    return type(f"Intermixed{base.__name__}", (_Intermixed, base), {})


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("hf", help="flodl-hf tasks: embed, classify, fill-mask, export")
    p.description = (
        "Run flodl-hf models from the shell. MODEL is a local folder or an 'owner/name' Hub "
        "repo (HF_HUB_OFFLINE=1 reads only the local cache)."
    )
    hs = p.add_subparsers(
        dest="hf_command",
        metavar="SUBCOMMAND",
        required=True,
        parser_class=_intermixed(type(p)),
    )

    e = hs.add_parser("embed", help="sentence embeddings (a sentence-transformers folder)")
    e.add_argument("model", metavar="MODEL")
    e.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed")
    e.add_argument("--file", help="read texts from this file, one per line ('-': stdin)")
    e.add_argument("--batch-size", type=int, default=32)
    e.add_argument(
        "--pooling", help="cls, mean, max or mean_sqrt_len (needed when MODEL has no modules.json)"
    )
    e.add_argument("--out", help="write the (N, D) embeddings to this .safetensors file")

    c = hs.add_parser("classify", help="sequence classification: labels with probabilities")
    c.add_argument("model", metavar="MODEL")
    c.add_argument("texts", nargs="*", metavar="TEXT")
    c.add_argument("--file", help="read texts from this file, one per line ('-': stdin)")
    c.add_argument("--top-k", type=int, default=3, help="labels shown per text (default 3)")
    c.add_argument("--json", action="store_true", help="one JSON object per text")

    f = hs.add_parser("fill-mask", help="candidates for each [MASK] / <mask> in a text")
    f.add_argument("model", metavar="MODEL")
    f.add_argument("text", metavar="TEXT")
    f.add_argument("--top-k", type=int, default=5)
    f.add_argument("--json", action="store_true")

    x = hs.add_parser("export", help="load MODEL and write it back in HF format")
    x.add_argument("model", metavar="MODEL")
    x.add_argument("out", metavar="OUT_DIR")
    x.add_argument("--task", choices=TASKS, help="head to load (default: from config.json)")
    x.add_argument("--dtype", choices=_DTYPES, help="convert the weights before writing")
    x.add_argument("--overwrite", action="store_true", help="replace an existing export")

    v = hs.add_parser("verify-export", help="check an export against transformers")
    v.add_argument("folder", metavar="DIR")
    v.add_argument("--task", choices=TASKS, help="head to check (default: from config.json)")
    v.add_argument("--tol", type=float, default=1e-5, help="largest |difference| allowed")


def run(args: argparse.Namespace) -> int:
    try:
        import flodl_hf  # noqa: F401 - checked here so that a missing package is one line
    except ImportError as e:
        return _error(f"flodl-hf is not installed ({e}); fix: fdl add flodl-hf --install")
    from flodl_core import FlodlError

    handler = {
        "embed": _embed,
        "classify": _classify,
        "fill-mask": _fill_mask,
        "export": _export,
        "verify-export": _verify_export,
    }[args.hf_command]
    try:
        return handler(args)
    except (FlodlError, _Failure) as e:
        return _error(str(e))


def _error(message: str) -> int:
    first, _, rest = message.partition("\n")
    print(f"fdl hf: error: {first}", file=sys.stderr)
    if rest:
        print(rest, file=sys.stderr)
    return 1


def _texts(args: argparse.Namespace) -> list[str]:
    texts = list(args.texts)
    if args.file:
        if args.file == "-":
            texts += [line.rstrip("\n") for line in sys.stdin if line.strip()]
        else:
            try:
                with open(args.file, encoding="utf-8") as fh:
                    texts += [line.rstrip("\n") for line in fh if line.strip()]
            except OSError as e:
                raise _Failure(f"cannot read --file {args.file}: {e.strerror}") from None
    if not texts:
        raise _Failure("no texts given: pass TEXT arguments or --file PATH")
    return texts


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise _Failure(f"{name} must be a positive integer, got {value}")


def _embed(args: argparse.Namespace) -> int:
    from flodl_hf import PoolingRequiredError, SentenceEncoder

    _positive("--batch-size", args.batch_size)
    texts = _texts(args)
    try:
        enc = SentenceEncoder.from_pretrained(args.model, pooling=args.pooling)
    except PoolingRequiredError as e:
        others = ", ".join(m for m in e.choices if m != "mean")
        raise _Failure(
            f"{e.source} {e.reason}: pass --pooling mean (or {others}) to choose one"
        ) from None
    out = enc.encode(texts, batch_size=args.batch_size).float().cpu()
    if args.out:
        _save_embeddings(out, args.out)
        print(f"wrote {tuple(out.shape)} embeddings to {args.out}")
        return 0
    for row in out.tolist():
        print(json.dumps([round(v, 6) for v in row]))
    return 0


def _save_embeddings(tensor: Any, path: str) -> None:
    import os

    from safetensors.torch import save_file

    # flodl-hf (hence flodl-core) is installed whenever this command runs
    from flodl_core import atomic_path

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise _Failure(f"--out {path}: folder {folder} does not exist")
    with atomic_path(path) as tmp:  # the usual umask mode, not mkstemp's 0600
        save_file({"embeddings": tensor.contiguous()}, str(tmp))


def _classify(args: argparse.Namespace) -> int:
    from flodl_hf import AutoModelForSequenceClassification

    _positive("--top-k", args.top_k)
    texts = _texts(args)
    model = AutoModelForSequenceClassification.from_pretrained(args.model)
    _warn_fresh_head(args.model, model)
    for text, ranked in zip(texts, model.predict(texts), strict=True):
        top = ranked[: args.top_k]
        if args.json:
            print(json.dumps({"text": text, "labels": [[n, round(p, 6)] for n, p in top]}))
        else:
            print(f"{text}\t" + ", ".join(f"{n} {p:.4f}" for n, p in top))
    return 0


def _fill_mask(args: argparse.Namespace) -> int:
    from flodl_hf import AutoModelForMaskedLM

    _positive("--top-k", args.top_k)
    model = AutoModelForMaskedLM.from_pretrained(args.model)
    _warn_fresh_head(args.model, model)
    slots = model.fill_mask(args.text, top_k=args.top_k)
    if args.json:
        print(json.dumps([[[t, round(p, 6)] for t, p in slot] for slot in slots]))
        return 0
    for i, slot in enumerate(slots):
        print(f"mask {i}: " + ", ".join(f"{t} {p:.4f}" for t, p in slot))
    return 0


def _warn_fresh_head(source: str, model: Any) -> None:
    """One stderr line when part of ``model`` was initialised at random because its checkpoint
    lacks it (an encoder checkpoint loaded for a task): its predictions are noise, not answers."""
    fresh = model.load_report.initialized
    if not fresh:
        return
    prefix = model.prefix + "."
    parts = sorted({".".join(k.split(".")[: 2 if k.startswith(prefix) else 1]) for k in fresh})
    print(
        f"fdl hf: warning: the task head of {source} is freshly initialised (its checkpoint "
        f"has no {', '.join(parts)}: {len(fresh)} tensors drawn at random); these predictions "
        "are meaningless until the model is fine-tuned",
        file=sys.stderr,
    )


def _task_of(folder: Any, task: str | None) -> str:
    """``--task``, else the task of config.json's first architecture, else ``base``."""
    if task is not None:
        return task
    from flodl_hf import AutoConfig

    arch = (AutoConfig.from_pretrained(folder).raw.get("architectures") or [""])[0]
    return next((t for suffix, t in _SUFFIX_TASK.items() if arch.endswith(suffix)), "base")


def _export(args: argparse.Namespace) -> int:
    import torch

    import flodl_hf

    task = _task_of(args.model, args.task)
    dtype = getattr(torch, args.dtype) if args.dtype else None
    model = getattr(flodl_hf, _AUTO[task]).from_pretrained(args.model, dtype=dtype)
    out = flodl_hf.export(model, args.out, overwrite=args.overwrite)
    n = len(model.hf_state_dict())
    print(f"exported {model.architecture} ({n} tensors, {model.dtype}) to {out}")
    return 0


def _verify_export(args: argparse.Namespace) -> int:
    import torch

    import flodl_hf

    try:
        import transformers
    except ImportError:
        raise _Failure(
            "verify-export compares against transformers, which is not installed; "
            "fix: pip install transformers"
        ) from None
    task = _task_of(args.folder, args.task)
    ours = getattr(flodl_hf, _AUTO[task]).from_pretrained(args.folder, tokenizer=False)
    ref_cls = getattr(transformers, _AUTO[task])
    ref, info = ref_cls.from_pretrained(args.folder, output_loading_info=True)
    ref.eval()
    problems = {k: v for k, v in info.items() if k != "error_msgs" and v}
    if problems:
        raise _Failure(f"transformers reports {json.dumps(problems, default=str)}")
    cfg = ours.config
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (2, 12), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    ids[1, 8:] = cfg.pad_token_id
    with torch.no_grad():
        got = _tensors(ours(ids, mask))
        exp = _tensors(ref(input_ids=ids, attention_mask=mask))
    diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, exp, strict=True))
    line = f"{ours.architecture}: {len(ours.hf_state_dict())} tensors, max |diff| {diff:.3g}"
    if diff > args.tol:
        raise _Failure(f"{line} exceeds --tol {args.tol:g}")
    print(f"ok: {line} (tol {args.tol:g}); no missing or unexpected keys")
    return 0


def _tensors(out: Any) -> list[Any]:
    """The comparable tensors of a flodl-hf or transformers output, in the same order."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    for names in (("start_logits", "end_logits"), ("logits",), ("last_hidden_state",)):
        if all(getattr(out, n, None) is not None for n in names):
            return [getattr(out, n) for n in names]
    raise _Failure(f"cannot compare an output of type {type(out).__name__}")
