"""Speed of `eval-babylm`'s masked-LM scorer against the official BabyLM 2025 pipeline's way of scoring, same process,
same model, same items.

    OMP_NUM_THREADS=1 python scripts/bench_babylm.py [--items 120] [--preset tiny] [--threads 1]

Official = the pipeline's `--backend mlm` logic, written here from its description: items go in batches of
`batch_size` (64); for each candidate position, the masked copies of every item of the batch (one per completion
token) are padded to the longest and run in mini-batches of `non_causal_batch_size` (64) rows, the full B x T x V logits
computed, the masked position's row log-softmaxed and summed per candidate. Ours = `elc_bert.evaluation.babylm.
score_items`: every masked copy of every distinct sentence in one flat list, sorted by length, cut under a token
budget, the vocabulary projection on the masked positions only. The items are real ones from ../shared/data (BLiMP,
the supplement, entity tracking; EWoK is read there too and never written anywhere) when present, else made up. The
model is a randomly initialised ElcBertForMaskedLM of the preset (speed does not depend on the weights) with a
tokenizer trained on the items. Prints both scorers' seconds, their ratio (target >= 1.5x) and the largest
difference between their scores (they must agree to 1e-4 nats and on every decision).
"""

import argparse
import math
import time
from pathlib import Path

import torch

from elc_bert import ElcBertConfig, ElcBertForMaskedLM
from elc_bert.data.tokenizer import train_tokenizer
from elc_bert.evaluation import babylm

ROOT = Path(__file__).resolve().parents[1]
STAGED = ROOT.parent / "shared" / "data"


def real_items(count: int) -> list:
    """`count` items spread over BLiMP, the supplement, EWoK and entity tracking (a quarter each)."""
    folders = {
        "blimp": STAGED / "babylm_eval_2024" / "blimp_filtered",
        "supplement": STAGED / "babylm_eval_2025" / "full_eval" / "supplement_filtered",
        "ewok": STAGED / "babylm_eval_2025" / "full_eval" / "ewok_filtered",
        "entity_tracking": STAGED / "babylm_eval_2025" / "full_eval" / "entity_tracking",
    }
    items = []
    for task, folder in folders.items():
        every = babylm.read_task(task, folder)
        step = max(1, len(every) // (count // len(folders)))
        items += every[::step][: count // len(folders)]
    return items


def made_up_items(count: int) -> list:
    words = "the cat dog girl boy saw liked who what did near a an every box map hat contains".split()
    items = []
    for i in range(count):
        sentence = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(6 + i % 9)) + "."
        other = " ".join(reversed(sentence[:-1].split())) + "."
        items.append(babylm.Item([sentence, other], [sentence, other], f"uid{i % 5}", "made-up"))
    return items


@torch.inference_mode()
def official_scores(model, tokenizer, items, batch_size=64, non_causal_batch_size=64) -> list[list[float]]:
    scores = [[] for _ in items]
    for first in range(0, len(items), batch_size):
        batch = items[first : first + batch_size]
        for candidate in range(max(len(item.sentences) for item in batch)):
            rows, positions, targets, owners = [], [], [], []
            for index, item in enumerate(batch):
                if candidate >= len(item.sentences):
                    continue
                sentence, completion = item.sentences[candidate], item.completions[candidate]
                encoding = tokenizer(sentence, return_offsets_mapping=True)
                start = len(sentence) - len(completion)
                for t, (_, end) in enumerate(encoding["offset_mapping"]):
                    if end > start:
                        ids = torch.tensor(encoding["input_ids"])
                        ids[t] = tokenizer.mask_token_id
                        rows.append(ids)
                        positions.append(t)
                        targets.append(encoding["input_ids"][t])
                        owners.append(index)
            padded = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=tokenizer.pad_token_id)
            attention = torch.nn.utils.rnn.pad_sequence(
                [torch.ones(len(row), dtype=torch.long) for row in rows], batch_first=True
            )
            log_probs = []
            for low in range(0, len(rows), non_causal_batch_size):
                high = low + non_causal_batch_size
                logits = model(input_ids=padded[low:high], attention_mask=attention[low:high]).logits
                picked = logits[torch.arange(logits.shape[0]), torch.tensor(positions[low:high])]
                log_probs.append(
                    torch.log_softmax(picked, -1).gather(1, torch.tensor(targets[low:high])[:, None]).squeeze(1)
                )
            log_probs = torch.cat(log_probs).double()
            totals = torch.zeros(len(batch), dtype=torch.float64).index_add_(0, torch.tensor(owners), log_probs)
            for index, item in enumerate(batch):
                if candidate < len(item.sentences):
                    scores[first + index].append(totals[index].item())
    return scores


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=120)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    items = real_items(args.items) if STAGED.is_dir() else made_up_items(args.items)
    texts = [sentence for item in items for sentence in item.sentences]
    tokenizer = train_tokenizer(texts * 3, vocab_size=4096, min_frequency=1)
    torch.manual_seed(0)
    model = ElcBertForMaskedLM(ElcBertConfig.from_preset(args.preset, vocab_size=len(tokenizer))).eval()
    official_scores(model, tokenizer, items[:4])  # warm-up, both
    babylm.score_items(model, tokenizer, items[:4], causal=False, progress=False)

    start = time.perf_counter()
    theirs = official_scores(model, tokenizer, items)
    official_seconds = time.perf_counter() - start
    start = time.perf_counter()
    ours = babylm.score_items(model, tokenizer, items, causal=False, progress=False)
    our_seconds = time.perf_counter() - start

    difference = max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x, y))
    same = all(babylm.chosen(x) == babylm.chosen(y) for x, y in zip(ours, theirs))
    candidates = sum(len(item.sentences) for item in items)
    print(f"{len(items)} items ({candidates} candidates), preset {args.preset}, {args.threads} thread(s)")
    print(f"official pipeline's logic: {official_seconds:.2f} s")
    print(f"eval-babylm (score_items): {our_seconds:.2f} s")
    print(f"ratio: {official_seconds / our_seconds:.2f}x (target >= 1.5x)")
    print(f"max |score difference|: {difference:.2e} nats; same decision on every item: {same}")
    if not same or difference > 1e-4 or math.isnan(difference):
        raise SystemExit("the two scorers disagree")


if __name__ == "__main__":
    main()
