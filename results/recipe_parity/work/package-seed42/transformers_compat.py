"""The names the model files take from `transformers`, with stand-ins where an older version lacks them.

In the package (on the transformers it requires) every name here is the library's own. The model files also travel as
remote code next to every saved checkpoint (`trust_remote_code=True`), and people load a Hub checkpoint on whatever
transformers they have (the BabyLM 2025 evaluation pipeline pins 4.51.3). There a name the installed version lacks is
replaced by the small stand-in below, which computes the same outputs; the stand-ins cover loading, inference and
fine-tuning on transformers 4.46 and later (`scripts/compat_matrix.py` checks each version).
"""

import copy
import functools
import importlib.util
import inspect
import logging

import torch
import torch.nn.functional as F
import transformers
from torch import nn

logger = logging.getLogger(__name__)


def _package_installed() -> bool:
    try:
        return importlib.util.find_spec("elc_bert") is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules
        return False


if __name__.split(".")[0] != "elc_bert" and _package_installed():  # this file runs as a checkpoint's remote code
    logger.warning(
        "%s runs the remote code copied next to a checkpoint, while the elc_bert package is installed here: "
        "`import elc_bert` before loading to use the package's own classes (then trust_remote_code is not needed).",
        __name__,
    )

try:  # transformers >= 5.0
    from transformers import PreTrainedConfig as _LibraryConfig
    from transformers import PreTrainedModel
except ImportError:
    from transformers import PretrainedConfig as _LibraryConfig

    class PreTrainedModel(transformers.PreTrainedModel):
        """Takes a model's config class from its `config: ...` annotation, as transformers >= 5.0 does."""

        def __init_subclass__(cls, **kwargs):
            super().__init_subclass__(**kwargs)
            config_class = vars(cls).get("__annotations__", {}).get("config")
            if isinstance(config_class, type):
                cls.config_class = config_class


try:
    from transformers import initialization as init
except ImportError:

    class init:  # noqa: N801 (stands in for the module `transformers.initialization`)
        """`torch.nn.init` under the names `transformers.initialization` gives them (and its `copy_`)."""

        normal_ = staticmethod(nn.init.normal_)
        trunc_normal_ = staticmethod(nn.init.trunc_normal_)
        zeros_ = staticmethod(nn.init.zeros_)
        ones_ = staticmethod(nn.init.ones_)

        @staticmethod
        @torch.no_grad()
        def copy_(tensor, other):
            return tensor.copy_(other)


try:
    from transformers.masking_utils import create_bidirectional_mask

    if "inputs_embeds" not in inspect.signature(create_bidirectional_mask).parameters:  # 5.0 to 5.1: input_embeds
        _create_bidirectional_mask = create_bidirectional_mask

        def create_bidirectional_mask(config, inputs_embeds, attention_mask=None, **kwargs):
            return _create_bidirectional_mask(config, inputs_embeds, attention_mask, **kwargs)

except ImportError:

    def create_bidirectional_mask(config, inputs_embeds, attention_mask=None, **kwargs):
        """A boolean B x 1 x 1 x T mask (True = attend) from a B x T one of 1s and 0s; None when there is none."""
        if attention_mask is None:
            return None
        return attention_mask.to(device=inputs_embeds.device, dtype=torch.bool)[:, None, None, :]


try:
    from transformers.modeling_layers import GradientCheckpointingLayer
except ImportError:

    class GradientCheckpointingLayer(nn.Module):
        """A block that `gradient_checkpointing_enable()` can checkpoint: it sets the two attributes used here."""

        gradient_checkpointing = False

        def __call__(self, *args, **kwargs):
            if self.gradient_checkpointing and self.training:
                return self._gradient_checkpointing_func(functools.partial(super().__call__, **kwargs), *args)
            return super().__call__(*args, **kwargs)


try:
    from transformers.utils.generic import can_return_tuple
except ImportError:

    def can_return_tuple(forward):
        """Lets `forward` (which returns a `ModelOutput`) return a tuple when called with `return_dict=False`."""

        @functools.wraps(forward)
        def wrapper(self, *args, return_dict=None, **kwargs):
            output = forward(self, *args, **kwargs)
            as_dict = return_dict if return_dict is not None else getattr(self.config, "use_return_dict", True)
            return output if as_dict else output.to_tuple()

        return wrapper


try:
    from transformers.utils.output_capturing import resolve_hidden_states_indices, selected_hidden_states
except ImportError:

    def selected_hidden_states(output_hidden_states):
        """The hidden state indices `output_hidden_states` selects, or None when it is a flag."""
        if isinstance(output_hidden_states, bool) or output_hidden_states is None:
            return None
        if isinstance(output_hidden_states, int):
            return [output_hidden_states]
        return list(output_hidden_states)

    def resolve_hidden_states_indices(model, selected, num_hidden_states):
        """`selected` with negative indices counted from the end; out-of-range ones dropped."""
        return {i % num_hidden_states for i in selected if -num_hidden_states <= i < num_hidden_states}


def _sdpa_with_bias(module, query, key, value, attention_mask, scaling, dropout=0.0, position_bias=None, **kwargs):
    """`scaled_dot_product_attention` with `position_bias` (B x H x T x T) added to the scores, for versions whose own
    "sdpa" function takes no bias. Returns the context (B x T x H x d) and None (no probabilities)."""
    mask = position_bias
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            floor = torch.finfo(query.dtype).min
            mask = attention_mask if mask is None else mask.masked_fill(~attention_mask, floor)
        else:
            mask = attention_mask if mask is None else mask + attention_mask
    context = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return context.transpose(1, 2).contiguous(), None


def _library_takes_position_bias() -> bool:
    try:
        from transformers.integrations import sdpa_attention
    except ImportError:
        return False
    return hasattr(sdpa_attention, "create_position_bias_mask")


try:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as _LIBRARY_ATTENTION
except ImportError:
    _LIBRARY_ATTENTION = None

if _LIBRARY_ATTENTION is not None and hasattr(_LIBRARY_ATTENTION, "get_interface") and _library_takes_position_bias():
    ALL_ATTENTION_FUNCTIONS = _LIBRARY_ATTENTION
else:

    class _AttentionFunctions:
        """`get_interface(name, default)` as transformers >= 5.2 has it: "sdpa" adds the position bias here."""

        def get_interface(self, name, default):
            if name == "sdpa":
                return _sdpa_with_bias
            if name in (None, "eager") or _LIBRARY_ATTENTION is None or name not in _LIBRARY_ATTENTION:
                return default
            return _LIBRARY_ATTENTION[name]

    ALL_ATTENTION_FUNCTIONS = _AttentionFunctions()


try:
    from transformers.configuration_utils import SubConfigSpec
except ImportError:

    class SubConfigSpec:
        """A sub-config's class and default model type, as transformers >= 5.2 declares them."""

        def __init__(self, config_class, model_type=None, optional=False):
            self.config_class, self.model_type, self.optional = config_class, model_type, optional


if hasattr(_LibraryConfig, "__dataclass_fields__"):  # configs are strict dataclasses: the library's own way
    from huggingface_hub.dataclasses import strict

    PreTrainedConfig = _LibraryConfig
else:

    def _fields(cls) -> dict:
        """The annotated class attributes of `cls` and its bases below `PreTrainedConfig`, with their defaults."""
        fields = {}
        for klass in reversed(cls.__mro__):
            if issubclass(klass, PreTrainedConfig) and klass is not PreTrainedConfig:
                for name in vars(klass).get("__annotations__", {}):
                    fields[name] = vars(klass).get(name, fields.get(name))
        return fields

    class PreTrainedConfig(_LibraryConfig):
        """A config whose fields are declared as annotated class attributes (as in transformers >= 5.2), on a version
        whose configs take their fields as `__init__` keyword arguments. `strict` gives a subclass its `__init__`."""

        sub_configs_defaults = {}

        def __post_init__(self, **kwargs):
            declared = {name: getattr(self, name) for name in _fields(type(self))}
            _LibraryConfig.__init__(self, **kwargs)  # sets its own defaults, some of them under our field names
            for name, value in declared.items():
                setattr(self, name, value)

    def strict(cls):
        """Gives a `PreTrainedConfig` subclass an `__init__` that takes its declared fields as keyword arguments,
        turns sub-config dicts into configs, and runs its `__post_init__` with the other keyword arguments."""
        fields = _fields(cls)
        specs = cls.sub_configs_defaults
        if specs:
            cls.sub_configs = {name: spec.config_class for name, spec in specs.items()}
            cls.is_composition = cls.has_no_defaults_at_init = True  # its default (no sub-config) cannot be built

        def __init__(self, **kwargs):
            for name, default in fields.items():
                setattr(self, name, kwargs.pop(name) if name in kwargs else copy.deepcopy(default))
            for name in specs:
                value = getattr(self, name)
                if isinstance(value, dict):
                    setattr(self, name, transformers.AutoConfig.for_model(**value))
            self.__post_init__(**kwargs)

        cls.__init__ = __init__
        return cls


__all__ = [
    "ALL_ATTENTION_FUNCTIONS",
    "GradientCheckpointingLayer",
    "PreTrainedConfig",
    "PreTrainedModel",
    "SubConfigSpec",
    "can_return_tuple",
    "create_bidirectional_mask",
    "init",
    "resolve_hidden_states_indices",
    "selected_hidden_states",
    "strict",
]
