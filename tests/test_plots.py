"""The package's plots (`elc_bert/plots.py`): drawn on matplotlib Figure objects, so that importing the package or
drawing a plot never switches the backend of the program that uses it, nor leaves pyplot state behind."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from matplotlib.image import imread

# Imports every elc_bert module in a program that chose its own backend, then draws every shared plot and the
# modules' own (the scorecard's bars), checking the backend after each step.
PROGRAM = """
import importlib
import pkgutil
import sys
from pathlib import Path

import matplotlib

matplotlib.use("svg")  # the program's own choice
import elc_bert

modules = [module.name for module in pkgutil.walk_packages(elc_bert.__path__, "elc_bert.")]
for name in modules:
    importlib.import_module(name)
assert matplotlib.get_backend() == "svg", f"importing elc_bert switched the backend to {matplotlib.get_backend()}"

from elc_bert import plots
from elc_bert.evaluation.scorecard import bar_chart, build_scorecard

out = Path(sys.argv[1])
plots.plot_curves(out / "curves.png", {"train": ([1, 2, 3], [3.0, 2.0, 1.5])}, "step", "loss", "a run")
plots.plot_layer_weights(out / "alpha.png", {"a run": [[1.0, 0.0], [0.3, 0.7]]})
plots.plot_depth_profile(out / "depth.png", {"N=8": [0.1, 0.2, 0.7]})
plots.plot_means_against_counts(out / "means.png", {"a": ([8, 32], [40.0, 60.0], [5.0, None])}, "N", "F1 (%)", "t")
bar_chart(build_scorecard(out), out / "scorecard.png")
assert matplotlib.get_backend() == "svg", f"drawing switched the backend to {matplotlib.get_backend()}"
assert "matplotlib.pyplot" not in sys.modules, "a plot went through pyplot"
print("modules:", len(modules))
"""


@pytest.mark.slow
def test_importing_the_package_and_drawing_leave_the_backend_alone(tmp_path):
    """A program (a notebook, a GUI) that chose its own matplotlib backend keeps it: importing any elc_bert module
    switches nothing, and drawing a plot neither switches the backend nor touches pyplot."""
    environment = {key: value for key, value in os.environ.items() if key != "MPLBACKEND"}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split("modules:")[1]) > 20  # every module was imported, not just the package
    for name in ("curves.png", "alpha.png", "depth.png", "means.png", "scorecard.png"):
        assert (tmp_path / name).stat().st_size > 1000, name


@pytest.mark.slow
def test_importing_the_package_imports_no_matplotlib():
    """matplotlib is imported when a plot is drawn, not when the package (or any job of it) is imported."""
    program = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import elc_bert

        for module in pkgutil.walk_packages(elc_bert.__path__, "elc_bert."):
            importlib.import_module(module.name)
        print(sorted(name for name in sys.modules if name.split(".")[0] == "matplotlib"))
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


def test_layer_weights_panels(tmp_path):
    """One panel per run, side by side, from a list, an array or a tensor alike; the values are drawn as given."""
    from elc_bert import plots

    torch = pytest.importorskip("torch")
    alpha = torch.softmax(torch.randn(3, 4), dim=-1).tril(0)
    plots.plot_layer_weights(tmp_path / "one.png", {"one": alpha})
    plots.plot_layer_weights(tmp_path / "two.png", {"a": alpha.tolist(), "b": np.asarray(alpha)})
    one, two = imread(tmp_path / "one.png"), imread(tmp_path / "two.png")
    assert one.shape[0] == two.shape[0] and two.shape[1] == 2 * one.shape[1]

    figure = plots.new_figure(4, 3)
    axes = figure.subplots()
    image = plots.draw_layer_weights(axes, alpha, "title")
    assert np.allclose(image.get_array(), alpha.numpy()) and axes.get_title() == "title"
    assert [text.get_text() for text in axes.texts][:3] == [f"{v:.2f}" for v in (alpha[0, 0], alpha[1, 0], alpha[1, 1])]


def test_depth_profile_labels_the_first_fused_state():
    """DWAtt's fused states start at the embeddings (emb = z_0) or, without `fuse_embeddings`, at layer 1."""
    from elc_bert import plots

    for first_state, ticks in ((0, ["emb", "1", "2"]), (1, ["1", "2", "3"])):
        axes = plots.new_figure(4, 3).subplots()
        plots.draw_depth_profile(axes, {"N=8": [0.1, 0.2, 0.7]}, first_state=first_state)
        assert [label.get_text() for label in axes.get_xticklabels()] == ticks
        assert ("emb" in axes.get_xlabel()) == (first_state == 0)


@pytest.mark.parametrize("fuse_embeddings", [True, False])
def test_analysis_and_model_card_tell_the_plot_the_first_fused_state(tmp_path, monkeypatch, fuse_embeddings):
    """The layer analysis and the model card draw a DWAtt model's depth profile from z_0 or z_1, as it fuses."""
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, PreTrainedTokenizerFast

    from elc_bert import LayerFusionConfig, LayerFusionModel, plots
    from elc_bert.analysis import analyze, report
    from elc_bert.hub import model_card

    # Skipping a layer of a DWAtt model's backbone changes the number of states it fuses: no leave-one-out here.
    monkeypatch.setattr(report, "leave_one_out", lambda model, metric: {"metric": "m", "baseline": 1.0, "layers": []})
    drawn = []
    monkeypatch.setattr(plots, "draw_depth_profile", lambda *args, first_state=0, **kw: drawn.append(first_state))
    monkeypatch.setattr(
        plots, "plot_depth_profile", lambda path, profiles, title, first_state=0: drawn.append(first_state)
    )
    torch.manual_seed(0)
    backbone = BertConfig(
        vocab_size=16, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    model = LayerFusionModel(
        LayerFusionConfig(backbone_config=backbone, fusion="dwatt", fuse_embeddings=fuse_embeddings)
    )
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[MASK]", "a", "b", "c"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]"
    )
    analyze(model.eval(), tokenizer, ["a b c", "c b a a"], tmp_path / "analysis", strategies=())
    monkeypatch.setattr(model_card, "mean_depth_profiles", lambda run_dir: {8: (2, [0.2, 0.3, 0.5])})
    model_card._figures(model, model_card.Run("finetune-ner", dir=tmp_path), tmp_path)
    assert drawn == [0 if fuse_embeddings else 1] * 2
