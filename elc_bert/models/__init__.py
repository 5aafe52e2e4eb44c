"""What is computed: the model families, registered with the `transformers` Auto classes on import."""

from transformers import AutoConfig
from transformers.conversion_mapping import register_checkpoint_conversion_mapping

from . import (
    configuration_elc_bert,
    configuration_layer_fusion,
    modeling_elc_bert,
    modeling_layer_fusion,
    reference_checkpoints,
)
from .configuration_elc_bert import *  # noqa: F403
from .configuration_layer_fusion import *  # noqa: F403
from .modeling_elc_bert import *  # noqa: F403
from .modeling_layer_fusion import *  # noqa: F403
from .reference_checkpoints import *  # noqa: F403

__all__ = (
    configuration_elc_bert.__all__
    + modeling_elc_bert.__all__
    + reference_checkpoints.__all__
    + configuration_layer_fusion.__all__
    + modeling_layer_fusion.__all__
)

# Each family's config -> {Auto class: model class}, registered with the Auto classes on import; `elc-bert export`
# reads it to find a model's family.
AUTO_CLASSES = {
    configuration_elc_bert.ElcBertConfig: modeling_elc_bert.AUTO_CLASSES,
    configuration_layer_fusion.LayerFusionConfig: modeling_layer_fusion.AUTO_CLASSES,
}
for _config_class, _family in AUTO_CLASSES.items():
    AutoConfig.register(_config_class.model_type, _config_class, exist_ok=True)
    for _auto_class, _model_class in _family.items():
        _auto_class.register(_config_class, _model_class, exist_ok=True)

# The published checkpoints (model_type "ltgbert") read as ELC-BERT ones: their config.json through AutoConfig and
# through the ELC-BERT config's own reader, their tensors renamed on loading (see reference_checkpoints.py).
AutoConfig.register(reference_checkpoints.MODEL_TYPE, reference_checkpoints.LtgBertConfig, exist_ok=True)
configuration_elc_bert.CHECKPOINT_FORMATS[reference_checkpoints.MODEL_TYPE] = reference_checkpoints.elc_bert_config_dict
register_checkpoint_conversion_mapping(
    configuration_elc_bert.ElcBertConfig.model_type, reference_checkpoints.conversion_mapping(), overwrite=True
)
