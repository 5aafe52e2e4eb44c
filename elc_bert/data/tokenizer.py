"""The reference tokenizer recipe: cased WordPiece over byte-level pre-tokens with individual digits."""

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

# In this order, so that [UNK]=0, [CLS]=1, [SEP]=2, [PAD]=3, [MASK]=4, [PAR]=5, [TAB]=6.
SPECIAL_TOKENS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]", "[PAR]", "[TAB]"]


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, min_frequency: int = 10, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """Trains the tokenizer of the spec on `texts` (an iterable of lines or documents).

    Returns a `PreTrainedTokenizerFast` with the template "[CLS] A [SEP] (B [SEP])"; save it with `save_pretrained`.
    """
    tokenizer = Tokenizer(
        models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="", max_input_chars_per_word=100)
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.ByteLevel(add_prefix_space=True), pre_tokenizers.Digits(individual_digits=True)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        continuing_subword_prefix="",
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        additional_special_tokens=["[PAR]", "[TAB]"],
        model_max_length=model_max_length,
    )
