"""flodl-hf: BERT, RoBERTa, DistilBERT, ALBERT, XLM-RoBERTa, DeBERTa-v2/v3, ELECTRA, MPNet and
ModernBERT checkpoints as flodl graphs, and sentence embeddings, without ``transformers``::

    from flodl_hf import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained("owner/name")
    model.predict(["a fine film"])        # [[("POSITIVE", 0.98), ("NEGATIVE", 0.02)]]
    model.freeze("bert.embeddings")       # graph tree paths follow HF's dotted names
    SentenceEncoder.from_pretrained("owner/name").encode(["a text"])  # (1, D)
"""

from flodl_core import check_siblings as _check_siblings

from . import models as models
from ._auto import AutoConfig as AutoConfig
from ._auto import AutoModel as AutoModel
from ._auto import AutoModelForMaskedLM as AutoModelForMaskedLM
from ._auto import AutoModelForQuestionAnswering as AutoModelForQuestionAnswering
from ._auto import AutoModelForSequenceClassification as AutoModelForSequenceClassification
from ._auto import AutoModelForTokenClassification as AutoModelForTokenClassification
from ._config import HfConfig as HfConfig
from ._export import export as export
from ._hub import hub_offline as hub_offline
from ._loader import KeyPolicy as KeyPolicy
from ._loader import WeightLoadReport as WeightLoadReport
from ._loader import load_weights as load_weights
from ._loader import plan_load as plan_load
from ._losses import masked_lm_loss as masked_lm_loss
from ._losses import question_answering_loss as question_answering_loss
from ._losses import sequence_classification_loss as sequence_classification_loss
from ._losses import token_classification_loss as token_classification_loss
from ._model import EncoderOutput as EncoderOutput
from ._model import HfModel as HfModel
from ._model import SpanLogits as SpanLogits
from ._sentence import Pooling as Pooling
from ._sentence import PoolingRequiredError as PoolingRequiredError
from ._sentence import SentenceEncoder as SentenceEncoder
from ._tasks import Answer as Answer
from ._tasks import MaskedLM as MaskedLM
from ._tasks import QuestionAnswering as QuestionAnswering
from ._tasks import SequenceClassifier as SequenceClassifier
from ._tasks import TokenClassifier as TokenClassifier
from ._tasks import TokenPrediction as TokenPrediction
from ._tokenizer import EncodedBatch as EncodedBatch
from ._tokenizer import HfTokenizer as HfTokenizer
from ._weights import read_weights as read_weights
from .models import SUPPORTED_MODEL_TYPES as SUPPORTED_MODEL_TYPES

__version__ = "0.1.0"
_check_siblings("flodl-hf", __version__, siblings=("flodl-core", "flodl-graph"))

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "Answer",
    "AutoConfig",
    "AutoModel",
    "AutoModelForMaskedLM",
    "AutoModelForQuestionAnswering",
    "AutoModelForSequenceClassification",
    "AutoModelForTokenClassification",
    "EncodedBatch",
    "EncoderOutput",
    "HfConfig",
    "HfModel",
    "HfTokenizer",
    "KeyPolicy",
    "MaskedLM",
    "Pooling",
    "PoolingRequiredError",
    "QuestionAnswering",
    "SentenceEncoder",
    "SequenceClassifier",
    "SpanLogits",
    "TokenClassifier",
    "TokenPrediction",
    "WeightLoadReport",
    "__version__",
    "export",
    "hub_offline",
    "load_weights",
    "masked_lm_loss",
    "models",
    "plan_load",
    "question_answering_loss",
    "read_weights",
    "sequence_classification_loss",
    "token_classification_loss",
]
