"""Scoring sentences with a language model, in nats (loading one by name: `pretrained.load_model`).

Masked LMs are scored by pseudo-log-likelihood (Salazar et al., 2020; the ELC-BERT / BabyLM protocol):

    PLL(w_1..w_n) = sum_t log p(w_t | w_1..w_{t-1} [MASK] w_{t+1}..w_n)

every non-special token masked in turn, summed, no length normalisation; [CLS]/[SEP] (whatever the tokenizer adds)
are present in the input but never scored. Causal LMs are scored by their log-likelihood, sum_t log p(w_t | w_<t),
the first token conditioned on the tokenizer's BOS token when it has one (otherwise the first token is context only).
A single next token after a context (the BabyLM reading task's word pieces) is scored by `next_token_log_probs`.

Options, as the BabyLM 2025 evaluation and minicons have them: `starts` scores only a completion (the tokens whose
character span ends after the completion's first character, the official pipeline's rule; the rest of the sentence
is context), `pll="within_word_l2r"` is the word-level PLL of Kauf & Ivanova (2023) (while a token is scored, the later
tokens of its word are masked too: a word is what the tokenizer's pre-tokenizer makes one, `word_ids`), and
`temperature` divides the logits before the log-softmax.

Speed: every masked copy of every (unique) sentence becomes one row of a flat list; rows are sorted by length and cut
into batches under a token budget (rows x padded length), so one forward pass scores hundreds of masked copies of
many sentences at once and padding is rare.
"""

import contextlib
import logging
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from .models import ElcBertForMaskedLM, LayerFusionForMaskedLM
from .models.errors import InputError

logger = logging.getLogger(__name__)

DEFAULT_BATCH_TOKENS = 4096
PLL_METRICS = ("original", "within_word_l2r")


# ------------------------------------------------------------------------------------------------------ scoring
def _device_of(model) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _padded(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """N x T_max int64 ids padded with pad_id, and the N lengths."""
    rows = [torch.tensor(sequence, dtype=torch.long) for sequence in sequences]
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=pad_id), lengths


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
    """Whether `model`, given labels, runs its MLM head on the labelled positions only (N x V logits): one position
    per masked copy, so the vocabulary projection costs 1/T of the full B x T x V one. A layer-fusion masked LM always
    does, an ELC-BERT one only with `config.sparse_prediction` (off by default and in saved pretraining models); the
    others get the same saving from `_MaskedPositionsOnly`."""
    if isinstance(model, LayerFusionForMaskedLM):
        return True
    return isinstance(model, ElcBertForMaskedLM) and model.config.sparse_prediction


class _MaskedPositionsOnly:
    """For other masked LMs (and for a causal LM's last positions): a forward pre-hook on the output projection
    (`get_output_embeddings()`, a Linear) keeps each row's selected position only, so the vocabulary projection runs
    on B x 1 x H instead of B x T x H (with a 30k vocabulary it would otherwise cost as much as the encoder) and the
    logits are B x 1 x V. `fired` tells whether the hook ran on the last call; when it did not (no such Linear), the
    full B x T x V logits come back."""

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


@contextlib.contextmanager
def _eval_mode(model):
    """Dropout off while scoring; the model's train/eval mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _scored(encoded, index: int, start: int | None, special: list[int]) -> list[int]:
    """1 where a token of encoded sentence `index` is not scored: special tokens, and with `start` (a character
    position) the tokens whose span ends at or before it (the context before a completion)."""
    if start is None:
        return special
    offsets = encoded["offset_mapping"][index]
    return [int(flag or end <= start) for flag, (_, end) in zip(special, offsets)]


def _masked_lm_inputs(tokenizer, texts: list[str], starts: list[int | None], word_level: bool = False):
    """The encoding of `texts` (special tokens added), the not-scored flags of each (`_scored`) and, with
    `word_level`, the word index of each token (-1 for none)."""
    encoded = tokenizer(
        texts,
        add_special_tokens=True,
        return_special_tokens_mask=True,
        return_offsets_mapping=any(start is not None for start in starts),
    )
    not_scored = [
        _scored(encoded, i, start, special)
        for i, (start, special) in enumerate(zip(starts, encoded["special_tokens_mask"]))
    ]
    word_ids = None
    if word_level:
        word_ids = [[-1 if word is None else word for word in encoded.word_ids(i)] for i in range(len(texts))]
    return encoded, not_scored, word_ids


def _causal_inputs(tokenizer, texts: list[str], starts: list[int | None]):
    """The ids of `texts` after the tokenizer's BOS token (when it has one), and 1 where a token is scored: every one
    but the BOS, or a completion's (its span ends after the completion's start)."""
    prefix = [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]  # the BOS token, where there is one
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    sequences = [prefix + ids for ids in encoded["input_ids"]]
    scored = []
    for start, offsets in zip(starts, encoded["offset_mapping"]):
        flags = [0] * len(prefix) + [int(start is None or end > start) for _, end in offsets]
        scored.append([0, *flags[1:]] if flags else flags)  # the first token is context only: nothing predicts it
    return sequences, scored


def check_scorable(
    tokenizer,
    sentences: Sequence[str],
    causal: bool,
    starts: Sequence[int] | None = None,
    where: Sequence[str] | None = None,
) -> None:
    """Refuses (InputError) a sentence in which the scorer would score no token, naming it by `where` (one label per
    sentence: its file and line) or its index: its score would be 0, the highest a sentence can get, so it would win
    its pair unseen. For a masked LM that is a sentence with no token between the special tokens ([CLS] ... [SEP]),
    for a causal LM one with no token to predict (without a BOS token the first token is context only); with
    `starts`, a completion with no token of its own. The scorers check their sentences too; call this first to
    refuse before any scoring, e.g. every set of an evaluation at once."""
    texts = list(sentences)
    starts = list(starts) if starts is not None else [None] * len(texts)
    if causal:
        scored = [any(flags) for flags in _causal_inputs(tokenizer, texts, starts)[1]]
    else:
        scored = [not all(flags) for flags in _masked_lm_inputs(tokenizer, texts, starts)[1]]
    _refuse_unscored(texts, scored, where)


def _first_positions(keys: list) -> list[str]:
    """The label of each distinct key: `sentence I`, I the position of its first copy in the caller's list."""
    first = {}
    for position, key in enumerate(keys):
        first.setdefault(key, position)
    return [f"sentence {position}" for position in first.values()]


def _refuse_unscored(texts: list[str], scored: list[bool], where: Sequence[str] | None = None) -> None:
    empty = [index for index, has_token in enumerate(scored) if not has_token]
    if empty:
        first = empty[0]
        label = where[first] if where is not None else f"sentence {first}"
        more = f" (and {len(empty) - 1} more)" if len(empty) > 1 else ""
        raise InputError(
            f"{label}: {texts[first]!r} has no token to score{more}: it tokenizes to nothing the model predicts, "
            "so its score would be 0 and it would beat any sentence; fix or drop it"
        )


def pseudo_log_likelihoods(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = True,
    starts: Sequence[int] | None = None,
    pll: str = "original",
    temperature: float = 1.0,
) -> list[float]:
    """PLL of each sentence under a masked LM (sum over non-special tokens of log p(true token | sentence with that
    token masked)), in nats, one float per input sentence; with `starts` (a character position per sentence) of its
    completion only, with `pll` and `temperature` as the module says. Duplicates are scored once
    (`token_pseudo_log_likelihoods` scores them)."""
    if tokenizer.mask_token_id is None:
        raise InputError("pseudo-log-likelihood needs a tokenizer with a mask token (use the causal path for decoders)")
    if pll not in PLL_METRICS:
        raise InputError(f"pll must be one of {PLL_METRICS}, got {pll!r}")
    keys = list(zip(sentences, starts if starts is not None else [None] * len(sentences)))
    unique = list(dict.fromkeys(keys))
    if not unique:
        return []
    texts = [text for text, _ in unique]
    encoded, not_scored, word_ids = _masked_lm_inputs(
        tokenizer, texts, [start for _, start in unique], pll == "within_word_l2r"
    )
    _refuse_unscored(texts, [not all(flags) for flags in not_scored], _first_positions(keys))
    totals = token_pseudo_log_likelihoods(
        model,
        encoded["input_ids"],
        not_scored,
        tokenizer.mask_token_id,
        tokenizer.pad_token_id or 0,
        batch_tokens=batch_tokens,
        progress=progress,
        word_ids=word_ids,
        temperature=temperature,
    )
    by_key = dict(zip(unique, totals.tolist()))
    return [by_key[key] for key in keys]


@torch.inference_mode()
def token_pseudo_log_likelihoods(
    model,
    sequences: Sequence[Sequence[int]],
    special_tokens_mask: Sequence[Sequence[int]],
    mask_token_id: int,
    pad_id: int = 0,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = True,
    word_ids: Sequence[Sequence[int]] | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """PLL of each token sequence (its ids, special tokens included; unpadded), float64 on the CPU, one per sequence:
    the sum over its positions t with special_tokens_mask 0 of log p(ids[t] | ids with position t masked). With
    `word_ids` (a word index per token, -1 for none), the positions after t of t's word are masked too
    (within_word_l2r); log-probabilities are of logits / `temperature`.

    `model(input_ids=B x T, attention_mask=B x T)` must return logits B x T x V; a masked LM that restricts its head
    to labelled positions (`_restricts_logits`) gets `labels` too and returns N x V logits for the masked positions
    only, and for others a hook on the output projection does the same (`_MaskedPositionsOnly`). Runs on the
    model's device; log-softmax in float32."""
    totals = torch.zeros(len(sequences), dtype=torch.float64)
    if not sequences:
        return totals
    all_ids, lengths = _padded(sequences, pad_id)
    special, _ = _padded(special_tokens_mask, 1)
    words = _padded(word_ids, -1)[0] if word_ids is not None else None
    # One row per (sequence, scored position): the masked copies of every sequence, flat.
    row_sentence, row_position = torch.nonzero(special == 0, as_tuple=True)
    order = torch.sort(lengths[row_sentence], descending=True, stable=True).indices
    row_sentence, row_position = row_sentence[order], row_position[order]
    row_lengths = lengths[row_sentence]

    device = _device_of(model)
    restrict = _restricts_logits(model)
    head = _MaskedPositionsOnly(None if restrict else model)
    bar = tqdm(total=len(row_sentence), desc="PLL", unit="copy", disable=not progress)
    with _eval_mode(model), head, bar:
        for start, end in _budget_batches(row_lengths, batch_tokens):
            sentence, position = row_sentence[start:end], row_position[start:end]
            length = int(row_lengths[start])
            input_ids = all_ids[sentence, :length].clone()
            rows = torch.arange(len(sentence))
            targets = input_ids[rows, position].clone()
            input_ids[rows, position] = mask_token_id
            if words is not None:  # the rest of the scored token's word, to its right
                row_words = words[sentence, :length]
                own = row_words[rows, position][:, None]
                later = torch.arange(length)[None, :] > position[:, None]
                input_ids[later & (row_words == own) & (own >= 0)] = mask_token_id
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
            log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
            scores = log_probs.gather(1, targets.to(device)[:, None]).squeeze(1)
            totals.index_add_(0, sentence, scores.to("cpu", torch.float64))
            bar.update(end - start)
    return totals


@torch.inference_mode()
def next_token_log_probs(
    model,
    sequences: Sequence[Sequence[int]],
    targets: Sequence[int],
    pad_id: int = 0,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = True,
) -> torch.Tensor:
    """log p(targets[i] | sequences[i]) under a causal LM, float64 on the CPU, one per sequence: the log-softmax (in
    float32) of the logits at the sequence's last token (each sequence its ids, special tokens included, unpadded and
    not empty), as the BabyLM reading task scores a word's next token.

    `model(input_ids=B x T, attention_mask=B x T)` must return logits B x T x V (right padding); the vocabulary
    projection runs on the last positions only where `_MaskedPositionsOnly` can hook it. Sequences are sorted by
    length and batched under `batch_tokens`, like the other scorers; runs on the model's device."""
    totals = torch.zeros(len(sequences), dtype=torch.float64)
    if not sequences:
        return totals
    all_ids, lengths = _padded(sequences, pad_id)
    targets = torch.tensor(list(targets), dtype=torch.long)
    order = torch.sort(lengths, descending=True, stable=True).indices
    device = _device_of(model)
    head = _MaskedPositionsOnly(model)
    with _eval_mode(model), head, tqdm(total=len(sequences), desc="next token", disable=not progress) as bar:
        for start, end in _budget_batches(lengths[order], batch_tokens):
            rows = order[start:end]
            length = int(lengths[rows[0]])
            input_ids = all_ids[rows, :length]
            attention_mask = (torch.arange(length)[None, :] < lengths[rows, None]).long()
            batch, last = torch.arange(len(rows)).to(device), (lengths[rows] - 1).to(device)
            head.select(batch, last, tuple(input_ids.shape))
            logits = _logits(model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)))
            logits = logits[:, 0] if head.fired else logits[batch, last]
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            totals[rows] = log_probs.gather(1, targets[rows].to(device)[:, None])[:, 0].to("cpu", torch.float64)
            bar.update(end - start)
    return totals


@torch.inference_mode()
def causal_log_likelihoods(
    model,
    tokenizer,
    sentences: Sequence[str],
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = True,
    starts: Sequence[int] | None = None,
    temperature: float = 1.0,
) -> list[float]:
    """Log-likelihood sum_t log p(w_t | BOS, w_<t) of each sentence under a causal LM, in nats, one float per input
    sentence; with `starts`, of its completion's tokens only. Without a BOS token in the tokenizer the first token is
    context only (it cannot be predicted).

    `model(input_ids=B x T, attention_mask=B x T)` must return logits B x T x V (right padding, so positions of real
    tokens are unaffected by it)."""
    keys = list(zip(sentences, starts if starts is not None else [None] * len(sentences)))
    unique = list(dict.fromkeys(keys))
    if not unique:
        return []
    texts = [text for text, _ in unique]
    sequences, scored_tokens = _causal_inputs(tokenizer, texts, [start for _, start in unique])
    _refuse_unscored(texts, [any(flags) for flags in scored_tokens], _first_positions(keys))
    all_ids, lengths = _padded(sequences, tokenizer.pad_token_id or 0)
    all_scored, _ = _padded(scored_tokens, 0)
    order = torch.sort(lengths, descending=True, stable=True).indices

    device = _device_of(model)
    totals = torch.zeros(len(unique), dtype=torch.float64)
    with _eval_mode(model), tqdm(total=len(unique), desc="log-likelihood", unit="sent", disable=not progress) as bar:
        for start, end in _budget_batches(lengths[order], batch_tokens):
            sentence = order[start:end]
            batch_lengths = lengths[sentence]
            length = int(batch_lengths[0])  # >= 2: every sentence has a token to predict (`_refuse_unscored`)
            input_ids = all_ids[sentence, :length]
            attention_mask = (torch.arange(length)[None, :] < batch_lengths[:, None]).long()
            logits = _logits(model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)))
            logits = logits[:, :-1]  # position t predicts token t + 1
            targets = input_ids[:, 1:].to(device)
            # log p = logit of the target - logsumexp; no B x T x V float32 log-softmax kept around.
            logits = logits.float() / temperature
            scores = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, -1)
            scored = (attention_mask[:, 1:] * all_scored[sentence, 1:length]).to(device).bool()
            totals[sentence] = (scores * scored).sum(-1).to("cpu", torch.float64)
            bar.update(end - start)
    by_key = dict(zip(unique, totals.tolist()))
    return [by_key[key] for key in keys]
