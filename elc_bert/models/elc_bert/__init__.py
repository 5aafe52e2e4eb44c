from .configuration_elc_bert import PRESETS, ElcBertConfig, LtgBertConfig
from .modeling_elc_bert import (
    ElcBertForMaskedLM,
    ElcBertForMultipleChoice,
    ElcBertForQuestionAnswering,
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    ElcBertModel,
    ElcBertPreTrainedModel,
    convert_ltgbert_state_dict,
    ltgbert_architecture,
    relative_position_buckets,
)
