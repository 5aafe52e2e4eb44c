"""Sentence packing and the span-masking collator, checked against the recipe's statistics."""

import math
from pathlib import Path

import torch

from elc_bert.data.pretraining import PACKINGS, SpanMaskingCollator, packed_segments, span_coverage

MASK, PAD, V = 4, 3, 1000


def _collator(seed=0, **kwargs):
    return SpanMaskingCollator(MASK, PAD, V, seed=seed, **kwargs)


def _batch(rows=64, length=128, seed=0):
    gen = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(rows):
        n = int(torch.randint(length // 2, length - 1, (1,), generator=gen))
        body = torch.randint(7, V, (n,), generator=gen).tolist()
        examples.append([1] + body + [2])
    return examples


def test_pack_sentences_keeps_whole_sentences_within_documents():
    documents = [[[10] * 3, [11] * 4, [12] * 2], [[13] * 5], [[14] * 9]]
    segments = packed_segments(documents, 7, "sentences")
    assert segments == [[10] * 3 + [11] * 4, [12] * 2, [13] * 5, [14] * 7, [14] * 2]
    assert all(len(segment) <= 7 for segment in segments)


def test_masking_rate_labels_and_specials():
    examples = _batch()
    batch = _collator()(examples)
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    original = torch.full_like(ids, PAD)
    for row, example in enumerate(examples):
        original[row, : len(example)] = torch.tensor(example)
    chosen = labels != -100
    assert torch.equal(labels[chosen], original[chosen])
    assert not chosen[original < 6].any(), "special tokens are never masked"
    assert not chosen[mask == 0].any(), "padding is never masked"
    last = mask.sum(1) - 1
    assert not chosen[torch.arange(len(ids)), last].any(), "the last real token is never masked"
    assert torch.equal(ids[~chosen], original[~chosen])
    rate = chosen.sum().item() / (original >= 6).sum().item()
    assert 0.14 < rate < 0.19, f"masked {rate:.3f} of the maskable tokens (target 0.15, spans may overshoot)"
    # 80% [MASK] / 10% random / 10% unchanged, decided per span.
    as_mask = (ids == MASK) & chosen
    unchanged = (ids == original) & chosen
    assert 0.72 < as_mask.sum() / chosen.sum() < 0.88
    assert 0.05 < unchanged.sum() / chosen.sum() < 0.16


def test_masks_come_in_spans_of_the_recipe_lengths():
    batch = _collator(seed=1)(_batch(rows=256, seed=1))
    chosen = (batch["labels"] != -100).int()
    starts = (chosen[:, 1:] - chosen[:, :-1]) == 1
    runs = chosen.sum() / starts.sum()
    # Geometric(1/3) mod 10 has mean about 2.7; overlapping and adjacent spans merge into longer runs.
    assert 2.3 < runs < 4.5, f"mean masked run length {runs:.2f}"
    # A random replacement covers whole spans: runs of [MASK] are longer than 1 on average too.
    assert chosen.sum() > 0


def test_reproducible_per_seed_and_different_across_seeds():
    examples = _batch(rows=8)
    a = _collator(seed=3)(examples)["labels"]
    b = _collator(seed=3)(examples)["labels"]
    c = _collator(seed=4)(examples)["labels"]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_masks_of_a_sequence_do_not_depend_on_its_batch():
    """Each sequence is masked from its own ids and the seed: in a batch of its own, in another batch, padded to
    another length or split across data-parallel processes, it gets the same masks."""
    examples = _batch(rows=8)
    whole = _collator()(examples)
    halves = [_collator()(examples[:4]), _collator()(examples[4:][::-1])]
    for row, example in enumerate(examples):
        n = len(example)
        half, index = (halves[0], row) if row < 4 else (halves[1], 7 - row)
        for key in ("input_ids", "labels"):
            assert torch.equal(whole[key][row, :n], half[key][index, :n]), (row, key)
    assert (whole["labels"] != -100).any()


def test_masking_recipe_is_configurable_and_checked():
    examples = _batch(rows=64)
    light = (_collator(mask_p=0.05)(examples)["labels"] != -100).float().mean()
    heavy = (_collator(mask_p=0.3)(examples)["labels"] != -100).float().mean()
    assert light < 0.08 < 0.2 < heavy
    for field, value in (("mask_p", 0.0), ("mask_p", 1.5), ("span_p", 0.0), ("max_span", 1)):
        with __import__("pytest").raises(ValueError, match=field):
            _collator(**{field: value})


# ------------------------------------------------------------------- the reference recipe's samples (issue 40)
def _reference_cache(documents, seq_len):
    """The reference cache's rule, written here from its description: walk the document's sentences keeping a buffer;
    whenever the buffer holds more than seq_len tokens, emit its first seq_len tokens and restart the buffer with the
    sentence that overflowed; emit what is left (cut to seq_len) at the document's end."""
    out = []
    for document in documents:
        buffer = []
        for sentence in document:
            buffer.extend(sentence)
            if len(buffer) > seq_len:
                out.append(buffer[:seq_len])
                buffer = list(sentence)
        if buffer:
            out.append(buffer[:seq_len])
    return out


def test_reference_packing_fills_samples_as_the_reference_cache():
    from elc_bert.data.text import file_documents
    from elc_bert.data.tokenizer import train_tokenizer

    sample = Path(__file__).resolve().parents[1] / "data" / "samples" / "wikitext2_train.txt"
    documents = list(file_documents(str(sample)))
    tokenizer = train_tokenizer([s for d in documents for s in d], 2000, 2)
    tokenized = [[tokenizer(s, add_special_tokens=False)["input_ids"] for s in d] for d in documents]
    # Where no sentence is longer than a sample, the rule is the reference's exactly.
    fitting = [d for d in tokenized if all(len(s) <= 126 for s in d)]
    long = [d for d in tokenized if any(len(s) > 126 for s in d)]
    assert len(fitting) > 50 and len(long) > 5, "the sample has both kinds of document"
    assert packed_segments(fitting, 126, "reference") == _reference_cache(fitting, 126)
    ours, reference = packed_segments(tokenized, 126, "reference"), _reference_cache(tokenized, 126)
    full = [sum(len(s) == 126 for s in segments) / len(segments) for segments in (ours, reference)]
    assert full[0] >= full[1] - 0.02
    # ... where one is, it continues in the next sample: every token reaches one, where the reference drops the rest
    # of the sentence (here most of each document: a WikiText document is often one long line)
    assert all(_covers(d, "reference") for d in long)
    long_tokens = sum(len(s) for d in long for s in d)
    assert sum(map(len, _reference_cache(long, 126))) < 0.9 * long_tokens
    # whole-sentence packing fills far fewer samples (the defect the reference rule fixes)
    sentences = packed_segments(tokenized, 126, "sentences")
    assert sum(len(s) == 126 for s in sentences) / len(sentences) < full[0] - 0.2


def _covers(document, packing) -> bool:
    """Whether the packing's samples of one document are pieces of its token stream that together hold every token
    (checked position by position)."""
    tokens = [token for sentence in document for token in sentence]
    spans = PACKINGS[packing]([len(sentence) for sentence in document], 126)
    held = [False] * len(tokens)
    for (start, end), segment in zip(spans, packed_segments([document], 126, packing)):
        assert segment == tokens[start:end] and len(segment) <= 126
        held[start:end] = [True] * (end - start)
    return all(held)


def test_every_token_reaches_a_sample_whatever_the_sentence_lengths():
    """Sentences of 1, 100, 1,000 and 10,000 tokens, in both packings: the samples of one epoch hold every token of
    the corpus, in order; the reference rule repeats only the cut part of a sentence it restarts."""
    generator = torch.Generator().manual_seed(0)
    lengths = [1, 100, 1_000, 10_000, 100, 1]
    document = [torch.randint(7, V, (n,), generator=generator).tolist() for n in lengths]
    tokens = [token for sentence in document for token in sentence]
    for packing in PACKINGS:
        spans = PACKINGS[packing](lengths, 126)
        segments = packed_segments([document], 126, packing)
        assert all(len(segment) <= 126 for segment in segments)
        assert segments == [tokens[a:b] for a, b in spans]
        new, missed = span_coverage(spans, len(tokens))
        assert missed == 0 and sum(new) == len(tokens)
        assert _covers(document, packing)
        held = sum(map(len, segments))
        repeated = held - len(tokens)
        assert repeated == (0 if packing == "sentences" else held - sum(new))
    # the reference rule: [1 + 100] fills up with 25 tokens of the 1,000-token sentence, which restarts whole
    spans = PACKINGS["reference"](lengths, 126)
    assert spans[:3] == [(0, 126), (101, 227), (227, 353)]
    assert span_coverage(spans, len(tokens))[0][:2] == [126, 101]


def test_masks_are_drawn_anew_each_time_a_sample_is_drawn():
    examples = _batch(rows=64, seed=5)
    collator = _collator(seed=3)

    def masked_positions(draw):
        labels = collator(examples, draw=draw)["labels"]
        return [set((row != -100).nonzero().flatten().tolist()) for row in labels]

    first, second = masked_positions(draw=0), masked_positions(draw=17)  # two epochs: two steps drawing the samples
    repeated = sum(len(a & b) for a, b in zip(first, second)) / sum(len(a) for a in first)
    assert repeated < 0.3  # near the masking rate (0.15), not 1
    assert masked_positions(draw=17) == second  # the same step draws the same masks (a resume repeats them)
    static = masked_positions(draw=None)
    assert static == masked_positions(draw=None)  # validation: the same masks every time


def test_short_samples_share_and_lengths():
    examples = _batch(rows=400, length=128, seed=6)
    collator = _collator(seed=1, short_p=0.1, max_length=128)
    lengths = collator(examples, draw=4)["attention_mask"].sum(1)
    original = torch.tensor([len(example) for example in examples])
    shortened = lengths < original
    assert 0.05 < shortened.float().mean().item() < 0.15
    assert (lengths[shortened] >= 3).all() and (lengths[shortened] <= 128 - 1).all()
    batch = collator(examples, draw=4)
    ends = batch["input_ids"][torch.arange(400), lengths - 1]
    assert (ends == 2).all()  # [SEP] closes a shortened sample again
    assert torch.equal(_collator(seed=1, short_p=0.1)(examples)["attention_mask"].sum(1), original)  # no draw: none


def test_shared_rows_hold_every_sample_with_its_masks_in_fewer_rows():
    """`pack_rows`: each sample of the padded batch sits whole in one row of at most max_length tokens, with its
    masked ids and labels unchanged and position ids 0..n-1; rows are fuller (first fit, longest first)."""
    from elc_bert.data.pretraining import first_fit_rows

    examples = [example[: 10 + 7 * k] + [2] for k, example in enumerate(_batch(rows=16, length=128, seed=2))]
    padded = _collator(seed=4, short_p=0.1)(examples, draw=3)
    packed = _collator(seed=4, short_p=0.1, pack_rows=True)(examples, draw=3)
    lengths = padded["attention_mask"].sum(1).tolist()
    assert packed["input_ids"].shape[1] <= 128 and len(packed["input_ids"]) < len(examples)
    assert packed["attention_mask"].sum() == padded["attention_mask"].sum()
    found = []
    for row in range(len(packed["input_ids"])):
        positions = packed["position_ids"][row].tolist()
        starts = [t for t in range(len(positions)) if positions[t] == 0] + [int(packed["attention_mask"][row].sum())]
        for start, end in zip(starts, starts[1:]):
            matches = [
                k
                for k, n in enumerate(lengths)
                if n == end - start
                and torch.equal(packed["input_ids"][row, start:end], padded["input_ids"][k, :n])
                and torch.equal(packed["labels"][row, start:end], padded["labels"][k, :n])
            ]
            assert matches and positions[start:end] == list(range(end - start))
            found.append(matches[0])
    assert sorted(found) == list(range(len(examples)))
    assert first_fit_rows([5, 9, 3, 4, 8], 12) == [[1, 2], [4, 3], [0]]  # 9+3, 8+4, 5


def test_a_shared_row_batch_gives_the_padded_batchs_loss():
    """The MLM loss of the shared-row batch equals the padded batch's (dropout off): the model keeps each sample's
    attention to itself, so packing changes no number the training reads."""
    from helpers import TINY, build_model

    from elc_bert import ElcBertForMaskedLM

    examples = [[1] + [7 + (3 * k + j) % 80 for j in range(5 + 4 * k)] + [2] for k in range(8)]
    model = build_model(ElcBertForMaskedLM).eval()
    losses = []
    for pack_rows in (False, True):
        batch = SpanMaskingCollator(4, 3, TINY["vocab_size"], seed=1, mask_p=0.3, pack_rows=pack_rows)(examples, draw=2)
        with torch.no_grad():
            losses.append(model(**batch).loss)
    assert len(batch["input_ids"]) < len(examples)
    torch.testing.assert_close(losses[1], losses[0], rtol=0, atol=1e-5)


def _naive_span_masking(collator, sequence: list[int], draw=None) -> tuple[list[int], list[int]]:
    """The reference's span masking of one sequence, written from its description as a loop over spans, from the
    collator's own random numbers: spans of length Geometric(span_p) mod max_span start at the drawn positions and
    are written in turn (a later span over an earlier one) until the maskable tokens they cover reach the target."""
    ids = torch.tensor(sequence)
    maskable = [i for i, token in enumerate(sequence[:-1]) if token >= collator.num_special_tokens]
    draws = collator._draws(ids, len(maskable), len(sequence), draw)
    target, covered, decision = int(draws["target"]), set(), {}
    for k in range(collator.max_tries):
        length = (math.floor(math.log(draws["uniform"][k]) / math.log(1 - collator.span_p)) + 1) % collator.max_span
        start = int(draws["start"][k])
        for position in range(start, min(start + length, len(sequence))):
            if position in maskable:
                covered.add(position)
                decision[position] = float(draws["roll"][k])
        if len(covered) >= target:
            break
    masked, labels = list(sequence), [-100] * len(sequence)
    for position, roll in decision.items():
        labels[position] = sequence[position]
        if roll < 0.8:
            masked[position] = collator.mask_token_id
        elif roll < 0.9:
            masked[position] = int(draws["random_tokens"][position])
    return masked, labels


def test_span_masking_equals_the_naive_reference_loop():
    """Every sequence masked exactly as the loop over spans masks it, overlapping spans included (the later span
    decides, as in the reference), [TAB] (id 6) maskable with the recipe's 6 unmaskable ids."""
    collator = _collator(seed=11, max_span=4, mask_p=0.3)
    examples = _batch(rows=48, length=40, seed=2)
    examples[0] = [1, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 2]
    batch = collator(examples, draw=3)
    for row, example in enumerate(examples):
        masked, labels = _naive_span_masking(collator, example, draw=3)
        assert batch["input_ids"][row, : len(example)].tolist() == masked
        assert batch["labels"][row, : len(example)].tolist() == labels
    assert (batch["labels"][0] == 6).any()  # [TAB] is masked
