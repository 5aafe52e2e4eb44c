"""The published ELC-BERT / LTG-BERT checkpoints: config.json `model_type: "ltgbert"`, the official code's key names.

Every ELC-BERT class's `from_pretrained` and the Auto classes read such a folder without remote code, through the
library's supported hooks (registered on import by `elc_bert/models/__init__.py`):

- its config.json becomes an `ElcBertConfig` (`elc_bert_config_dict`), through `LtgBertConfig`, the config class that
  `AutoConfig` finds for "ltgbert", and through `ElcBertConfig.get_config_dict` (`CHECKPOINT_FORMATS`) for the
  classes themselves. What config.json does not say (ELC or LTG-BERT, the `weighted_output` variant, often the number
  of layers) is read off the names and shapes of the weights (a safetensors header, a `.bin` mapped, not read), and
  the weights are checked against that config before any model is built. `AutoConfig` does not pass the Hub
  arguments (`subfolder`, `revision`, ...) on to a config class: the Auto classes refuse a checkpoint whose
  config.json is not the one at the folder or Hub name itself (`check_read_without_hub_arguments`);
- `conversion_mapping()`, the checkpoint conversion mapping of model type "elc_bert", renames the tensors while
  `from_pretrained` loads them. It applies on loading only: `save_pretrained` writes this package's own layout.
"""

import json
import logging
import os
import re

import torch
from safetensors import safe_open
from transformers.core_model_loading import WeightRenaming
from transformers.utils import CONFIG_NAME, cached_file

from .configuration_elc_bert import ElcBertConfig
from .errors import InputError
from .modeling_elc_bert import ElcBertForMaskedLM

logger = logging.getLogger(__name__)

MODEL_TYPE = "ltgbert"
WEIGHTS_FILES = ("model.safetensors", "pytorch_model.bin")  # in the order `from_pretrained` prefers them
# Entries of a reference config.json that describe the reference's code, not the model.
REFERENCE_ONLY = ("model_type", "architectures", "auto_map", "transformers_version", "dtype", "torch_dtype")
PAD_TOKEN_ID = 3  # the reference configs say 4, which is [MASK]

# Reference key -> ours, applied in turn; `from_pretrained` adds the base-model prefix where the model has one.
REFERENCE_KEYS = [
    (r"^embedding\.word_embedding\.", "embeddings.word_embeddings."),
    (r"^embedding\.", "embeddings."),
    (r"^transformer\.layers\.", "encoder.layers."),
    (r"\.mlp\.mlp\.1\.", ".mlp.up_proj."),
    (r"\.mlp\.mlp\.4\.", ".mlp.down_proj."),
    (r"^transformer\.prev_layer_weights$", "encoder.output_layer_weights"),
    (r"^classifier\.nonlinearity\.1\.", "lm_head.dense."),  # the MLM head
    (r"^classifier\.nonlinearity\.5\.", "lm_head.decoder."),
    (r"^head\.nonlinearity\.1\.", "classifier.dense."),  # a fine-tuning head
    (r"^head\.nonlinearity\.5\.", "classifier.out_proj."),
]
BUCKET_TABLES = re.compile(r"\.position_indices$")  # the reference's stored bucket tables: recomputed here
HEADS = ("lm_head.", "classifier.")


class ReferenceRenaming(WeightRenaming):
    """A renaming from the reference's key names to ours that applies on loading only.

    `save_pretrained` undoes a model type's conversion mapping (so that a converted checkpoint keeps its layout), for
    models built from scratch too: every ELC-BERT checkpoint would be written with the reference's names. The reverse
    of this renaming keeps each name as it is.
    """

    __slots__ = ()

    def reverse_transform(self) -> WeightRenaming:
        return self.copy(self.target_patterns, self.target_patterns)


def conversion_mapping() -> list[ReferenceRenaming]:
    """The renamings of `REFERENCE_KEYS`, as `register_checkpoint_conversion_mapping` takes them."""
    return [ReferenceRenaming(source, target) for source, target in REFERENCE_KEYS]


def weight_shapes(path, hub_kwargs: dict) -> tuple[str, dict[str, tuple[int, ...]]]:
    """The weights file of the checkpoint at `path` (a folder or a Hub name) and the shape of each tensor in it, read
    without loading the tensors."""
    for name in WEIGHTS_FILES:
        try:
            weights_file = cached_file(path, name, **hub_kwargs)
        except OSError:
            continue
        if weights_file.endswith(".safetensors"):
            with safe_open(weights_file, "pt") as handle:
                return weights_file, {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
        state_dict = torch.load(weights_file, map_location="meta", weights_only=True, mmap=True)
        return weights_file, {key: tuple(tensor.shape) for key, tensor in state_dict.items()}
    raise OSError(f"{path} has none of {list(WEIGHTS_FILES)}")


def elc_bert_config_dict(path, reference: dict, stated: dict, hub_kwargs: dict) -> dict:
    """The `ElcBertConfig` fields of the reference checkpoint at `path` whose config.json is `reference`.

    They are its config.json's, the known defects fixed, with the config arguments the caller `stated` to
    `from_pretrained`, and what the weights show (`architecture`). Raises ValueError naming the field or the tensors
    when they disagree (`check_weights`).
    """
    known = set(ElcBertConfig.__dataclass_fields__) - set(REFERENCE_ONLY)
    fields = {key: value for key, value in reference.items() if key in known}
    fields["pad_token_id"] = PAD_TOKEN_ID
    fields.update({key: value for key, value in stated.items() if key in known})
    weights_file, shapes = weight_shapes(path, hub_kwargs)
    fields.update(architecture(weights_file, shapes, fields))
    check_weights(weights_file, shapes, ElcBertConfig(**fields))
    return fields


def architecture(weights_file: str, shapes: dict, fields: dict) -> dict:
    """The config fields the weights imply: the number of layers, ELC when blocks hold `prev_layer_weights`, and
    `weighted_output` when the encoder does. A value in `fields` (config.json or stated) that contradicts them is an
    error; `base`, `zero` and `normalized` have the same tensors, so an unstated one of them is taken as `base`."""
    result = {}
    layers = [int(match.group(1)) for key in shapes if (match := re.match(r"transformer\.layers\.(\d+)\.", key))]
    if layers:
        count = max(layers) + 1
        if fields.get("num_hidden_layers", count) != count:
            stated = fields["num_hidden_layers"]
            raise InputError(f"{weights_file}: num_hidden_layers is {stated} but the weights hold {count} layers")
        result["num_hidden_layers"] = count
    if "transformer.prev_layer_weights" in shapes:
        result.update(layer_combination="elc", elc_variant="weighted_output")
    elif any(key.endswith(".prev_layer_weights") for key in shapes):
        variant = fields.get("elc_variant")
        if variant == "weighted_output":
            raise InputError(
                f"{weights_file}: elc_variant is 'weighted_output' but the weights have no output layer weights"
            )
        if variant is None:
            logger.warning(
                "The weights of this ELC-BERT checkpoint cannot tell its variant (base, zero and normalized have the "
                "same tensors): loading it as 'base', the released one. Pass elc_variant='zero' or 'normalized' to "
                "from_pretrained (or write it in config.json) for another."
            )
        result.update(layer_combination="elc", elc_variant=variant or "base")
    else:
        result["layer_combination"] = "residual"
    for key, value in result.items():
        if key in ("layer_combination", "elc_variant") and fields.get(key, value) != value:
            raise InputError(f"{weights_file}: {key} is {fields[key]!r} but the weights are those of {value!r}")
    return result


def check_weights(weights_file: str, shapes: dict, config: ElcBertConfig) -> None:
    """Raises ValueError naming the tensors when the weights do not fit `config`: a tensor of another shape, one that
    no ELC-BERT class reads, a backbone tensor missing, or a head with only some of its tensors.

    The expected shapes are those of an `ElcBertForMaskedLM` built on the meta device (no memory, no initialisation).
    A fine-tuning head (`classifier.*`) is checked for its hidden size: its number of outputs is the loading class's.
    """
    with torch.device("meta"):
        expected = {key: tuple(tensor.shape) for key, tensor in ElcBertForMaskedLM(config).state_dict().items()}
    hidden = (config.hidden_size,)
    expected |= {"classifier.dense.weight": hidden * 2, "classifier.dense.bias": hidden}
    renamings = conversion_mapping()
    found, unexpected = set(), []
    for key, shape in shapes.items():
        if BUCKET_TABLES.search(key):
            continue
        name = key
        for renaming in renamings:
            name, _ = renaming.rename_source_key(name)
        name = name if name.startswith(HEADS) else f"{ElcBertForMaskedLM.base_model_prefix}.{name}"
        if name == "classifier.out_proj.weight":
            want = shape[:1] + hidden
        elif name == "classifier.out_proj.bias":
            want = shape[:1]
        elif name in expected:
            want = expected[name]
        else:
            unexpected.append(key)
            continue
        if shape != want:
            raise InputError(
                f"{weights_file}: tensor {key!r} ({name}) has shape {shape}, but the config needs {want} "
                f"(vocab_size={config.vocab_size}, hidden_size={config.hidden_size}, "
                f"intermediate_size={config.intermediate_size}, position_bucket_size={config.position_bucket_size})"
            )
        found.add(name)
    if unexpected:
        raise InputError(f"{weights_file}: tensors that no ELC-BERT class reads: {sorted(unexpected)}")
    tied = {"lm_head.decoder.weight"} if config.tie_word_embeddings else set()
    heads = tuple(head for head in HEADS if any(name.startswith(head) for name in found))  # those present
    required = set(expected) | {"classifier.out_proj.weight", "classifier.out_proj.bias"}
    required = {name for name in required if not name.startswith(HEADS) or name.startswith(heads)}
    missing = sorted(required - found - tied)
    if missing:
        raise InputError(f"{weights_file}: tensors missing (by this package's names): {missing}")


class LtgBertConfig(ElcBertConfig):
    """The config of the published reference checkpoints (`model_type: "ltgbert"`), as `AutoConfig` finds it.

    Read from a checkpoint (`AutoConfig.from_pretrained`, the Auto model classes) it becomes that checkpoint's
    `ElcBertConfig`, its architecture read off the weights (`elc_bert_config_dict`): the Auto classes then pick the
    ELC-BERT classes, and a loaded model saves as one of this package's.
    """

    model_type = MODEL_TYPE

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        if config_dict.get("model_type") != MODEL_TYPE:
            return super().from_dict(config_dict, **kwargs)
        path = kwargs.get("name_or_path")  # `AutoConfig.from_pretrained` passes the folder so
        if not path:
            raise InputError(
                "an 'ltgbert' config.json is read together with its weights, which tell the architecture: load it "
                "with AutoConfig.from_pretrained(folder) or from_pretrained(folder) of a model class"
            )
        check_read_without_hub_arguments(path, config_dict)
        return ElcBertConfig.from_dict(elc_bert_config_dict(path, config_dict, kwargs, {}), **kwargs)


def check_read_without_hub_arguments(path, config_dict: dict) -> None:
    """Raises ValueError, naming the arguments, unless `config_dict` is the config.json at `path` itself (no
    subfolder, the default branch), whose weights `LtgBertConfig.from_dict` is about to read.

    `AutoConfig.from_pretrained` (which the Auto model classes call) drops the Hub arguments (`subfolder`,
    `revision`, `token`, `cache_dir`, `local_files_only`) before the config class sees the config dict, so the
    weights that tell the architecture would be read from the wrong place. A revision whose config.json is the same
    as the default branch's cannot be told apart here: its tensors still load (the model class gets the revision), in
    the default branch's architecture.
    """
    hint = (
        f"the Auto classes do not pass subfolder=, revision=, token=, cache_dir= or local_files_only= on to the "
        f"config class, and an 'ltgbert' config.json is read together with its weights: load {path!r} with a model "
        f"class (ElcBertForMaskedLM.from_pretrained({path!r}, subfolder=..., revision=...)), or give the Auto class "
        f"config=ElcBertConfig.from_pretrained({path!r}, <the same arguments>)"
    )
    try:
        config_file = str(path) if os.path.isfile(path) else cached_file(path, CONFIG_NAME)
    except OSError as error:
        raise InputError(f"{path!r} has no config.json of its own that can be read ({error}); {hint}") from error
    if config_file is None:  # `cached_file` answers None for a folder without config.json
        raise InputError(f"{path!r} has no config.json of its own; {hint}")
    with open(config_file, encoding="utf-8") as handle:
        if json.load(handle) != config_dict:
            raise InputError(f"the config.json read is not the one of {path!r} (main branch, no subfolder); {hint}")


__all__ = ["LtgBertConfig"]
