"""What other libraries need to take the package's models: PEFT's LoRA targets (`lora_config`) and a
sentence-transformers model around an encoder with the pooling of the sentence encoder it came from
(`sentence_transformer`, and `write_sentence_files` for a model folder such as an export).

PEFT finds default LoRA targets by `model_type` in its own table, which has no entry for ELC-BERT, LTG-BERT or a
layer-fusion model, and offers no supported way for a model outside transformers to add one; `lora_config` is the
documented helper that returns the right `LoraConfig` instead. It also names the modules that start fresh (a fusion
module, a task head) by their full paths in `modules_to_save`: PEFT matches those names as suffixes, and the obvious
`"fusion"` also matches the fusion model's base model `layer_fusion`, so that PEFT would copy and train the whole
backbone, while leaving it out leaves the fusion module frozen at its random initialisation.
"""

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .data.jsonl import read_json
from .extras import needs
from .models import ElcBertPreTrainedModel, LayerFusionPreTrainedModel
from .models.errors import InputError, MissingPackageError


@dataclass
class LoraOptions:
    """What a job's `lora:` key may set (`lora_config`'s arguments; every one may be left out)."""

    r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.1
    target_modules: list[str] | None = None


def with_lora(model, options: dict):
    """`model` wrapped by PEFT for LoRA training with `lora_config(model, **options)`: LoRA on the encoder, the
    fusion module and head trained in full."""
    with needs("adapters", "LoRA"):
        from peft import get_peft_model

    return get_peft_model(model, lora_config(model, **options))


def describe_lora(options: dict | None) -> str:
    """How a results table names the fine-tuning: "full fine-tuning", or LoRA with its rank and alpha."""
    if options is None:
        return "full fine-tuning"
    chosen = LoraOptions(**options)
    return f"LoRA (r {chosen.r}, alpha {chosen.lora_alpha}, dropout {chosen.lora_dropout})"


# LoRA targets of the package's encoders: the attention's query-key and value projections (PEFT's defaults for BERT
# are its query and value).
ELC_BERT_TARGETS = ("in_proj_qk", "in_proj_v")
TASK_TYPES = {"ForTokenClassification": "TOKEN_CLS", "ForSequenceClassification": "SEQ_CLS"}
TASK_TYPE_OF_HEAD = "from the head"  # lora_config's default task_type: read from the model's class (`TASK_TYPES`)


def lora_config(
    model,
    r: int = LoraOptions.r,
    lora_alpha: int = LoraOptions.lora_alpha,
    lora_dropout: float = LoraOptions.lora_dropout,
    target_modules=None,
    task_type: str | None = TASK_TYPE_OF_HEAD,
    **kwargs,
):
    """A `peft.LoraConfig` for `model`, an ELC-BERT / LTG-BERT model or a layer-fusion model over any backbone (or
    a stock encoder, which gets PEFT's own defaults: the jobs' `lora` key takes any model):

    - `target_modules` (default): the attention projections of the encoder (ELC/LTG-BERT: `in_proj_qk`,
      `in_proj_v`; a fusion model's backbone of another type: PEFT's own defaults for that type, e.g. BERT's
      `query`, `value`);
    - `modules_to_save`: what starts fresh and trains in full, saved with the adapter: the task head (`classifier`)
      and a fusion model's fusion module (`layer_fusion.fusion`: DWAtt, Concat or Base+n), by full path;
    - `task_type` (default): from the model's class (token or sequence classification; none for a masked LM).

    Further keyword arguments go to `LoraConfig` (e.g. `bias`, `use_rslora`).

        from peft import get_peft_model
        model = get_peft_model(model, elc_bert.lora_config(model, r=16))
    """
    with needs("adapters", "LoRA"):
        from peft import LoraConfig
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_TARGETS

    encoder = model
    save = []
    if isinstance(model, LayerFusionPreTrainedModel):
        encoder = model.base_model.backbone
        if list(model.base_model.fusion.parameters()):  # Last and Average have none
            save.append(f"{model.base_model_prefix}.fusion")
    if target_modules is None:
        if isinstance(encoder, ElcBertPreTrainedModel):
            target_modules = list(ELC_BERT_TARGETS)
        elif encoder.config.model_type in PEFT_TARGETS:
            target_modules = list(PEFT_TARGETS[encoder.config.model_type])
        else:
            raise InputError(f"no default LoRA targets for a {encoder.config.model_type} backbone: pass target_modules")
    if hasattr(model, "classifier"):
        save.append("classifier")
    if task_type is TASK_TYPE_OF_HEAD:
        task_type = next((task for suffix, task in TASK_TYPES.items() if type(model).__name__.endswith(suffix)), None)
    return LoraConfig(
        r=r,
        lora_alpha=lora_alpha,
        lora_dropout=lora_dropout,
        target_modules=target_modules,
        modules_to_save=save or None,
        task_type=task_type,
        **kwargs,
    )


def sentence_transformer(model, tokenizer, like=None, device: str | None = None):
    """A `sentence_transformers.SentenceTransformer` whose first module is `model` (an ELC-BERT / LTG-BERT encoder
    or a layer-fusion model: its token states, the fused ones for a fusion model), followed by the modules that come
    after the transformer in `like`: its Pooling and, where it has one, Normalize (a sentence-transformers folder or
    Hub name, such as the sentence encoder a fusion model was built on with `from_backbone`, which keeps the
    backbone's weights but not its pooling); without `like`, mean pooling. `.save(folder)` writes a folder that
    `SentenceTransformer(folder)` reads after `import elc_bert` (which registers the model classes).

        encoder = SentenceTransformer(...)  # e.g. all-MiniLM-L6-v2: mean pooling, then Normalize
        fused = LayerFusionModel.from_backbone(path, fusion="dwatt")
        elc_bert.sentence_transformer(fused, tokenizer, like=path).save("fused-sentence-encoder")
    """
    try:
        from sentence_transformers import SentenceTransformer, models
    except ImportError as error:
        raise MissingPackageError(
            f"a sentence-transformers model needs the sentence-transformers package ({error}): "
            "pip install 'elc_bert[sentence]'"
        ) from None

    from .data.tokenizer import save_tokenizer

    with tempfile.TemporaryDirectory() as scratch:  # sentence-transformers' Transformer module reads a folder
        model.save_pretrained(scratch)
        save_tokenizer(tokenizer, scratch)
        transformer = models.Transformer(scratch)
    if like is not None:
        after = list(SentenceTransformer(str(like), device="cpu"))[1:]
    else:
        after = [models.Pooling(transformer.get_word_embedding_dimension(), pooling_mode="mean")]
    return SentenceTransformer(modules=[transformer, *after], device=device)


# The files of a sentence-transformers folder that describe its modules (the transformer's own files aside)
SENTENCE_CONFIG_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


def write_sentence_files(model, tokenizer, out_dir, like=None) -> list[str]:
    """Makes the model folder `out_dir` (where `model` and `tokenizer` are saved) a sentence-transformers folder as
    well: writes modules.json, the sentence-transformers configs and the modules after the transformer (those of
    `like`, or mean pooling; see `sentence_transformer`) without touching the model's own files, so that
    `SentenceTransformer(out_dir)` (with `trust_remote_code=True` where the package is not imported) gives the
    sentence embeddings. Returns the names of the modules after the transformer, such as ["Pooling", "Normalize"]."""
    out_dir = Path(out_dir)
    encoder = sentence_transformer(model, tokenizer, like=like, device="cpu")
    with tempfile.TemporaryDirectory() as scratch:
        encoder.save(scratch)
        modules = read_json(Path(scratch) / "modules.json", "sentence-transformers' module list", kind=list)
        for name in SENTENCE_CONFIG_FILES:
            shutil.copyfile(Path(scratch) / name, out_dir / name)
        for module in modules:
            if module["path"]:  # the transformer is the folder itself ("")
                shutil.copytree(Path(scratch) / module["path"], out_dir / module["path"], dirs_exist_ok=True)
    return [module["type"].rpartition(".")[2] for module in modules if module["path"]]
