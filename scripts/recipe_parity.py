"""Recipe parity: the package's `pretrain` against a minimal training loop written from the reference recipe's
description, on the same tokenizer, corpus, model size, batch, steps and seeds.

    OMP_NUM_THREADS=1 python scripts/recipe_parity.py                   # 2 seeds x 2 pipelines, ~10 min on 1 thread
    python scripts/recipe_parity.py --steps 800 --seeds 42 43 44

The reference loop here shares only the model class (`ElcBertForMaskedLM`), the tokenizer and the text reader with
the package. Everything the recipe decides is written again from the description in
`../shared/docs/notes/elc-bert-reference-notes.md` (section 4), in the reference's own style (Python loops, the global
random generator): the cache's packing (sentences appended until the segment overflows; it is cut there and the
overflowing sentence starts the next one), samples cut short with probability `short_p` to a uniform length, span
masking drawn every time a sample is read (n ~ Binomial, spans of Geometric(1/3) mod 10 at random offsets, 80/10/10
per span, the last position never masked), an epoch-wise random order, LAMB (its trust ratio only where weight decay
applies), linear warmup and cosine decay to 0.1x, gradient clipping at 2.

Prints (and writes into --out as results.md / results.json / curves.png) the training loss averaged over every 25
steps for each pipeline and seed, the reference's seed spread, and each final model's validation loss on the same
fixed-mask validation batches. What parity means here: the package's curve inside the reference's seed spread.
"""

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch

from elc_bert import ElcBertConfig, ElcBertForMaskedLM, plots
from elc_bert.data.pretraining import SpanMaskingCollator
from elc_bert.data.text import file_documents
from elc_bert.data.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from elc_bert.job_configs.training_metrics import TrainingMetrics
from elc_bert.training.pretrain import PretrainConfig, pretrain

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "samples" / "wikitext2_train.txt"
LOG_EVERY = 25


# ----------------------------------------------------------------------------- the reference loop, from its notes
def reference_segments(documents: list[list[list[int]]], seq_len: int) -> list[list[int]]:
    segments = []
    for document in documents:
        buffer = []
        for sentence in document:
            buffer += sentence
            if len(buffer) > seq_len:
                segments.append(buffer[:seq_len])
                buffer = list(sentence)
        if buffer:
            segments.append(buffer[:seq_len])
    return segments


def reference_sample(tokens, seq_length, short_p, cls, sep, pad):
    target = seq_length - 2 if random.random() > short_p else random.randint(1, seq_length - 3)
    tokens = tokens[:target]
    padding = seq_length - 2 - len(tokens)
    return [cls, *tokens, sep] + [pad] * padding, len(tokens) + 2


def reference_mask(ids: torch.Tensor, mask_id: int, vocab: int, n_special: int = 6):
    inputs, labels = ids.clone(), torch.full_like(ids, -100)
    special = ids < n_special
    target = torch.binomial((~special).float().sum().view(1), torch.tensor([0.15])).item()
    chosen = torch.zeros_like(ids, dtype=torch.bool)
    for _ in range(100):
        if chosen.sum() >= target:
            break
        span = int(torch.empty(1).geometric_(1 / 3).item()) % 10
        offset = random.randint(-(span - 1), len(ids) + span - 1)
        piece = torch.zeros_like(chosen)
        piece[max(0, offset) : min(len(ids) - 1, offset + span)] = True
        piece &= ~special
        roll = random.random()
        if roll < 0.8:
            inputs[piece] = mask_id
        elif roll < 0.9:
            inputs[piece] = torch.randint(n_special - 1, vocab, (int(piece.sum()),))
        chosen |= piece
    labels[chosen] = ids[chosen]
    return inputs, labels


class ReferenceLamb(torch.optim.Optimizer):
    def __init__(self, params, lr, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["step"] += 1
                b1, b2 = group["betas"]
                state["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                m_hat = state["m"] / (1 - b1 ** state["step"])
                v_hat = state["v"] / (1 - b2 ** state["step"])
                update = m_hat / (v_hat.sqrt() + group["eps"])
                trust = 1.0
                if group["weight_decay"] > 0:
                    update = update + group["weight_decay"] * p
                    w_norm, u_norm = p.norm().item(), update.norm().item()
                    trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
                p.add_(update, alpha=-group["lr"] * trust)


def reference_train(args, tokenizer, documents, seed: int) -> tuple[list[float], ElcBertForMaskedLM]:
    random.seed(seed)
    torch.manual_seed(seed)
    model = new_model(args, tokenizer, seed)
    segments = reference_segments(documents, args.seq_length - 2)
    no_decay = ("bias", "layer_norm", "embedding", "prev_layer_weights")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)], "weight_decay": 0.1},
        {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = ReferenceLamb(groups, lr=args.lr)
    warmup = max(1, math.ceil(0.016 * args.steps))

    def lr_at(step):
        if step < warmup:
            return args.lr * step / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    order, losses, logged = [], [], []
    model.train()
    for step in range(args.steps):
        batch_ids, batch_masks, batch_labels = [], [], []
        for _ in range(args.batch):
            if not order:
                order = torch.randperm(len(segments)).tolist()
            ids, length = reference_sample(
                segments[order.pop()], args.seq_length, 0.1, tokenizer.cls_token_id, tokenizer.sep_token_id, 3
            )
            # masked over the whole padded sample, as the reference does ([PAD] is special: never masked)
            inputs, labels = reference_mask(torch.tensor(ids), tokenizer.mask_token_id, len(tokenizer))
            batch_ids.append(inputs)
            batch_labels.append(labels)
            batch_masks.append((torch.arange(len(ids)) < length).long())
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        loss = model(
            torch.stack(batch_ids), attention_mask=torch.stack(batch_masks), labels=torch.stack(batch_labels)
        ).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % LOG_EVERY == 0:
            logged.append(sum(losses[-LOG_EVERY:]) / LOG_EVERY)
    return logged, model


# ----------------------------------------------------------------------------------------------- shared set-up
def new_model(args, tokenizer, seed: int) -> ElcBertForMaskedLM:
    torch.manual_seed(seed)
    config = ElcBertConfig.from_preset(
        "tiny",
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        sparse_prediction=True,
    )
    return ElcBertForMaskedLM(config)


def package_train(args, tokenizer_dir: Path, data_dir: Path, seed: int, out: Path):
    config = PretrainConfig(
        output_dir=str(out / f"package-seed{seed}"),
        data_dir=str(data_dir),
        train_files=["train.txt"],
        tokenizer=str(tokenizer_dir),
        preset="tiny",
        model={"hidden_size": args.hidden, "intermediate_size": 2 * args.hidden},
        seq_length=args.seq_length,
        learning_rate=args.lr,
        max_steps=args.steps,
        batch_size=args.batch,
        seed=seed,
        training={"logging_steps": LOG_EVERY, "save_steps": args.steps, "disable_tqdm": True},
    )
    pretrain(config)
    history = TrainingMetrics.read(out / f"package-seed{seed}").log_history
    model = ElcBertForMaskedLM.from_pretrained(out / f"package-seed{seed}")
    return [entry["loss"] for entry in history if "loss" in entry], model


@torch.no_grad()
def validation_loss(model, batches) -> float:
    model.eval()
    total, count = 0.0, 0
    for batch in batches:
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        scored = batch["labels"] != -100
        total += torch.nn.functional.cross_entropy(logits[scored], batch["labels"][scored], reduction="sum").item()
        count += int(scored.sum())
    return total / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument("--train-lines", type=int, default=1200, help="of the bundled WikiText-2 sample; rest: dev")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "recipe_parity", help="the report's folder")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "recipe_parity", help="the runs' folder")
    args = parser.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    lines = SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    (work / "train.txt").write_text("".join(lines[: args.train_lines]), encoding="utf-8")
    (work / "dev.txt").write_text("".join(lines[args.train_lines :]), encoding="utf-8")
    tokenizer_dir = work / "tokenizer"
    if not (tokenizer_dir / "tokenizer.json").exists():
        texts = [s for d in file_documents(str(work / "train.txt")) for s in d]
        save_tokenizer(train_tokenizer(texts, 2000, 2), tokenizer_dir)
    tokenizer = load_tokenizer(tokenizer_dir)

    def tokenized(path):
        return [[tokenizer(s, add_special_tokens=False)["input_ids"] for s in d] for d in file_documents(str(path))]

    train_documents = tokenized(work / "train.txt")
    dev = reference_segments(tokenized(work / "dev.txt"), args.seq_length - 2)
    dev = [[tokenizer.cls_token_id, *segment, tokenizer.sep_token_id] for segment in dev]
    fixed = SpanMaskingCollator(tokenizer.mask_token_id, tokenizer.pad_token_id, len(tokenizer), seed=0)
    dev_batches = [fixed(dev[i : i + args.batch]) for i in range(0, len(dev), args.batch)]

    curves, finals, seconds = {}, {}, {}
    for seed in args.seeds:
        for pipeline in ("package", "reference"):
            start = time.perf_counter()
            if pipeline == "package":
                curve, model = package_train(args, tokenizer_dir, work, seed, work)
            else:
                curve, model = reference_train(args, tokenizer, train_documents, seed)
            seconds[f"{pipeline}-seed{seed}"] = time.perf_counter() - start
            curves[f"{pipeline}-seed{seed}"] = curve
            finals[f"{pipeline}-seed{seed}"] = validation_loss(model, dev_batches)
            print(f"{pipeline} seed {seed}: final validation loss {finals[f'{pipeline}-seed{seed}']:.3f}", flush=True)
    report(args, curves, finals, seconds, len(reference_segments(train_documents, args.seq_length - 2)))


def report(args, curves, finals, seconds, segments):
    steps = [LOG_EVERY * (i + 1) for i in range(args.steps // LOG_EVERY)]
    names = list(curves)
    reference = [name for name in names if name.startswith("reference")]
    package = [name for name in names if name.startswith("package")]
    lines = [
        f"# Recipe parity: package vs reference loop ({args.hidden} wide, 4 layers, batch {args.batch} x "
        f"{args.seq_length}, {args.steps} steps = {args.steps * args.batch / segments:.1f} epochs of {segments} "
        "samples, "
        f"lr {args.lr:g}, seeds {', '.join(map(str, args.seeds))})",
        "",
        "| step | " + " | ".join(names) + " | reference spread | package mean inside |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    inside = 0
    for i, step in enumerate(steps):
        values = [curves[name][i] for name in names]
        low, high = min(curves[n][i] for n in reference), max(curves[n][i] for n in reference)
        mean = sum(curves[n][i] for n in package) / len(package)
        inside += low <= mean <= high
        row = " | ".join(f"{v:.3f}" for v in values)
        lines.append(f"| {step} | {row} | {low:.3f}-{high:.3f} | {'yes' if low <= mean <= high else 'no'} |")
    final = " | ".join(f"{finals[name]:.3f}" for name in names)
    low, high = min(finals[n] for n in reference), max(finals[n] for n in reference)
    lines += [
        f"| final validation loss | {final} | {low:.3f}-{high:.3f} | "
        f"{'yes' if low <= sum(finals[n] for n in package) / len(package) <= high else 'no'} |",
        "",
        f"Package mean inside the reference's seed spread at {inside} of {len(steps)} logged steps.",
        "Seconds: " + ", ".join(f"{name} {value:.0f}" for name, value in seconds.items()),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    (args.out / "results.json").write_text(json.dumps({"curves": curves, "finals": finals, "steps": steps}) + "\n")
    plots.plot_curves(
        args.out / "curves.png",
        {name: (steps, curve) for name, curve in curves.items()},
        "step",
        "training MLM loss (mean of 25 steps)",
        "Recipe parity",
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
