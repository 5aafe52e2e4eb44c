"""elc_bert: models in which not every layer counts the same, and each layer may choose what it reads.

`import elc_bert` registers every model family with the `transformers` Auto classes.
"""

from .integrations import lora_config, sentence_transformer
from .models import *  # noqa: F401,F403
from .models import __all__ as _models_all
from .models.errors import InputError

__version__ = "0.1.0"
__all__ = [*_models_all, "InputError", "lora_config", "sentence_transformer"]
