"""`layer_budget`, the pretrain job's training budget by layer importance: which settings it takes and their checks."""

from dataclasses import dataclass

from ..models.errors import InputError


@dataclass
class LayerBudget:
    """After `after_steps` optimizer steps, the layers' leave-one-out importance is measured (the masked-token loss
    with fixed masks on `samples` validation samples, the masks seeded by `seed`) and the weights of the `freeze`
    least important layers stop training (no weight gradients: their backward FLOPs are saved for the rest of the
    run)."""

    # (no required keys: `load_config` asks a mapping for them even when it is empty, the budget off)
    after_steps: int | None = None
    freeze: int | None = None
    samples: int = 64
    seed: int = 0

    def __post_init__(self):
        for name in ("after_steps", "freeze", "samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"layer_budget.{name} must be an integer >= 1, got {value!r}")
