"""Layer importance for a training budget (`layer_budget`): leave-one-out on the masked-token loss."""

from .metrics import TaskMetric, leave_one_out


def leave_one_out_importance(model, tokenizer, batches: list[dict], seed: int = 0) -> list[float]:
    """Each layer's importance: the change (in %) of the masked-token loss with fixed masks (`TaskMetric`, seeded by
    `seed`) on `batches` (input_ids, attention_mask: B x T) when that layer alone is skipped. Negative: skipping it
    helps."""
    result = leave_one_out(model, TaskMetric(model, tokenizer, batches, seed=seed))
    return [row["change_percent"] for row in result["layers"]]
