"""Layer analysis: which layers count, and how they can be rearranged (Sun et al., "Transformer Layers as Painters",
arXiv 2407.09298)."""

from .interventions import (
    STRATEGIES,
    Parallel,
    apply_layer_plan,
    painters_plan,
    scale_layer_weights,
    skip_plan,
    swap_plan,
)
from .metrics import (
    CustomMetric,
    PseudoPerplexity,
    TaskMetric,
    depth_profiles,
    layer_stream,
    leave_one_out,
    linear_cka,
    painters_sweep,
    representation_metrics,
    text_batches,
    weight_statistics,
)
from .report import analyze, load_sentences

__all__ = [
    "CustomMetric",
    "STRATEGIES",
    "Parallel",
    "PseudoPerplexity",
    "TaskMetric",
    "analyze",
    "apply_layer_plan",
    "depth_profiles",
    "layer_stream",
    "leave_one_out",
    "linear_cka",
    "load_sentences",
    "painters_plan",
    "painters_sweep",
    "representation_metrics",
    "scale_layer_weights",
    "skip_plan",
    "swap_plan",
    "text_batches",
    "weight_statistics",
]
