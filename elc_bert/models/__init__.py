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

from . import configuration_elc_bert, configuration_layer_fusion, modeling_elc_bert, modeling_layer_fusion
from .configuration_elc_bert import *  # noqa: F403
from .configuration_layer_fusion import *  # noqa: F403
from .modeling_elc_bert import *  # noqa: F403
from .modeling_layer_fusion import *  # noqa: F403

__all__ = (
    configuration_elc_bert.__all__
    + modeling_elc_bert.__all__
    + configuration_layer_fusion.__all__
    + modeling_layer_fusion.__all__
)

_AUTO_CLASSES = {
    ElcBertConfig: {  # noqa: F405
        AutoModel: ElcBertModel,  # noqa: F405
        AutoModelForMaskedLM: ElcBertForMaskedLM,  # noqa: F405
        AutoModelForSequenceClassification: ElcBertForSequenceClassification,  # noqa: F405
        AutoModelForTokenClassification: ElcBertForTokenClassification,  # noqa: F405
        AutoModelForMultipleChoice: ElcBertForMultipleChoice,  # noqa: F405
        AutoModelForQuestionAnswering: ElcBertForQuestionAnswering,  # noqa: F405
    },
    LayerFusionConfig: {  # noqa: F405
        AutoModel: LayerFusionModel,  # noqa: F405
        AutoModelForMaskedLM: LayerFusionForMaskedLM,  # noqa: F405
        AutoModelForSequenceClassification: LayerFusionForSequenceClassification,  # noqa: F405
        AutoModelForTokenClassification: LayerFusionForTokenClassification,  # noqa: F405
    },
}


def _register():
    for config_class, models in _AUTO_CLASSES.items():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        for auto_class, model_class in models.items():
            auto_class.register(config_class, model_class, exist_ok=True)
    # The published checkpoints say model_type "ltgbert": the ELC-BERT classes read them (see their from_pretrained).
    AutoConfig.register(LtgBertConfig.model_type, LtgBertConfig, exist_ok=True)  # noqa: F405
    for auto_class, model_class in _AUTO_CLASSES[ElcBertConfig].items():  # noqa: F405
        auto_class._model_mapping.register(LtgBertConfig, model_class, exist_ok=True)  # noqa: F405


_register()
