"""Zero-shot evaluation of trained models (BLiMP-style minimal pairs) and the sentence scores it rests on."""

from ..pretrained import is_causal_lm, language_model_kind, load_model
from ..scoring import causal_log_likelihoods, pseudo_log_likelihoods, token_pseudo_log_likelihoods
from .blimp import evaluate_blimp, load_minimal_pairs

__all__ = [
    "causal_log_likelihoods",
    "evaluate_blimp",
    "is_causal_lm",
    "language_model_kind",
    "load_model",
    "load_minimal_pairs",
    "pseudo_log_likelihoods",
    "token_pseudo_log_likelihoods",
]
