"""Pretraining data: packing documents into samples (the reference cache's rule, or whole sentences), the
reference recipe's span-masking collator (the ELC-BERT paper, arXiv 2311.02265), and the samples of a batch laid
several to a row (`shared_rows`).

The collator is vectorised over the batch and over candidate spans: no Python loop per sample or per span.
"""

import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.nn.utils.rnn import pad_sequence

from ..models.errors import InputError


def pack_sentences(sentence_lengths: Sequence[int], max_tokens: int) -> list[tuple[int, int]]:
    """Greedily packs whole sentences of a document into segments of at most `max_tokens`: the segments as (start,
    end) spans over the document's tokens (its sentences laid end to end, of `sentence_lengths` tokens).

    A sentence that does not fit starts the next segment; one longer than `max_tokens` is cut into pieces, each a
    segment (its last piece may take the following sentences). No token is left out and none is repeated.
    """
    spans, start = [], 0
    for sentence_start, end in _sentence_bounds(sentence_lengths):
        if end - start > max_tokens and sentence_start > start:  # does not fit: the segment ends before it
            spans.append((start, sentence_start))
            start = sentence_start
        while end - start > max_tokens:  # an over-long sentence: pieces of max_tokens
            spans.append((start, start + max_tokens))
            start += max_tokens
    return _with_rest(spans, start, sum(sentence_lengths))


def fill_segments(sentence_lengths: Sequence[int], max_tokens: int) -> list[tuple[int, int]]:
    """Packs a document's sentences as the reference cache (`cache_dataset.py`) does, as (start, end) spans over its
    tokens (its sentences laid end to end, of `sentence_lengths` tokens): sentences are appended to the segment until
    it holds more than `max_tokens`; then its first `max_tokens` are a segment (so it ends inside the sentence that
    overflowed), and the next segment starts again with that whole sentence, whose cut part is thus repeated.
    Segments are full except at document ends, start at a sentence start, and never cross document boundaries.

    One change to the reference's rule: a sentence longer than `max_tokens` continues in the next segment (the
    reference keeps its first `max_tokens` tokens, twice, and drops the rest), so every token reaches a segment.
    """
    spans, start = [], 0
    for sentence_start, end in _sentence_bounds(sentence_lengths):
        if end - start > max_tokens and sentence_start > start:  # overflow: a full segment, then restart
            spans.append((start, start + max_tokens))
            start = sentence_start
        while end - start > max_tokens:  # the sentence alone is longer than a segment: it continues
            spans.append((start, start + max_tokens))
            start += max_tokens
    return _with_rest(spans, start, sum(sentence_lengths))


def _sentence_bounds(sentence_lengths: Sequence[int]) -> Iterator[tuple[int, int]]:
    end = 0
    for length in sentence_lengths:
        yield end, end + length
        end += length


def _with_rest(spans: list[tuple[int, int]], start: int, total: int) -> list[tuple[int, int]]:
    return [*spans, (start, total)] if total > start else spans


def span_coverage(spans: Sequence[tuple[int, int]], total: int) -> tuple[list[int], int]:
    """For spans over a document of `total` tokens (in order, their starts never decreasing): the tokens each span
    holds that no span before it held, and the tokens that no span holds."""
    new, reached = [], 0
    for start, end in spans:
        new.append(max(0, end - max(start, reached)))
        reached = max(reached, end)
    return new, total - sum(new)


def packed_segments(documents: Iterable[Sequence[Sequence[int]]], max_tokens: int, packing: str) -> list[list[int]]:
    """The token segments of the `packing` rule (`PACKINGS`) over documents of tokenized sentences."""
    segments = []
    for document in documents:
        tokens = [token for sentence in document for token in sentence]
        spans = PACKINGS[packing]([len(sentence) for sentence in document], max_tokens)
        segments.extend(tokens[start:end] for start, end in spans)
    return segments


PACKINGS = {"reference": fill_segments, "sentences": pack_sentences}


def first_fit_rows(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """The indices of samples of the given lengths laid several to a row of at most `capacity` tokens: longest first,
    each into the first row with room (first-fit decreasing; ties in index order). A sample longer than `capacity`
    has a row of its own."""
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for row, free in enumerate(room):
            if lengths[index] <= free:
                rows[row].append(index)
                room[row] -= lengths[index]
                break
        else:
            rows.append([index])
            room.append(capacity - lengths[index])
    return rows


def shared_rows(batch: dict[str, torch.Tensor], capacity: int, pad_token_id: int) -> dict[str, torch.Tensor]:
    """The samples of a right-padded batch (input_ids, attention_mask, labels: B x T) laid several to a row of at most
    `capacity` tokens (`first_fit_rows`), with `position_ids` restarting at each sample, as
    `transformers.DataCollatorWithFlattening` marks them: a model that keeps attention inside each sample (ELC-BERT
    and LTG-BERT do: `packed_sequence_mask`) gives every token what it gets in the padded batch, with less padding.
    Positions after a row's last sample go on counting (padding)."""
    lengths = batch["attention_mask"].sum(1).tolist()
    layout = first_fit_rows(lengths, capacity)
    width = max(sum(lengths[i] for i in row) for row in layout)
    fills = {"input_ids": pad_token_id, "attention_mask": 0, "labels": -100}
    packed = {key: torch.full((len(layout), width), fill, dtype=batch[key].dtype) for key, fill in fills.items()}
    packed["position_ids"] = torch.zeros((len(layout), width), dtype=torch.long)  # each row filled below
    for row, samples in enumerate(layout):
        start = 0
        for index in samples:
            n = lengths[index]
            for key in fills:
                packed[key][row, start : start + n] = batch[key][index, :n]
            packed["position_ids"][row, start : start + n] = torch.arange(n)
            start += n
        packed["position_ids"][row, start:] = torch.arange(n, n + width - start)
    return packed


@dataclass
class SpanMaskingCollator:
    """Pads token-id sequences into a batch and masks spans for MLM, as the reference recipe does.

    Per sequence, first (with `short_p` > 0, as the reference's samples): with probability `short_p` its content is
    cut to a length drawn uniformly from [1, `max_length` - 2), then [SEP] closes it again. Then n ~ Binomial(#maskable
    tokens, mask_p); spans of length Geometric(1/3) mod `max_span` (length 0 spans are skipped) start at random
    positions of the sequence until at least n maskable tokens are covered (at most `max_tries` spans). Each span as
    a whole becomes [MASK] (80%), random tokens from [random_token_min, V) (10%) or stays unchanged (10%); where spans
    overlap, the later one decides. Tokens with ids below `num_special_tokens` and the last real token are never
    masked.

    Input: a list of examples, each a list of ids or a dict with "input_ids" (already with [CLS] ... [SEP]).
    Output: input_ids, attention_mask and labels (the original id where masked, -100 elsewhere), all B x T.

    The masks of a sequence are a function of `seed`, that sequence's token ids and `draw` (the number of the batch
    that draws it: the training step) alone: no global random state is read, so a run resumed from a checkpoint masks
    exactly as the uninterrupted run did, whatever the data loader prefetched, and a batch split across data-parallel
    processes (or accumulation steps) is masked exactly as it is in one piece. A sample drawn again in a later epoch
    gets new masks, as in the reference, where masks are drawn each time a sample is read; `draw` None (validation)
    gives each sample the same masks every time.

    With `pack_rows`, the masked samples are then laid several to a row of `max_length` tokens (`shared_rows`, with
    `position_ids` marking each sample): the same samples, masks and labels, in fewer, fuller rows.
    """

    mask_token_id: int
    pad_token_id: int
    vocab_size: int
    mask_p: float = 0.15
    span_p: float = 1 / 3
    max_span: int = 10
    max_tries: int = 100
    num_special_tokens: int = 6
    random_token_min: int = 5
    seed: int = 0
    short_p: float = 0.0
    max_length: int = 128
    pack_rows: bool = False

    def __post_init__(self):
        if not 0 < self.mask_p < 1:
            raise InputError(f"mask_p must be in (0, 1), got {self.mask_p}")
        if not 0 < self.span_p <= 1:
            raise InputError(f"span_p must be in (0, 1], got {self.span_p}")
        if self.max_span < 2:
            raise InputError(f"max_span must be >= 2, got {self.max_span}")
        if self.max_tries < 1:
            raise InputError(f"max_tries must be >= 1, got {self.max_tries}")
        if not 0 <= self.short_p < 1:
            raise InputError(f"short_p must be in [0, 1), got {self.short_p}")

    def __call__(self, examples, draw: int | None = None, max_length: int | None = None) -> dict[str, torch.Tensor]:
        """examples: lists of ids or dicts with "input_ids"; draw: the number of the batch drawing them (see above);
        max_length: the samples' length limit (default `max_length`), from which `short_p` draws."""
        sequences = [example["input_ids"] if isinstance(example, dict) else example for example in examples]
        if self.short_p > 0 and draw is not None:
            limit = max_length or self.max_length
            sequences = [self._shortened(list(sequence), draw, limit) for sequence in sequences]
        rows = [torch.as_tensor(sequence, dtype=torch.long) for sequence in sequences]
        input_ids = pad_sequence(rows, batch_first=True, padding_value=self.pad_token_id)
        attention_mask = pad_sequence([torch.ones_like(row) for row in rows], batch_first=True)
        masked, labels = self.mask(input_ids, attention_mask, draw)
        batch = {"input_ids": masked, "attention_mask": attention_mask, "labels": labels}
        if self.pack_rows:
            batch = shared_rows(batch, max_length or self.max_length, self.pad_token_id)
        return batch

    def _generator(self, ids: bytes, draw: int | None, stream: int = 0) -> torch.Generator:
        """A generator seeded by `seed`, the ids, `draw` and `stream` (0: masking, 1: shortening)."""
        salt = self.seed if draw is None else zlib.crc32(f"{draw}/{stream}".encode(), self.seed)
        return torch.Generator().manual_seed(zlib.crc32(ids, salt))

    def _shortened(self, sequence: list[int], draw: int, max_length: int) -> list[int]:
        """[CLS] content [SEP], with probability `short_p` with its content cut to a length uniform in
        [1, max_length - 2)."""
        g = self._generator(torch.tensor(sequence, dtype=torch.long).numpy().tobytes(), draw, stream=1)
        if torch.rand(1, generator=g).item() >= self.short_p or max_length <= 3:
            return sequence
        keep = int(torch.randint(1, max_length - 2, (1,), generator=g))
        return sequence[: 1 + keep] + sequence[-1:] if keep < len(sequence) - 2 else sequence

    def _draws(self, sequence: torch.Tensor, maskable: int, length: int, draw: int | None) -> dict[str, torch.Tensor]:
        """The random numbers of one sequence (its n real ids, `maskable` of them maskable), from a generator seeded
        by `seed`, those ids and `draw`; per-position draws are padded to the batch length T."""
        g = self._generator(sequence.numpy().tobytes(), draw)
        n, tries = len(sequence), self.max_tries
        random_tokens = torch.full((length,), self.random_token_min, dtype=torch.long)
        random_tokens[:n] = torch.randint(self.random_token_min, self.vocab_size, (n,), generator=g)
        return {
            "target": torch.binomial(torch.tensor([float(maskable)]), torch.tensor([self.mask_p]), generator=g).long(),
            "uniform": torch.rand(tries, generator=g).clamp_min(1e-12),
            "start": (torch.rand(tries, generator=g) * n).long(),
            "roll": torch.rand(tries, generator=g),
            "random_tokens": random_tokens,
        }

    def mask(self, input_ids, attention_mask, draw: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Span masking of a right-padded batch (B x T) drawn by batch `draw`; returns the masked ids and the labels."""
        batch, length = input_ids.shape
        lengths = attention_mask.sum(1)
        maskable = attention_mask.bool() & (input_ids >= self.num_special_tokens)
        maskable[torch.arange(batch), (lengths - 1).clamp(min=0)] = False
        counts = maskable.sum(1).tolist()
        draws = [self._draws(input_ids[row, : lengths[row]], counts[row], length, draw) for row in range(batch)]
        draws = {key: torch.stack([d[key] for d in draws]) for key in draws[0]}
        target = draws["target"].view(batch)

        # K candidate spans per row: lengths Geometric(span_p) mod max_span, uniformly random starts.
        tries = self.max_tries
        geometric = torch.log(draws["uniform"]) / torch.log1p(torch.tensor(-self.span_p))
        span_length = (geometric.floor().long() + 1) % self.max_span
        start = draws["start"]
        position = torch.arange(length)
        covers = (position >= start[..., None]) & (position < (start + span_length)[..., None])  # B x K x T
        covers &= maskable[:, None, :]

        # Take spans in order until the union covers `target` tokens (the reference's stopping rule).
        union = torch.cummax(covers.to(torch.uint8), dim=1).values  # B x K x T: union of spans 0..k
        covered = union.sum(-1)  # B x K
        reached = covered >= target[:, None]
        stop = torch.where(reached.any(1), reached.float().argmax(1), torch.full((batch,), tries - 1))
        used = torch.arange(tries) <= stop[:, None]  # B x K
        covers &= used[..., None]
        chosen = covers.any(1)  # B x T

        # Each position follows the last span that covers it (the reference writes the spans in turn, each over the
        # ones before); the span decides [MASK] / random / unchanged.
        owner = tries - 1 - covers.flip(1).to(torch.uint8).argmax(1)  # B x T
        roll = draws["roll"].gather(1, owner)
        masked = torch.where(chosen & (roll < 0.8), self.mask_token_id, input_ids)
        masked = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), draws["random_tokens"], masked)
        labels = torch.where(chosen, input_ids, -100)
        return masked, labels
