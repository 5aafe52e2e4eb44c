"""Which transformers versions load what this package saves, without the package: a compatibility matrix.

For each version, a throwaway `pip install --target` folder holds that transformers (with the tokenizers and
huggingface_hub it was released with) in front of this environment's torch. A fresh process in which `elc_bert` cannot
be imported loads, from folders made here by the installed package:

- an exported ELC-BERT masked LM (`elc-bert export`), an exported LTG-BERT token classifier, an exported DWAtt fusion
  model over ELC-BERT, and the ELC-BERT masked LM as plain `save_pretrained` wrote it;
- each with `AutoModelFor*.from_pretrained(..., trust_remote_code=True)` and its tokenizer with a plain
  `AutoTokenizer.from_pretrained` (no custom code);
- and compares the token ids and the logits on a padded batch with the package's own (real tokens only);
- and runs each exported model's card snippet for `transformers`-only users (its `pipeline(...,
  trust_remote_code=True)`, `model_card.usage_snippet`) with the folder in place of the repo id.

    python scripts/compat_matrix.py                       # every version of VERSIONS and the installed one
    python scripts/compat_matrix.py --versions 4.51.3     # one
Prints a markdown table (the one in docs/guides/publishing.md); `--json FILE` also writes the numbers. Exit status 1
when a load or a card's snippet fails or a difference exceeds 1e-5.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "wikitext2_train.txt"
# transformers version -> the tokenizers and huggingface_hub installed beside it (the newest each one accepts)
VERSIONS = {
    "4.46.3": ("tokenizers==0.20.3", "huggingface-hub==0.36.2"),
    "4.51.3": ("tokenizers==0.21.4", "huggingface-hub==0.36.2"),  # the BabyLM 2025 evaluation pipeline's pin
    "4.57.1": ("tokenizers==0.22.2", "huggingface-hub==0.36.2"),
    "5.0.0": ("tokenizers==0.22.2", "huggingface-hub==1.33.0"),
}
INSTALLED = "installed"  # this environment's own transformers (the pinned one under `make`)
TOLERANCE = 1e-5
SENTENCES = ["The cat [MASK] on the mat.", "Valkyria Chronicles III is a tactical role playing game.", "It was 1999. "]
DEFAULT_TARGETS = REPO / ".venv" / "compat"

CHILD = """
import contextlib, io, json, sys
sys.modules["elc_bert"] = None  # the package cannot be imported here
import torch, transformers
cases, expected = json.loads(sys.argv[1]), torch.load(sys.argv[2])
report = {"transformers": transformers.__version__}
for name, (folder, auto_class, snippet) in cases.items():
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        batch = tokenizer(expected["sentences"], padding=True, return_tensors="pt")
        ids_equal = batch["input_ids"].tolist() == expected["input_ids"].tolist()
        model = getattr(transformers, auto_class).from_pretrained(folder, trust_remote_code=True).eval()
        with torch.no_grad():
            logits = model(input_ids=expected["input_ids"], attention_mask=expected["attention_mask"]).logits
        real = expected["attention_mask"].bool()
        diff = (logits[real] - expected[name][real]).abs().max().item()
        report[name] = {"max_abs_diff": diff, "ids_equal": ids_equal, "module": type(model).__module__}
    except Exception as error:
        report[name] = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
        continue
    if snippet is not None:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(snippet, {})
            report[name]["snippet"] = "ok"
        except Exception as error:
            report[name]["snippet"] = f"{type(error).__name__}: {str(error)[:300]}"
print("REPORT" + json.dumps(report))
"""


def install(version: str, targets: Path) -> Path:
    """The `--target` folder of `version` (installed on first use)."""
    folder = targets / f"transformers-{version}"
    if (folder / ".complete").is_file():
        return folder
    partial = targets / f".transformers-{version}.partial"
    subprocess.run(["rm", "-rf", str(partial)], check=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"]
    packages = [f"transformers=={version}", *VERSIONS[version]]
    subprocess.run([*command, str(partial), *packages], check=True)
    (partial / ".complete").write_text(version + "\n")
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    partial.rename(folder)
    return folder


def make_models(root: Path) -> tuple[dict, Path]:
    """The folders to load ({name: (folder, Auto class, the card's snippet for transformers alone or None)}) and the
    expected ids and logits, made by the package."""
    from elc_bert import (
        ElcBertConfig,
        ElcBertForMaskedLM,
        ElcBertForTokenClassification,
        LayerFusionConfig,
        LayerFusionForTokenClassification,
    )
    from elc_bert.data.tokenizer import save_tokenizer, train_tokenizer
    from elc_bert.hub.export import export
    from elc_bert.hub.model_card import usage_snippet

    tokenizer = train_tokenizer(SAMPLE.read_text(encoding="utf-8").splitlines(), 600, 2)
    size = dict(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=3, num_attention_heads=4)
    size.update(intermediate_size=96, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    makers = {
        "ELC-BERT MLM": ("AutoModelForMaskedLM", lambda: ElcBertForMaskedLM(ElcBertConfig(**size))),
        "LTG-BERT token classifier": (
            "AutoModelForTokenClassification",
            lambda: ElcBertForTokenClassification(ElcBertConfig(**size, layer_combination="residual", num_labels=5)),
        ),
        "DWAtt fusion over ELC-BERT": (
            "AutoModelForTokenClassification",
            lambda: LayerFusionForTokenClassification(
                LayerFusionConfig(backbone_config=ElcBertConfig(**size), fusion="dwatt", num_labels=5, head_dropout=0)
            ),
        ),
    }
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    expected = {"sentences": SENTENCES, "input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    cases = {}
    for seed, (name, (auto_class, make)) in enumerate(makers.items()):
        torch.manual_seed(seed)
        model = make().eval()
        with torch.no_grad():  # ELC weights away from their uniform start, so that the mixtures matter
            for parameter_name, parameter in model.named_parameters():
                if "layer_weights" in parameter_name:
                    parameter.normal_()
            expected[name] = model(**batch).logits
        saved = root / f"{seed}-saved"
        model.save_pretrained(saved)
        save_tokenizer(tokenizer, saved)
        exported = str(export(saved, root / f"{seed}-exported"))
        cases[name] = (exported, auto_class, usage_snippet(model, exported, remote_code=True))
        if name == "ELC-BERT MLM":  # a plain save has no card
            cases["ELC-BERT MLM, plain save_pretrained"] = (str(saved), auto_class, None)
            expected["ELC-BERT MLM, plain save_pretrained"] = expected[name]
    torch.save(expected, root / "expected.pt")
    return cases, root / "expected.pt"


def check(version: str, cases: dict, expected_file: Path, targets: Path, root: Path) -> dict:
    """The child process's report for `version` (INSTALLED: this environment's transformers)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env["HF_HOME"] = str(root / f"hf-{version}")  # its own module cache
    env["HF_HUB_OFFLINE"] = "1"
    if version != INSTALLED:
        env["PYTHONPATH"] = str(install(version, targets))
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(cases), str(expected_file)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if "REPORT" not in result.stdout:
        return {"transformers": version, "error": result.stderr[-2000:]}
    return json.loads(result.stdout.split("REPORT", 1)[1])


def cell(entry: dict) -> str:
    if "error" in entry:
        return f"fails: {entry['error'][:80]}"
    ids = "" if entry["ids_equal"] else ", other token ids"
    snippet = "" if entry.get("snippet", "ok") == "ok" else f", card snippet fails: {entry['snippet'][:80]}"
    return f"{entry['max_abs_diff']:.1e}{ids}{snippet}"


def passed(entry: dict) -> bool:
    ok = "error" not in entry and entry["ids_equal"] and entry["max_abs_diff"] <= TOLERANCE
    return ok and entry.get("snippet", "ok") == "ok"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", default=[*VERSIONS, INSTALLED], choices=[*VERSIONS, INSTALLED])
    parser.add_argument("--targets", type=Path, default=DEFAULT_TARGETS, help="where the versions are installed")
    parser.add_argument("--json", type=Path, help="also write the reports here")
    args = parser.parse_args(argv)
    args.targets.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        cases, expected_file = make_models(root)
        reports = [check(version, cases, expected_file, args.targets, root) for version in args.versions]
    names = list(cases)
    print("| transformers | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    ok = True
    for report in reports:
        if "error" in report and len(report) == 2:
            print(f"| {report['transformers']} | " + " | ".join(["process failed"] * len(names)) + " |")
            print(report["error"], file=sys.stderr)
            ok = False
            continue
        print(f"| {report['transformers']} | " + " | ".join(cell(report[name]) for name in names) + " |")
        ok = ok and all(passed(report[name]) for name in names)
    print(
        f"\nmax |logits - package's| over real tokens; the same token ids everywhere unless said; tolerance "
        f"{TOLERANCE}; each export's card snippet (pipeline with trust_remote_code) runs unless said"
    )
    if args.json:
        args.json.write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
