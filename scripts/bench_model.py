"""Training-step throughput and peak memory: our ELC-BERT and LTG-BERT against `transformers`' BertForMaskedLM,
eager and under `torch.compile`.

All run in this process on the same batches (strict-small dims: hidden 384, 12 layers, 6 heads; BERT with an
intermediate size of 1536, which matches the GeGLU's 1024 in parameters). 15% of the tokens carry MLM labels; our
models run their MLM head on those only (`sparse_prediction`, as the pretraining job does). The compiled rows are
`torch.compile(model)` of the same architecture; their compile time (the first, warm-up round) is reported apart.
Prints tokens/s, the activation memory of an eager training step (what autograd saves for the backward pass) and the
ratios that docs/benchmarks.md records.

    python scripts/bench_model.py [--batch 32 --length 128 --steps 3 --rounds 2 --threads 2 --no-compile]
    python scripts/bench_model.py --device cuda --bf16 [--attn-implementation flex_attention]
    python scripts/bench_model.py --no-compile --batch 16 --baseline-src ../elc-bert-old  # another checkout

`--baseline-src DIR` adds rows for the ELC-BERT and LTG-BERT of another checkout of this package (its `elc_bert/`,
imported under another name), so that a change is measured against the code before it in one process.

On CUDA the table also gives each model's peak memory in its steps over what was allocated before them (every
model's weights and optimizer state: `torch.cuda.max_memory_allocated` less `memory_allocated`); `--bf16` runs the steps
under bf16 autocast (the activation memory is counted on one fp32 step, without it). FlexAttention has no CPU backward
in torch 2.13, so `--attn-implementation flex_attention` needs a GPU; it builds our models with
`attention_probs_dropout_prob=0` (FlexAttention has no attention dropout; in our attention module that also turns off
the dropout of the relative embedding and of the sublayer output), and `--kernel-options '{"num_stages": 1}'` hands
FlexAttention's kernel options to every block.
"""

import argparse
import contextlib
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM

from elc_bert import ElcBertConfig, ElcBertForMaskedLM


def make_batch(batch_size: int, length: int, vocab_size: int, device) -> dict:
    """A batch of random ids, 15% of them labelled for MLM, on `device`."""
    input_ids = torch.randint(7, vocab_size, (batch_size, length))
    labels = torch.where(torch.rand(input_ids.shape) < 0.15, input_ids, -100)
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    return {key: value.to(device) for key, value in batch.items()}


def saved_activation_mib(model, batch) -> float:
    """MiB of the distinct tensors autograd keeps for the backward pass (parameters excluded): the activation
    memory of a training step, measured the same way on every device."""
    parameters = {parameter.untyped_storage().data_ptr() for parameter in model.parameters()}
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(**batch).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return sum(storages.values()) / 2**20


def import_baseline(src: str):
    """The `elc_bert` package of the checkout at `src`, imported as `elc_bert_baseline` (its modules import each other
    relatively, so none of this checkout's code runs in it)."""
    folder = Path(src) / "elc_bert"
    spec = importlib.util.spec_from_file_location(
        "elc_bert_baseline", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["elc_bert_baseline"] = module
    spec.loader.exec_module(module)
    return module


def build(name: str, vocab_size: int, attn_implementation: str, package=None):
    """BERT, or our ELC-BERT / LTG-BERT by `name` (from `package`, another checkout's `elc_bert`, for names ending
    in "baseline")."""
    if name == "bert":
        config = BertConfig(
            vocab_size=vocab_size,
            hidden_size=384,
            num_hidden_layers=12,
            num_attention_heads=6,
            intermediate_size=1536,
            attn_implementation="sdpa",
        )
        return BertForMaskedLM(config)
    package = package if name.endswith("baseline") else None
    config_class = package.ElcBertConfig if package else ElcBertConfig
    config = config_class.from_preset(
        "strict-small",
        layer_combination="elc" if name.startswith("elc-bert") else "residual",
        sparse_prediction=True,
        attn_implementation=attn_implementation,
        # FlexAttention has no attention dropout (the model refuses to train with it)
        **({"attention_probs_dropout_prob": 0.0} if attn_implementation == "flex_attention" else {}),
    )
    return (package.ElcBertForMaskedLM if package else ElcBertForMaskedLM)(config)


def time_steps(model, optimizer, batches, device, bf16: bool = False, kernel_options=None) -> float:
    """Tokens per second of training steps over `batches` (under bf16 autocast with `bf16`; `kernel_options`:
    FlexAttention's, for our models)."""
    extra = {} if kernel_options is None else {"kernel_options": kernel_options}

    def step(batch):
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with autocast:
            loss = model(**batch, **extra).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for batch in batches:
        step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return sum(batch["input_ids"].numel() for batch in batches) / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="training steps per round")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds, after one warm-up round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--attn-implementation", default="sdpa", choices=["eager", "sdpa", "flex_attention"], help="of our models"
    )
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast")
    parser.add_argument("--no-compile", action="store_true", help="leave out the compiled rows")
    parser.add_argument(
        "--kernel-options",
        type=json.loads,
        help="FlexAttention's kernel options for our models, as JSON (e.g. '{\"num_stages\": 1}')",
    )
    parser.add_argument("--baseline-src", help="another checkout of this repository, timed beside this one")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    if args.attn_implementation == "flex_attention" and device.type == "cpu":
        parser.error(
            "flex_attention has no CPU backward in torch 2.13: time it on a GPU (scripts/bench_attention.py "
            "times its CPU inference)"
        )
    vocab_size = ElcBertConfig.from_preset("strict-small").vocab_size

    batches = [make_batch(args.batch, args.length, vocab_size, device) for _ in range(args.steps)]

    names = ["bert", "ltg-bert", "elc-bert"] + ([] if args.no_compile else ["ltg-bert compiled", "elc-bert compiled"])
    baseline = import_baseline(args.baseline_src) if args.baseline_src else None
    if baseline:
        names += ["ltg-bert baseline", "elc-bert baseline"]
        names += [] if args.no_compile else ["ltg-bert compiled baseline", "elc-bert compiled baseline"]
    models = {name: build(name, vocab_size, args.attn_implementation, baseline).to(device).train() for name in names}
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4) for name, model in models.items()}
    steppers = {name: torch.compile(model) if "compiled" in name else model for name, model in models.items()}
    speeds = {name: [] for name in models}
    warmup, peaks = {}, {}
    # Rounds interleave the models so that none gains from running later (warm caches) or loses from running first;
    # each model's best round counts. The first round is a warm-up (for the compiled models: the compilation).
    for round_index in range(args.rounds + 1):
        for name, model in steppers.items():
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
                resident = torch.cuda.memory_allocated()  # every model's weights and optimizer state
            start = time.perf_counter()
            options = None if name == "bert" else args.kernel_options
            speed = time_steps(model, optimizers[name], batches, device, args.bf16, options)
            if round_index == 0:
                warmup[name] = time.perf_counter() - start
            else:
                speeds[name].append(speed)
                if device.type == "cuda":
                    peak = (torch.cuda.max_memory_allocated() - resident) / 2**20
                    peaks[name] = max(peaks.get(name, 0.0), peak)
    results = {
        name: (max(speeds[name]), None if "compiled" in name else saved_activation_mib(model, batches[0]))
        for name, model in models.items()
    }

    print(
        f"device {device}, threads {args.threads}, batch {args.batch} x length {args.length}, "
        f"best of {args.rounds} rounds of {args.steps} steps, attention {args.attn_implementation}"
        + (", bf16 autocast" if args.bf16 else "")
        + (", no attention dropout" if args.attn_implementation == "flex_attention" else "")
        + (f", kernel options {json.dumps(args.kernel_options)}" if args.kernel_options else "")
    )
    print("| model | tokens/s | activation memory (MiB) | step's peak memory (MiB, CUDA) | warm-up round (s) |")
    print("|---|---|---|---|---|")
    for name, (speed, memory) in results.items():
        memory = "" if memory is None else f"{memory:,.0f}"
        peak = f"{peaks[name]:,.0f}" if name in peaks else ""
        print(f"| {name} | {speed:,.0f} | {memory} | {peak} | {warmup[name]:.1f} |")
    print()
    ratio = results["elc-bert"][0] / results["bert"][0]
    print(f"ELC-BERT / BERT tokens/s: {ratio:.2f}x")
    print(f"ELC-BERT / BERT activation memory: {results['elc-bert'][1] / results['bert'][1]:.2f}x")
    if peaks:
        print(f"ELC-BERT / BERT step's peak memory: {peaks['elc-bert'] / peaks['bert']:.2f}x")
    print(f"ELC-BERT / LTG-BERT tokens/s: {results['elc-bert'][0] / results['ltg-bert'][0]:.3f}")
    if baseline:
        for name in names:
            if name + " baseline" in results:
                print(f"{name} / its baseline tokens/s: {results[name][0] / results[name + ' baseline'][0]:.3f}x")
    if not args.no_compile:
        compiled = results["elc-bert compiled"][0] / results["elc-bert"][0]
        print(f"ELC-BERT compiled / eager tokens/s: {compiled:.2f}x")
        print(f"ELC-BERT compiled / BERT eager tokens/s: {results['elc-bert compiled'][0] / results['bert'][0]:.2f}x")
        print(
            "ELC-BERT / LTG-BERT tokens/s, both compiled: "
            f"{results['elc-bert compiled'][0] / results['ltg-bert compiled'][0]:.3f}"
        )


if __name__ == "__main__":
    main()
