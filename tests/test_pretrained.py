"""Loading a model by name (elc_bert/pretrained.py): `load_model` looks for the tokenizer before it loads any weights
(in the folder, its tokenizer/ subfolder, or the run of an older checkpoint), refuses weights that did not load (an
encoder read as a masked LM, an ELC-BERT checkpoint read as LTG-BERT) but not modules the model has no place for nor
a tied decoder, and `language_model_kind` tells masked, causal or no LM head from a config or a model.
"""

import json
import logging
import shutil

import pytest
import torch
from helpers import BigramMaskedLM, save_encoder, tiny_bert_config, tiny_config_kwargs

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.pretrained import language_model_kind, load_model


def test_a_model_folder_without_tokenizer_is_named_before_the_model_loads(toy_tokenizer, tmp_path, monkeypatch):
    """The tokenizer is looked for first: the folder (and its tokenizer/ subfolder, where a pretraining run keeps its
    own) are named, and no weights are read."""
    import transformers

    folder = tmp_path / "model"
    ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer)))).save_pretrained(folder)

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the tokenizer was found")

    with monkeypatch.context() as patch:
        patch.setattr(transformers.AutoModelForMaskedLM, "from_pretrained", no_loading)
        with pytest.raises(FileNotFoundError, match=rf"no tokenizer in {folder} or their tokenizer/ subfolders"):
            load_model(str(folder))
    toy_tokenizer.save_pretrained(folder / "tokenizer")  # a pretraining run's layout
    model, tokenizer, kind = load_model(str(folder))
    assert kind == "masked" and len(tokenizer) == len(toy_tokenizer)


@pytest.mark.parametrize("architectures", [None, ["BertForMaskedLM"]], ids=["encoder", "relabelled"])
def test_load_model_refuses_an_encoder_without_mlm_head(toy_tokenizer, tmp_path, architectures):
    """Loaded as a masked LM, an encoder folder gets a random MLM head (a relabelled one scored 100% on BLiMP): the
    error names the folder, a few keys and their count, and the opt-in."""
    folder = save_encoder(tmp_path / "encoder", toy_tokenizer, architectures)
    with pytest.raises(ValueError) as error:
        load_model(str(folder), lm_head=True)
    message = str(error.value)
    assert message.startswith(f"{folder}: the checkpoint does not fill BertForMaskedLM")
    assert "missing from the checkpoint (randomly initialised): cls.predictions.bias" in message
    assert "(6 in all)" in message and "pooler" not in message  # a module the masked LM has no place for
    assert "allow_unloaded_weights=True" in message and "--allow-unloaded-weights" in message
    model, _, kind = load_model(str(folder), lm_head=True, allow_unloaded_weights=True)
    assert kind == "masked" and type(model).__name__ == "BertForMaskedLM"


def test_load_model_refuses_unexpected_weights(toy_tokenizer, tmp_path):
    """An ELC-BERT checkpoint whose config says LTG-BERT would silently drop its learned layer mixtures."""
    torch.manual_seed(0)
    ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer)))).save_pretrained(tmp_path)
    toy_tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "layer_combination": "residual"}))
    with pytest.raises(ValueError, match=r"not in the model's modules \(another architecture\): elc_bert\.encoder\.la"):
        load_model(str(tmp_path))


def test_pickled_weights_are_named_not_unpickled(toy_tokenizer, tmp_path):
    """A pytorch_model.bin holding more than tensors (here a NumPy array) is not unpickled (that can run code): the
    error names the folder and the file, says why, and how to convert it (not PyTorch's UnpicklingError)."""
    import numpy as np

    from elc_bert.models.errors import InputError

    model = ElcBertForMaskedLM(ElcBertConfig(**tiny_config_kwargs(vocab_size=len(toy_tokenizer))))
    toy_tokenizer.save_pretrained(tmp_path)
    model.config.save_pretrained(tmp_path)
    torch.save({**model.state_dict(), "step": np.zeros(1)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(InputError) as error:
        load_model(str(tmp_path))
    message = str(error.value)
    assert message.startswith(f"{tmp_path}: holds pickled PyTorch weights (pytorch_model.bin)")
    assert "not loaded, for safety" in message and "weights_only=False" in message and "save_pretrained" in message


def test_a_pretraining_checkpoint_read_as_a_masked_lm_is_not_refused(toy_tokenizer, tmp_path):
    """bert-base-uncased's layout: BertForPreTraining's pooler and next-sentence head are whole modules that the
    masked LM does not have; every weight the masked LM has loads, so it is scored without the opt-in."""
    from transformers import BertForPreTraining

    torch.manual_seed(0)
    BertForPreTraining(tiny_bert_config(toy_tokenizer)).save_pretrained(tmp_path)
    toy_tokenizer.save_pretrained(tmp_path)
    model, _, kind = load_model(str(tmp_path), lm_head=True)
    assert kind == "masked" and type(model).__name__ == "BertForMaskedLM"


def test_tied_decoder_missing_from_the_file_is_not_flagged(toy_tokenizer, tmp_path):
    """The decoder tied to the word embeddings is not saved; the library ties it on loading, so nothing is missing."""
    from safetensors import safe_open
    from transformers import BertForMaskedLM

    torch.manual_seed(0)
    BertForMaskedLM(tiny_bert_config(toy_tokenizer)).save_pretrained(tmp_path)
    toy_tokenizer.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as handle:
        assert "cls.predictions.decoder.weight" not in set(handle.keys())
    model, _, kind = load_model(str(tmp_path))
    assert kind == "masked" and model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_language_model_kind_of_configs_and_models(toy_tokenizer):
    """One rule for "masked, causal or no LM head", before loading (the config) and after (the model)."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel

    def config(architectures, **fields):
        return BertConfig(architectures=architectures, **fields)

    assert language_model_kind(config(["BertForMaskedLM"])) == "masked"
    assert language_model_kind(config(["ElcBertForMaskedLM"])) == "masked"  # ours: by its name
    assert language_model_kind(config(["XLMWithLMHeadModel"])) == "masked"  # listed as both: masked wins
    assert language_model_kind(config(["GPT2LMHeadModel"])) == "causal"
    assert language_model_kind(config(["BertLMHeadModel"], is_decoder=True)) == "causal"
    assert language_model_kind(config(None, is_decoder=True)) == "causal"
    assert language_model_kind(config(["BertModel"])) is None and language_model_kind(config(None)) is None
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(toy_tokenizer), n_embd=16, n_layer=1, n_head=2))
    assert language_model_kind(gpt2) == "causal"
    assert language_model_kind(BertModel(tiny_bert_config(toy_tokenizer))) is None
    assert language_model_kind(BigramMaskedLM(8)) is None  # no config, no output embedding: BLiMP scores it by PLL


def test_a_checkpoint_without_its_tokenizer_loads_with_the_runs(run, tmp_path, caplog):
    run_dir, _ = run
    old_run = tmp_path / "old-run"
    shutil.copytree(run_dir, old_run)
    checkpoint = old_run / "checkpoint-3"
    for path in checkpoint.glob("tokenizer*"):
        path.unlink()
    with caplog.at_level(logging.WARNING, logger="elc_bert.pretrained"):
        _, tokenizer, _ = load_model(str(checkpoint))
    assert "holds no tokenizer" in caplog.text and str(old_run) in caplog.text
    assert tokenizer.mask_token_id == 4
