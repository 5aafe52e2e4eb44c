from .configuration_elc_bert import *  # noqa: F403
from .configuration_elc_bert import __all__ as _configuration_all
from .modeling_elc_bert import *  # noqa: F403
from .modeling_elc_bert import __all__ as _modeling_all

__all__ = _configuration_all + _modeling_all
