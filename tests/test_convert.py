"""`elc-bert convert` (elc_bert/hub/convert.py): a checkpoint in the reference (LTG-BERT) layout becomes a folder of
this package whose outputs are the naive reference implementation's (tests/reference_impl.py), which `export` takes;
a folder whose own modeling code disagrees with the conversion is refused before anything is written.
"""

import json

import pytest
import torch
from helpers import REF_DIMS, padded_batch, write_reference_checkpoint
from helpers import word_level_tokenizer as _tokenizer
from reference_impl import naive_forward

from elc_bert import ElcBertForMaskedLM
from elc_bert.hub.convert import convert
from elc_bert.hub.export import export


def test_convert_a_reference_checkpoint(tmp_path):
    source = tmp_path / "reference"
    state_dict = write_reference_checkpoint(source, elc=True, fmt="bin", seed=5)
    _tokenizer(REF_DIMS["vocab_size"]).save_pretrained(source)
    out = convert(source, tmp_path / "converted")
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "elc_bert" and config["architectures"] == ["ElcBertForMaskedLM"]
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    model = ElcBertForMaskedLM.from_pretrained(out).eval()
    input_ids, attention_mask = padded_batch([8, 5], vocab_size=REF_DIMS["vocab_size"], seed=2)
    with torch.no_grad():
        logits = model(input_ids, attention_mask=attention_mask).logits
    naive = naive_forward(
        state_dict, input_ids, attention_mask, num_heads=REF_DIMS["num_heads"], layer_combination="elc"
    )["mlm_logits"]
    real = attention_mask.bool()
    assert (logits[real].double() - naive[real]).abs().max().item() <= 1e-5
    # The converted folder is what export takes.
    exported = export(out, tmp_path / "exported")
    assert json.loads((exported / "config.json").read_text())["auto_map"]["AutoModelForMaskedLM"].startswith("model")


FAKE_REFERENCE_CODE = {
    "configuration_ltgbert.py": """
from transformers import PreTrainedConfig


class LtgBertConfig(PreTrainedConfig):
    model_type = "ltgbert"
""",
    "modeling_ltgbert.py": """
import torch
from transformers import PreTrainedModel
from transformers.modeling_outputs import MaskedLMOutput

from .configuration_ltgbert import LtgBertConfig


class LtgBertForMaskedLM(PreTrainedModel):
    config_class = LtgBertConfig

    def __init__(self, config):
        super().__init__(config)
        self.offset = torch.nn.Parameter(torch.zeros(1))
        self.post_init()

    def forward(self, input_ids, attention_mask=None, **kwargs):
        return MaskedLMOutput(logits=torch.zeros(*input_ids.shape, self.config.vocab_size) + self.offset)
""",
}


def test_convert_checks_against_the_reference_code_before_writing(tmp_path):
    """A folder whose own modeling code disagrees with the conversion: convert refuses and writes nothing."""
    source = tmp_path / "reference"
    write_reference_checkpoint(source, elc=False, fmt="safetensors", seed=6)
    for name, code in FAKE_REFERENCE_CODE.items():
        (source / name).write_text(code)
    with pytest.raises(ValueError, match="against the reference"):
        convert(source, tmp_path / "converted")
    assert not (tmp_path / "converted").exists()
