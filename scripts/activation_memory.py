"""Activation memory of one training step: what autograd keeps for the backward pass of ELC-BERT, LTG-BERT and BERT
(`bench_model.py`'s models and count), without timing anything.

    python scripts/activation_memory.py [--batch 32 --length 128 --baseline-src ../elc-bert-old]

Two columns: as this device's attention runs (on a CPU, `scaled_dot_product_attention`'s math path, which keeps the
B x H x T x T probabilities), and as CUDA's memory-efficient attention keeps its inputs and output (q, k, v, the
bias when it takes a gradient, the output and a B x H x T log-sum-exp): the second column puts an autograd function
that keeps just those in place of `scaled_dot_product_attention` while counting (its backward is not run for its
values), so that the memory a GPU step keeps can be estimated on a CPU. `--baseline-src DIR` adds the ELC-BERT and
LTG-BERT of another checkout of this package.
"""

import argparse
import contextlib
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from bench_model import build, import_baseline, make_batch, saved_activation_mib  # noqa: E402

from elc_bert import ElcBertConfig  # noqa: E402


class EfficientAttentionSaves(torch.autograd.Function):
    """`scaled_dot_product_attention`'s output, keeping for the backward pass what CUDA's memory-efficient kernel
    keeps. For counting only: its backward returns zeros."""

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, scale, attention):
        with torch.no_grad():
            output = attention(query, key, value, attn_mask=attn_mask, scale=scale)
        log_sum_exp = output.new_empty(query.shape[:-1], dtype=torch.float32)
        bias = attn_mask if attn_mask is not None and attn_mask.requires_grad else None
        ctx.save_for_backward(query, key, value, bias, output, log_sum_exp)
        return output

    @staticmethod
    def backward(ctx, grad):
        query, key, value, bias, _, _ = ctx.saved_tensors
        zeros = [torch.zeros_like(tensor) for tensor in (query, key, value)]
        return *zeros, None if bias is None else torch.zeros_like(bias), None, None


@contextlib.contextmanager
def efficient_attention_saves():
    """Within: `torch.nn.functional.scaled_dot_product_attention` keeps what CUDA's memory-efficient kernel keeps."""
    original, calls = F.scaled_dot_product_attention, []

    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if is_causal or enable_gqa:
            raise NotImplementedError("the encoders measured here use neither")
        calls.append(1)
        return EfficientAttentionSaves.apply(query, key, value, attn_mask, scale, original)

    F.scaled_dot_product_attention = attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
    if not calls:
        raise RuntimeError("the models did not call torch.nn.functional.scaled_dot_product_attention")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--baseline-src", help="another checkout of this repository, counted beside this one")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    vocab_size = ElcBertConfig.from_preset("strict-small").vocab_size
    batch = make_batch(args.batch, args.length, vocab_size, "cpu")

    names = ["bert", "ltg-bert", "elc-bert"]
    baseline = import_baseline(args.baseline_src) if args.baseline_src else None
    if baseline:
        names += ["ltg-bert baseline", "elc-bert baseline"]
    memory = {}
    for name in names:
        model = build(name, vocab_size, "sdpa", baseline).train()
        as_run = saved_activation_mib(model, batch)
        with efficient_attention_saves():
            efficient = saved_activation_mib(model, batch)
        memory[name] = (as_run, efficient)

    print(f"activation memory of one training step (fp32, MiB), batch {args.batch} x length {args.length}, sdpa")
    print("| model | as run here | / BERT | as CUDA's memory-efficient attention keeps it | / BERT |")
    print("|---|---|---|---|---|")
    bert_run, bert_efficient = memory["bert"]
    for name, (as_run, efficient) in memory.items():
        print(
            f"| {name} | {as_run:,.0f} | {as_run / bert_run:.2f}x | {efficient:,.0f} | "
            f"{efficient / bert_efficient:.2f}x |"
        )


if __name__ == "__main__":
    main()
