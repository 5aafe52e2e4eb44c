from .configuration_layer_fusion import *  # noqa: F403
from .configuration_layer_fusion import __all__ as _configuration_all
from .modeling_layer_fusion import *  # noqa: F403
from .modeling_layer_fusion import __all__ as _modeling_all

__all__ = _configuration_all + _modeling_all
