"""What is computed: the model families, registered with the `transformers` Auto classes on import."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .elc_bert import (
    PRESETS,
    ElcBertConfig,
    ElcBertForMaskedLM,
    ElcBertForMultipleChoice,
    ElcBertForQuestionAnswering,
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    ElcBertModel,
    ElcBertPreTrainedModel,
    LtgBertConfig,
    convert_ltgbert_state_dict,
    relative_position_buckets,
)

__all__ = [
    "PRESETS",
    "ElcBertConfig",
    "LtgBertConfig",
    "ElcBertPreTrainedModel",
    "ElcBertModel",
    "ElcBertForMaskedLM",
    "ElcBertForSequenceClassification",
    "ElcBertForTokenClassification",
    "ElcBertForMultipleChoice",
    "ElcBertForQuestionAnswering",
    "convert_ltgbert_state_dict",
    "relative_position_buckets",
]

_AUTO_CLASSES = {
    AutoModel: ElcBertModel,
    AutoModelForMaskedLM: ElcBertForMaskedLM,
    AutoModelForSequenceClassification: ElcBertForSequenceClassification,
    AutoModelForTokenClassification: ElcBertForTokenClassification,
    AutoModelForMultipleChoice: ElcBertForMultipleChoice,
    AutoModelForQuestionAnswering: ElcBertForQuestionAnswering,
}


def _register():
    AutoConfig.register(ElcBertConfig.model_type, ElcBertConfig, exist_ok=True)
    # The published checkpoints say model_type "ltgbert": the same classes read them (see from_pretrained).
    AutoConfig.register(LtgBertConfig.model_type, LtgBertConfig, exist_ok=True)
    for auto_class, model_class in _AUTO_CLASSES.items():
        auto_class.register(ElcBertConfig, model_class, exist_ok=True)
        auto_class._model_mapping.register(LtgBertConfig, model_class, exist_ok=True)


_register()
