"""What is computed: the model families, registered with the `transformers` Auto classes on import."""

from transformers import AutoConfig

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

# Each family's config -> {Auto class: model class}, registered with the Auto classes on import.
_AUTO_CLASSES = {
    configuration_elc_bert.ElcBertConfig: modeling_elc_bert.AUTO_CLASSES,
    configuration_layer_fusion.LayerFusionConfig: modeling_layer_fusion.AUTO_CLASSES,
}
for _config_class, _family in _AUTO_CLASSES.items():
    AutoConfig.register(_config_class.model_type, _config_class, exist_ok=True)
    for _auto_class, _model_class in _family.items():
        _auto_class.register(_config_class, _model_class, exist_ok=True)

# The published checkpoints say model_type "ltgbert": the ELC-BERT classes read them (see their from_pretrained).
AutoConfig.register(
    configuration_elc_bert.LtgBertConfig.model_type, configuration_elc_bert.LtgBertConfig, exist_ok=True
)
for _auto_class, _model_class in modeling_elc_bert.AUTO_CLASSES.items():
    _auto_class._model_mapping.register(configuration_elc_bert.LtgBertConfig, _model_class, exist_ok=True)
