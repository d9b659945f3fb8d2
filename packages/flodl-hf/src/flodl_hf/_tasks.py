"""Task models: sequence / token classification, extractive QA and masked-LM, each with its
text API (``predict``, ``answer``, ``fill_mask``) and its training loss (``compute_loss``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from flodl_core import ConfigError, check_int

from ._losses import (
    masked_lm_loss,
    question_answering_loss,
    sequence_classification_loss,
    token_classification_loss,
)
from ._model import HfModel, SpanLogits
from ._tokenizer import EncodedBatch


@contextmanager
def _inference(model: HfModel) -> Iterator[None]:
    """Eval mode and no autograd for the duration; the caller's mode is restored."""
    was = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was)


def _labels_to(labels: Any, device: torch.device) -> Tensor:
    """A tensor of labels on ``device`` (lists of numbers are accepted)."""
    if isinstance(labels, Tensor):
        return labels.to(device)
    try:
        return torch.as_tensor(labels, device=device)
    except (TypeError, ValueError, RuntimeError):
        # Label names instead of indices are the usual cause; torch's message names neither.
        raise ConfigError(
            f"labels must be numbers (class indices or targets) or a tensor, got {labels!r:.100}; "
            "map label names to indices first (model.config.id2label holds the names)"
        ) from None


def _no_texts(texts: object) -> bool:
    """An empty list (or tuple) of texts: a batch with nothing to predict."""
    return isinstance(texts, list | tuple) and len(texts) == 0


class SequenceClassifier(HfModel):
    """``(B, S) -> logits (B, C)``."""

    task = "seqcls"

    def _output(self, out: Tensor) -> Tensor:
        return out

    def compute_loss(self, encoded: EncodedBatch, labels: Any) -> Tensor:
        """``labels``: ``(B,)`` class indices, ``(B, C)`` floats (multi-label) or ``(B,)`` floats
        with one output (regression); ``config.problem_type`` wins when set."""
        logits = self.forward_encoded(encoded)
        labels = _labels_to(labels, logits.device)
        return sequence_classification_loss(logits, labels, self.config.problem_type)

    def predict(self, texts: str | Sequence[str]) -> list[list[tuple[str, float]]]:
        """Per text, every ``(label, probability)`` sorted by probability, highest first.

        Softmax over the classes; sigmoid per class for multi-label or one-output models. No
        texts, no predictions (``[]``), as :meth:`SentenceEncoder.encode` gives no rows.
        """
        if _no_texts(texts):
            return []
        enc = self._require_tokenizer().encode(texts)
        with _inference(self):
            logits = self.forward_encoded(enc).float()
        multi = self.config.problem_type == "multi_label_classification" or logits.shape[-1] == 1
        probs = torch.sigmoid(logits) if multi else torch.softmax(logits, dim=-1)
        names = self.labels
        return [
            sorted(((names[i], float(p)) for i, p in enumerate(row)), key=lambda t: -t[1])
            for row in probs.cpu()
        ]


@dataclass(frozen=True)
class TokenPrediction:
    """One sub-token's label. ``attends`` is False for padding; ``start`` / ``end`` are the
    token's character span in the text (``0, 0`` for special tokens and padding)."""

    token: str
    label: str
    score: float
    attends: bool
    start: int
    end: int


class TokenClassifier(HfModel):
    """``(B, S) -> logits (B, S, C)``."""

    task = "tokcls"

    def _output(self, out: Tensor) -> Tensor:
        return out

    def compute_loss(self, encoded: EncodedBatch, labels: Any) -> Tensor:
        """``labels: (B, S)`` class indices, -100 where no loss is wanted (special tokens,
        padding, continuation sub-tokens)."""
        logits = self.forward_encoded(encoded)
        return token_classification_loss(logits, _labels_to(labels, logits.device))

    def predict(self, texts: str | Sequence[str]) -> list[list[TokenPrediction]]:
        """Per text, per sub-token: the argmax label of the softmax and its probability (no
        texts: ``[]``)."""
        if _no_texts(texts):
            return []
        enc = self._require_tokenizer().encode(texts)
        with _inference(self):
            probs = torch.softmax(self.forward_encoded(enc).float(), dim=-1).cpu()
        scores, best = probs.max(dim=-1)
        names = self.labels
        out: list[list[TokenPrediction]] = []
        for b in range(len(enc)):
            row = []
            for t, token in enumerate(enc.tokens[b]):
                start, end = enc.offsets[b][t]
                row.append(
                    TokenPrediction(
                        token,
                        names[int(best[b, t])],
                        float(scores[b, t]),
                        bool(enc.attention_mask[b, t]),
                        start,
                        end,
                    )
                )
            out.append(row)
        return out


@dataclass(frozen=True)
class Answer:
    """An extracted answer: ``text == context[start:end]`` (character offsets) and ``score``,
    the mean of the start and end probabilities of the chosen span."""

    text: str
    start: int
    end: int
    score: float


class QuestionAnswering(HfModel):
    """``(B, S) -> SpanLogits(start_logits (B, S), end_logits (B, S))``."""

    task = "qa"

    def _output(self, out: Tensor) -> SpanLogits:
        start, end = out.split(1, dim=-1)
        return SpanLogits(start.squeeze(-1).contiguous(), end.squeeze(-1).contiguous())

    def compute_loss(self, encoded: EncodedBatch, labels: Any) -> Tensor:
        """``labels = (start_positions, end_positions)``, token indices ``(B,)`` each."""
        if not isinstance(labels, tuple | list) or len(labels) != 2:
            raise ConfigError("question answering labels are (start_positions, end_positions)")
        out = self.forward_encoded(encoded)
        device = out.start_logits.device
        start, end = _labels_to(labels[0], device), _labels_to(labels[1], device)
        return question_answering_loss(out.start_logits, out.end_logits, start, end)

    def answer(self, question: str, context: str) -> Answer:
        """The best span of ``context`` answering ``question``."""
        return self.answer_batch([(question, context)])[0]

    def answer_batch(self, pairs: Sequence[tuple[str, str]]) -> list[Answer]:
        """Best spans for ``(question, context)`` pairs.

        Start and end probabilities are softmaxes over the whole sequence; among context tokens
        the span ``i <= j`` maximising ``p_start[i] + p_end[j]`` wins (no length cap). No
        pairs, no answers (``[]``).
        """
        pairs = list(pairs)
        if not pairs:
            return []
        enc = self._require_tokenizer().encode_pairs(pairs)
        with _inference(self):
            out = self.forward_encoded(enc)
        p_start = torch.softmax(out.start_logits.float(), dim=-1).cpu()
        p_end = torch.softmax(out.end_logits.float(), dim=-1).cpu()
        ctx = enc.sequence_ids == 1
        answers = []
        for b, (_, context) in enumerate(pairs):
            if not bool(ctx[b].any()):
                raise ConfigError(
                    f"pair {b}: no context tokens survived tokenisation; nothing to extract from"
                )
            neg = torch.tensor(float("-inf"))
            start = torch.where(ctx[b], p_start[b], neg)
            # Best start at or before each position (running max), then the best end.
            best_start, where = torch.cummax(start, dim=0)
            total = torch.where(ctx[b], best_start + p_end[b], neg)
            j = int(total.argmax())
            i = int(where[j])
            c0, c1 = enc.offsets[b][i][0], enc.offsets[b][j][1]
            answers.append(Answer(context[c0:c1], c0, c1, float(total[j]) / 2))
        return answers


class MaskedLM(HfModel):
    """``(B, S) -> logits (B, S, V)``."""

    task = "mlm"

    def _output(self, out: Tensor) -> Tensor:
        return out

    def compute_loss(self, encoded: EncodedBatch, labels: Any) -> Tensor:
        """``labels: (B, S)`` original token ids at masked positions, -100 elsewhere."""
        logits = self.forward_encoded(encoded)
        return masked_lm_loss(logits, _labels_to(labels, logits.device))

    def fill_mask(self, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """For each mask token in ``text`` (``[MASK]`` or ``<mask>``), the ``top_k``
        ``(token, probability)`` candidates, most likely first."""
        top_k = check_int(top_k, "top_k", ge=1, expected="a positive integer")
        tok = self._require_tokenizer()
        mask_id = tok.token_to_id(tok.mask_token)
        enc = tok.encode([text])
        where = (enc.input_ids[0] == mask_id).nonzero().flatten().tolist()
        if not where:
            raise ConfigError(f"no {tok.mask_token} in the text: {text!r}")
        with _inference(self):
            logits = self.forward_encoded(enc)[0].float().cpu()
        out = []
        for pos in where:
            probs, ids = torch.softmax(logits[pos], dim=-1).topk(min(top_k, logits.shape[-1]))
            pairs = zip(probs.tolist(), ids.tolist(), strict=True)
            out.append([(tok.decode([i]).strip(), p) for p, i in pairs])
        return out
