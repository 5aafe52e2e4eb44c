"""BLiMP-style minimal pairs, zero-shot: a pair is right when the model scores the good sentence above the bad one.

Masked LMs are scored by pseudo-log-likelihood (Salazar et al., 2020; the ELC-BERT / BabyLM protocol):

    PLL(w_1..w_n) = sum_t log p(w_t | w_1..w_{t-1} [MASK] w_{t+1}..w_n)

every non-special token masked in turn, summed, no length normalisation; [CLS]/[SEP] (whatever the tokenizer adds)
are present in the input but never scored. Causal LMs are scored by their log-likelihood, sum_t log p(w_t | w_<t),
the first token conditioned on the tokenizer's BOS token when it has one (otherwise the first token is context only).

Speed: every masked copy of every (unique) sentence of a set becomes one row of a flat list; rows are sorted by
length and cut into batches under a token budget (rows x padded length), so one forward pass scores hundreds of
masked copies of many sentences at once and padding is rare. Data: the original BLiMP folder (one `<paradigm>.jsonl`
per set) or the BabyLM 2024 `blimp_filtered/` / `supplement_filtered/` folders, gzip or not, or a single file.
"""

import hashlib
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..data.jsonl import read_jsonl

DEFAULT_BATCH_TOKENS = 4096
SUFFIXES = (".jsonl.gz", ".jsonl")
CHANCE = 0.5
# BLiMP spells one field two ways (principle_A_c_command.jsonl says "syntax/semantics", the other binding, control /
# raising and NPI files "syntax_semantics"); the paper has a single syntax-semantics field.
FIELD_ALIASES = {"syntax/semantics": "syntax_semantics"}


# ------------------------------------------------------------------------------------------------------------ data
def _set_name(path: Path) -> str | None:
    """The set (paradigm) name of a data file: its name without `.jsonl(.gz)`; None for other files."""
    for suffix in SUFFIXES:
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return None


def read_minimal_pairs(path: str | Path) -> list[dict]:
    """The minimal pairs of one JSON Lines file (gzip when the name ends in .gz): one JSON object per line with string
    fields `sentence_good` and `sentence_bad` (other fields are kept). Blank lines are skipped; anything else that is
    not such an object raises a ValueError naming the file and line."""
    pairs = []
    for line_number, row in read_jsonl(path):
        for key in ("sentence_good", "sentence_bad"):
            value = row.get(key)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{path}, line {line_number}: '{key}' is missing or not a non-empty string")
        pairs.append(row)
    if not pairs:
        raise ValueError(f"{path}: no minimal pairs in the file")
    return pairs


def load_minimal_pairs(data: str | Path) -> dict[str, list[dict]]:
    """{set name: pairs} for a folder of `<set>.jsonl(.gz)` files (sorted by name) or for a single such file."""
    data = Path(data)
    if data.is_file():
        return {_set_name(data) or data.stem: read_minimal_pairs(data)}
    if not data.is_dir():
        raise FileNotFoundError(f"minimal-pair data not found: {data} (expected a folder of .jsonl(.gz) files or one)")
    sets = {}
    for path in sorted(data.iterdir()):
        name = _set_name(path)
        if name is None or not path.is_file():
            continue
        if name in sets:
            raise ValueError(f"{data}: set '{name}' appears twice (both {name}.jsonl and {name}.jsonl.gz?)")
        sets[name] = read_minimal_pairs(path)
    if not sets:
        raise FileNotFoundError(f"{data}: no .jsonl or .jsonl.gz files in this folder")
    return sets


# ----------------------------------------------------------------------------------------------------- scoring
def is_causal_lm(model) -> bool:
    """Whether `model` is a decoder (left-to-right LM) rather than a masked LM: by its class as the Auto mappings list
    it, else by `config.is_decoder`."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    def class_names(mapping):
        names = set()
        for value in mapping.values():
            names.update(value if isinstance(value, (list, tuple)) else [value])
        return names

    name = type(model).__name__
    if name in class_names(MODEL_FOR_MASKED_LM_MAPPING_NAMES):
        return False
    if name in class_names(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) or name.endswith("ForCausalLM"):
        return True
    return bool(getattr(getattr(model, "config", None), "is_decoder", False))


def _device_of(model) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _padded(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """N x T_max int64 ids padded with pad_id, and the N lengths."""
    lengths = torch.tensor([len(sequence) for sequence in sequences], dtype=torch.long)
    ids = torch.full((len(sequences), int(lengths.max())), pad_id, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
    return ids, lengths


def _budget_batches(row_lengths: torch.Tensor, batch_tokens: int) -> list[tuple[int, int]]:
    """[start, end) slices over rows sorted by length, longest first: each batch holds as many rows as fit in
    batch_tokens at the length of its first (longest) row, at least one."""
    slices, start, total = [], 0, len(row_lengths)
    while start < total:
        size = max(1, batch_tokens // max(1, int(row_lengths[start])))
        slices.append((start, min(total, start + size)))
        start += size
    return slices


def _restricts_logits(model) -> bool:
    """Our masked LMs run their head only on labelled positions when given labels (N x V logits): one position per
    masked copy, so the vocabulary projection costs 1/T of the full B x T x V one."""
    return type(model).__module__.startswith("elc_bert.")


class _MaskedPositionsOnly:
    """For other masked LMs: a forward pre-hook on the output projection (`get_output_embeddings()`, a Linear) keeps
    each row's masked position only, so the vocabulary projection runs on B x 1 x H instead of B x T x H (with a 30k
    vocabulary it would otherwise cost as much as the encoder) and the logits are B x 1 x V. `fired` tells whether
    the hook ran on the last call; when it did not (no such Linear), the full B x T x V logits come back."""

    def __init__(self, model):
        get_output, get_input = (
            getattr(model, "get_output_embeddings", None),
            getattr(model, "get_input_embeddings", None),
        )
        projection = get_output() if callable(get_output) else None
        embeddings = get_input() if callable(get_input) else None
        self.module = projection if isinstance(projection, torch.nn.Linear) and projection is not embeddings else None
        self.rows = self.positions = self.shape = None
        self.fired = False

    def select(self, rows: torch.Tensor, positions: torch.Tensor, shape: tuple[int, int]):
        self.rows, self.positions, self.shape, self.fired = rows, positions, shape, False

    def _hook(self, module, args):
        hidden = args[0]
        if self.rows is None or hidden.dim() != 3 or tuple(hidden.shape[:2]) != self.shape:
            return None
        self.fired = True
        return (hidden[self.rows, self.positions][:, None, :], *args[1:])

    def __enter__(self):
        self.handle = self.module.register_forward_pre_hook(self._hook) if self.module is not None else None
        return self

    def __exit__(self, *exc):
        if self.handle is not None:
            self.handle.remove()


def _logits(output) -> torch.Tensor:
    return output.logits if hasattr(output, "logits") else output[0]


class _EvalMode:
    """Dropout off while scoring; the model's train/eval mode is restored afterwards."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.was_training = self.model.training
        self.model.eval()

    def __exit__(self, *exc):
        self.model.train(self.was_training)


@torch.inference_mode()
def pseudo_log_likelihoods(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = True,
) -> list[float]:
    """PLL of each sentence under a masked LM (sum over non-special tokens of log p(true token | sentence with that
    token masked)), in nats, one float per input sentence. Duplicate sentences are scored once.

    `model(input_ids=B x T, attention_mask=B x T)` must return logits B x T x V; our own masked LMs get `labels` too
    and return N x V logits for the masked positions only, and for others a hook on the output projection does the
    same (`_MaskedPositionsOnly`). Runs on the model's device; log-softmax in float32."""
    if tokenizer.mask_token_id is None:
        raise ValueError("pseudo-log-likelihood needs a tokenizer with a mask token (use the causal path for decoders)")
    unique = list(dict.fromkeys(sentences))
    if not unique:
        return []
    encoded = tokenizer(unique, add_special_tokens=True, return_special_tokens_mask=True)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    all_ids, lengths = _padded(encoded["input_ids"], pad_id)
    special, _ = _padded(encoded["special_tokens_mask"], 1)
    # One row per (sentence, scored position): the masked copies of every sentence, flat.
    row_sentence, row_position = torch.nonzero(special == 0, as_tuple=True)
    order = torch.sort(lengths[row_sentence], descending=True, stable=True).indices
    row_sentence, row_position = row_sentence[order], row_position[order]
    row_lengths = lengths[row_sentence]

    device = _device_of(model)
    restrict = _restricts_logits(model)
    totals = torch.zeros(len(unique), dtype=torch.float64)
    head = _MaskedPositionsOnly(None if restrict else model)
    bar = tqdm(total=len(row_sentence), desc="PLL", unit="copy", disable=not progress)
    with _EvalMode(model), head, bar:
        for start, end in _budget_batches(row_lengths, batch_tokens):
            sentence, position = row_sentence[start:end], row_position[start:end]
            length = int(row_lengths[start])
            input_ids = all_ids[sentence, :length].clone()
            rows = torch.arange(len(sentence))
            targets = input_ids[rows, position].clone()
            input_ids[rows, position] = tokenizer.mask_token_id
            attention_mask = (torch.arange(length)[None, :] < row_lengths[start:end, None]).long()
            inputs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}
            if restrict:
                labels = torch.full_like(input_ids, -100)
                labels[rows, position] = targets
                inputs["labels"] = labels.to(device)
            else:
                head.select(rows.to(device), position.to(device), tuple(input_ids.shape))
            logits = _logits(model(**inputs))
            if head.fired:  # B x 1 x V
                logits = logits[:, 0]
            elif logits.dim() == 3:  # B x T x V: keep each row's masked position
                logits = logits[rows.to(device), position.to(device)]
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            scores = log_probs.gather(1, targets.to(device)[:, None]).squeeze(1)
            totals.index_add_(0, sentence, scores.to("cpu", torch.float64))
            bar.update(end - start)
    by_sentence = dict(zip(unique, totals.tolist()))
    return [by_sentence[sentence] for sentence in sentences]


@torch.inference_mode()
def causal_log_likelihoods(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = True,
) -> list[float]:
    """Log-likelihood sum_t log p(w_t | BOS, w_<t) of each sentence under a causal LM, in nats, one float per input
    sentence. Without a BOS token in the tokenizer the first token is context only (it cannot be predicted).

    `model(input_ids=B x T, attention_mask=B x T)` must return logits B x T x V (right padding, so positions of real
    tokens are unaffected by it)."""
    unique = list(dict.fromkeys(sentences))
    if not unique:
        return []
    bos = tokenizer.bos_token_id
    encoded = tokenizer(unique, add_special_tokens=False)["input_ids"]
    sequences = [([bos] if bos is not None else []) + ids for ids in encoded]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    all_ids, lengths = _padded(sequences, pad_id)
    order = torch.sort(lengths, descending=True, stable=True).indices

    device = _device_of(model)
    totals = torch.zeros(len(unique), dtype=torch.float64)
    with _EvalMode(model), tqdm(total=len(unique), desc="log-likelihood", unit="sent", disable=not progress) as bar:
        for start, end in _budget_batches(lengths[order], batch_tokens):
            sentence = order[start:end]
            batch_lengths = lengths[sentence]
            length = int(batch_lengths[0])
            if length < 2:  # nothing to predict in any row of this batch (sorted longest first)
                bar.update(end - start)
                continue
            input_ids = all_ids[sentence, :length]
            attention_mask = (torch.arange(length)[None, :] < batch_lengths[:, None]).long()
            logits = _logits(model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)))
            logits = logits[:, :-1]  # position t predicts token t + 1
            targets = input_ids[:, 1:].to(device)
            # log p = logit of the target - logsumexp; no B x T x V float32 log-softmax kept around.
            scores = logits.gather(-1, targets[..., None]).squeeze(-1).float() - torch.logsumexp(logits.float(), -1)
            scored = attention_mask[:, 1:].to(device).bool()
            totals[sentence] = (scores * scored).sum(-1).to("cpu", torch.float64)
            bar.update(end - start)
    by_sentence = dict(zip(unique, totals.tolist()))
    return [by_sentence[sentence] for sentence in sentences]


# ------------------------------------------------------------------------------------------------------ report
def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def summarise(sets: dict[str, list[dict]], good: dict[str, list[float]], bad: dict[str, list[float]]) -> dict:
    """Accuracy per set, per linguistic field and term (mean over their sets) and overall (mean over sets, as BabyLM
    reports BLiMP; `overall_pairs` pools the pairs). A tie counts as wrong. Files without a `field` (the BabyLM
    supplement) are their own field; `FIELD_ALIASES` merges spellings of one field."""
    per_set = {}
    for name, pairs in sets.items():
        correct = sum(g > b for g, b in zip(good[name], bad[name]))
        field = str(pairs[0].get("field") or name)
        per_set[name] = {
            "accuracy": correct / len(pairs),
            "correct": correct,
            "total": len(pairs),
            "ties": sum(g == b for g, b in zip(good[name], bad[name])),
            "field": FIELD_ALIASES.get(field, field),
            "linguistics_term": str(pairs[0].get("linguistics_term") or name),
        }
    groups = {}
    for key in ("field", "linguistics_term"):
        grouped = {}
        for name, row in per_set.items():
            grouped.setdefault(row[key], []).append(name)
        groups[key] = {
            group: {
                "accuracy": _mean([per_set[name]["accuracy"] for name in names]),
                "sets": len(names),
                "correct": sum(per_set[name]["correct"] for name in names),
                "total": sum(per_set[name]["total"] for name in names),
            }
            for group, names in sorted(grouped.items())
        }
    correct = sum(row["correct"] for row in per_set.values())
    total = sum(row["total"] for row in per_set.values())
    return {
        "overall": _mean([row["accuracy"] for row in per_set.values()]),
        "overall_pairs": correct / total,
        "correct": correct,
        "total": total,
        "ties": sum(row["ties"] for row in per_set.values()),
        "num_sets": len(per_set),
        "fields": {field: row["accuracy"] for field, row in groups["field"].items()},
        "terms": {term: row["accuracy"] for term, row in groups["linguistics_term"].items()},
        "field_counts": groups["field"],
        "term_counts": groups["linguistics_term"],
        "sets": per_set,
    }


def _markdown(results: dict) -> str:
    lines = [
        f"# {results['name']}: {results['method']} on {results['data']}",
        "",
        f"Model `{results['model']}`. Overall accuracy (mean over {results['num_sets']} sets): "
        f"**{100 * results['overall']:.1f}%**; pooled over {results['total']} pairs: "
        f"{100 * results['overall_pairs']:.1f}% (chance 50%; ties, counted wrong: {results['ties']}).",
        "",
        "| field | sets | pairs | accuracy (%) |",
        "|---|---:|---:|---:|",
    ]
    for field, row in results["field_counts"].items():
        lines.append(f"| {field} | {row['sets']} | {row['total']} | {100 * row['accuracy']:.1f} |")
    lines += ["", "| set | field | term | pairs | accuracy (%) |", "|---|---|---|---:|---:|"]
    for name, row in results["sets"].items():
        lines.append(
            f"| {name} | {row['field']} | {row['linguistics_term']} | {row['total']} | {100 * row['accuracy']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _bar_chart(results: dict, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fields = list(results["fields"])
    values = [100 * results["fields"][field] for field in fields]
    figure, axes = plt.subplots(figsize=(max(4.0, 0.9 * len(fields) + 2), 4))
    axes.bar(range(len(fields)), values, color="tab:blue")
    axes.axhline(100 * CHANCE, color="grey", linestyle="--", linewidth=1, label="chance")
    overall = 100 * results["overall"]
    axes.axhline(overall, color="tab:red", linewidth=1, label=f"overall {overall:.1f}")
    axes.set_xticks(range(len(fields)), fields, rotation=30, ha="right")
    axes.set_ylim(0, 100)
    axes.set_ylabel("accuracy (%)")
    axes.set_title(f"{results['name']}: accuracy per field ({results['method']})")
    axes.legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_report(results: dict, out_dir: str | Path, name: str) -> None:
    """`{name}.json`, `{name}.md` (Markdown tables) and `{name}.png` (bar chart per field) in out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / f"{name}.md").write_text(_markdown(results))
    _bar_chart(results, out_dir / f"{name}.png")


def _fingerprint(model, sets: dict[str, list[dict]], causal: bool) -> str:
    """What partial scores depend on: the scorer, the model's weights (the sum and sum of squares of every parameter,
    cheap on any device) and the pairs themselves."""
    digest = hashlib.sha1(f"{type(model).__name__} causal={causal}".encode())
    with torch.no_grad():
        named = list(model.named_parameters())
        stats = torch.stack(
            [torch.stack([p.detach().double().sum(), p.detach().double().square().sum()]) for _, p in named]
        )
    for (parameter_name, parameter), (total, squares) in zip(named, stats.tolist()):
        digest.update(f"{parameter_name}{tuple(parameter.shape)}{total:.10e}{squares:.10e}".encode())
    for set_name, pairs in sets.items():
        digest.update(set_name.encode())
        for pair in pairs:
            digest.update(f"{pair['sentence_good']}\t{pair['sentence_bad']}\n".encode())
    return digest.hexdigest()


class _PartialScores:
    """`{name}.partial.jsonl` beside the report: a fingerprint line, then one line per scored set, appended as each set
    finishes, so that an interrupted evaluation resumes at the next set. Scores of another model or other data (a
    different fingerprint) are set aside (renamed `.stale`), never mixed in; a last line cut short by the interruption
    is dropped. The file is removed once the report is written."""

    def __init__(self, path: Path, fingerprint: str):
        self.path, self.scores = path, {}
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        header = _json_or_none(lines[0]) if lines else None
        if header is not None and header.get("fingerprint") == fingerprint:
            for line in lines[1:]:
                row = _json_or_none(line)
                if row is not None:
                    self.scores[row.pop("set")] = row
            print(f"{path}: resuming after {len(self.scores)} scored sets")
            path.write_text(
                "".join(json.dumps(row) + "\n" for row in [header, *({"set": k, **v} for k, v in self.scores.items())]),
                encoding="utf-8",
            )
            return
        if lines:
            stale = path.with_name(path.name + ".stale")
            print(f"{path}: partial scores of another model or data set aside as {stale.name}; scoring from the start")
            path.replace(stale)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"fingerprint": fingerprint}) + "\n", encoding="utf-8")

    def add(self, set_name: str, scores: dict) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"set": set_name, **scores}) + "\n")
        self.scores[set_name] = scores


def _json_or_none(line: str):
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def evaluate_blimp(
    model,
    tokenizer,
    data: str | Path,
    out_dir: str | Path | None = None,
    name: str = "blimp",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    max_pairs_per_set: int | None = None,
    causal: bool | None = None,
    progress: bool = True,
) -> dict:
    """Zero-shot minimal-pair accuracy of `model` on `data` (a folder of `<set>.jsonl(.gz)` files, or one file).

    causal None picks the scorer from the model (`is_causal_lm`): pseudo-log-likelihood for masked LMs, left-to-right
    log-likelihood for decoders. max_pairs_per_set keeps the first pairs of each set. Returns the `summarise` dict plus
    what was run (name, data, model, method, sentences, seconds); with out_dir, also writes it as `{name}.json`,
    `{name}.md` and `{name}.png`. Sets are scored one after another; with out_dir each finished set is kept in
    `{name}.partial.jsonl` (see `_PartialScores`), so that an interrupted run, started again, resumes at the next
    set."""
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be positive, got {batch_tokens}")
    sets = load_minimal_pairs(data)
    if max_pairs_per_set is not None:
        if max_pairs_per_set < 1:
            raise ValueError(f"max_pairs_per_set must be positive, got {max_pairs_per_set}")
        sets = {set_name: pairs[:max_pairs_per_set] for set_name, pairs in sets.items()}
    causal = is_causal_lm(model) if causal is None else causal
    scorer = causal_log_likelihoods if causal else pseudo_log_likelihoods
    # Each set's sentences as good, bad, good, bad, ...
    texts = {
        set_name: [pair[key] for pair in pairs for key in ("sentence_good", "sentence_bad")]
        for set_name, pairs in sets.items()
    }
    sentences = [sentence for set_texts in texts.values() for sentence in set_texts]
    partial = None
    if out_dir is not None:
        partial = _PartialScores(Path(out_dir) / f"{name}.partial.jsonl", _fingerprint(model, sets, causal))
    good, bad, seconds = {}, {}, 0.0
    bar = tqdm(total=len(sentences), desc=name, unit="sentence", disable=not progress)
    with bar:
        for set_name, pairs in sets.items():
            done = partial.scores.get(set_name) if partial is not None else None
            if done is None:
                start = time.perf_counter()
                scores = scorer(model, tokenizer, texts[set_name], batch_tokens=batch_tokens, progress=False)
                done = {"good": scores[0::2], "bad": scores[1::2], "seconds": time.perf_counter() - start}
                if partial is not None:
                    partial.add(set_name, done)
            good[set_name], bad[set_name] = done["good"], done["bad"]
            seconds += done["seconds"]
            bar.set_postfix_str(set_name, refresh=False)
            bar.update(2 * len(pairs))
    config = getattr(model, "config", None)
    unique = len(set(sentences))
    results = {
        "name": name,
        "data": str(data),
        "model": str(getattr(config, "_name_or_path", "") or type(model).__name__),
        "model_class": type(model).__name__,
        "method": "log-likelihood (causal)" if causal else "pseudo-log-likelihood",
        "max_pairs_per_set": max_pairs_per_set,
        "sentences": unique,
        "seconds": seconds,
        "sentences_per_second": unique / seconds if seconds > 0 else None,
        **summarise(sets, good, bad),
    }
    if out_dir is not None:
        write_report(results, out_dir, name)
        partial.path.unlink(missing_ok=True)
    return results


# --------------------------------------------------------------------------------------------------------- CLI
def load_model_and_tokenizer(model_name: str, causal: bool = False, device: str | None = None):
    """(model in eval mode on `device`, tokenizer, causal) for a local folder or a Hub name. The tokenizer is read from
    the folder itself, else from its `tokenizer/` subfolder (a pretrain run keeps one there). Without `causal`, the
    config decides: a decoder (`is_decoder`, or a causal-LM architecture) loads as AutoModelForCausalLM."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    from .. import models  # noqa: F401  (registers ELC-BERT / LTG-BERT and the layer-fusion models with the Auto classes)

    config = AutoConfig.from_pretrained(model_name)
    architectures = getattr(config, "architectures", None) or []
    if not causal:
        causal = bool(getattr(config, "is_decoder", False)) or any(
            name.endswith(("ForCausalLM", "LMHeadModel")) for name in architectures
        )
    model_class = AutoModelForCausalLM if causal else AutoModelForMaskedLM
    model = model_class.from_pretrained(model_name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_name)
    except (OSError, ValueError):
        if not (Path(model_name) / "tokenizer").is_dir():
            raise
        tokenizer = AutoTokenizer.from_pretrained(Path(model_name) / "tokenizer")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), tokenizer, causal


def eval_blimp_cli(args) -> dict:
    """`elc-bert eval-blimp MODEL --data DIR ...`: scores, writes NAME.json/.md/.png, prints the overall line."""
    model, tokenizer, causal = load_model_and_tokenizer(args.model, args.causal, args.device)
    data = Path(args.data)
    name = args.name or (_set_name(data) or data.stem if data.is_file() else data.name)
    if args.out:
        out_dir = Path(args.out)
    elif Path(args.model).is_dir():
        out_dir = Path(args.model) / "eval"
    else:
        out_dir = Path("outputs") / "eval-blimp" / args.model.replace("/", "__")
    options = {"batch_tokens": args.batch_tokens} if args.batch_tokens else {}
    results = evaluate_blimp(
        model, tokenizer, data, out_dir, name=name, max_pairs_per_set=args.max_pairs_per_set, causal=causal, **options
    )
    print(
        f"{name}: {100 * results['overall']:.1f}% (mean over {results['num_sets']} sets, {results['total']} pairs, "
        f"{results['method']}); {results['sentences_per_second']:.1f} sentences/s; report in {out_dir}/{name}.md"
    )
    return results
