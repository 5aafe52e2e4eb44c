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
from .manipulations import (
    add_weight_noise,
    edit_layer_weights,
    magnitude_prune,
    manipulation_sweep,
    predicted_weights,
    substitute_predicted_weights,
    truncate_rank,
    weight_predictability,
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
from .pruning import prune, prune_saved
from .recovery import recover_layer, recovery_speed
from .report import analyze, load_sentences

__all__ = [
    "CustomMetric",
    "STRATEGIES",
    "Parallel",
    "PseudoPerplexity",
    "TaskMetric",
    "add_weight_noise",
    "analyze",
    "apply_layer_plan",
    "depth_profiles",
    "edit_layer_weights",
    "layer_stream",
    "leave_one_out",
    "linear_cka",
    "load_sentences",
    "magnitude_prune",
    "manipulation_sweep",
    "painters_plan",
    "painters_sweep",
    "predicted_weights",
    "prune",
    "prune_saved",
    "recover_layer",
    "recovery_speed",
    "representation_metrics",
    "scale_layer_weights",
    "skip_plan",
    "substitute_predicted_weights",
    "swap_plan",
    "text_batches",
    "truncate_rank",
    "weight_predictability",
    "weight_statistics",
]
