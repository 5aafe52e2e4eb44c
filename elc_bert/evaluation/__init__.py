"""Zero-shot evaluation of trained models (BLiMP-style minimal pairs)."""

from .blimp import causal_log_likelihoods, evaluate_blimp, load_minimal_pairs, pseudo_log_likelihoods

__all__ = ["causal_log_likelihoods", "evaluate_blimp", "load_minimal_pairs", "pseudo_log_likelihoods"]
