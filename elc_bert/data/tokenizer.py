"""The reference tokenizer recipe (cased WordPiece over byte-level pre-tokens with individual digits), and how a
tokenizer of that recipe is loaded and saved so that other code reads it right.

Three things other code reads besides the ids: where the tokens a user writes in text begin (`[MASK]` in a fill-mask
prompt, or a marker added later with `add_tokens`, must take the space before it, or that space becomes a lone `Ġ`
token, a piece that stands before a digit in the training text), the character offsets of each token (the spans of
token classification), which must not include the space a byte-level token carries, and the text decoded from tokens,
which a token-classification pipeline decodes again, word by word, to make an entity's text. `pipeline_ready` gives a
tokenizer of the recipe all three, without changing the ids of text that holds no added token and does not end in
spaces; the package applies it to every tokenizer it trains, loads, converts or exports (`load_tokenizer`,
`save_tokenizer`).
"""

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .jsonl import read_json

# In this order, so that [UNK]=0, [CLS]=1, [SEP]=2, [PAD]=3, [MASK]=4, [PAR]=5, [TAB]=6.
SPECIAL_TOKENS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]", "[PAR]", "[TAB]"]
# The class name saved tokenizers name in tokenizer_config.json: every transformers version has it (4.x and 5.x);
# the name 5.x writes by itself, TokenizersBackend, does not load on 4.x.
TOKENIZER_CLASS = "PreTrainedTokenizerFast"
TOKENIZER_CONFIG = "tokenizer_config.json"


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, min_frequency: int = 10, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """Trains the tokenizer of the spec on `texts` (an iterable of lines or documents).

    Returns a `PreTrainedTokenizerFast` with the template "[CLS] A [SEP] (B [SEP])", made `pipeline_ready`; save it
    with `save_tokenizer`.
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
    return pipeline_ready(
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            unk_token="[UNK]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            pad_token="[PAD]",
            mask_token="[MASK]",
            additional_special_tokens=["[PAR]", "[TAB]"],
            model_max_length=model_max_length,
        )
    )


def _is_byte_level(backend: dict) -> bool:
    """Whether a tokenizer.json (as a dict) pre-tokenizes byte-level: the recipe's tokenizers and the reference's."""
    pre = backend.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    return any(part.get("type") == "ByteLevel" for part in parts)


def _trimming_post_processor(post: dict | None) -> dict:
    """The post-processor `post` with a ByteLevel step that trims the space off each token's offsets in front."""
    trim = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    if post is None:
        return trim
    if post.get("type") == "ByteLevel":
        return {**post, "trim_offsets": True}
    steps = post["processors"] if post.get("type") == "Sequence" else [post]
    steps = [{**step, "trim_offsets": True} if step.get("type") == "ByteLevel" else step for step in steps]
    if not any(step.get("type") == "ByteLevel" for step in steps):
        steps = [trim, *steps]
    return {"type": "Sequence", "processors": steps}


# A pre-tokenization step that drops the spaces that end a piece of text: the piece before a token added to the
# vocabulary (the added-token split leaves "a " before "<e1>" in "a <e1> b"), or the end of the text. Before the
# ByteLevel step, which would make them a lone `Ġ`; a tokenizer.json setting, so that it also holds for tokens added
# later with transformers' own `add_tokens`, and survives save and load.
DROP_FINAL_SPACES = {"type": "Split", "pattern": {"Regex": " +\\z"}, "behavior": "Removed", "invert": False}
# The decoder earlier versions wrote (the ByteLevel decoder, then a Strip of the first space), replaced by the
# ByteLevel decoder alone: a token-classification pipeline decodes each word's tokens, then decodes those words again
# to make an entity's text, which glued "George" and "Washington" once the first decode had stripped the space that
# marks where a word starts.
STRIP_FIRST_SPACE = {"type": "Strip", "content": " ", "start": 1, "stop": 0}


def _dropping_final_spaces(pre: dict) -> dict:
    """The pre-tokenizer `pre` (a byte-level one) with `DROP_FINAL_SPACES` in front, once."""
    steps = pre["pretokenizers"] if pre.get("type") == "Sequence" else [pre]
    if steps[0] == DROP_FINAL_SPACES:
        return pre
    return {"type": "Sequence", "pretokenizers": [DROP_FINAL_SPACES, *steps]}


def pipeline_ready(tokenizer: PreTrainedTokenizerFast) -> PreTrainedTokenizerFast:
    """`tokenizer` with what other code reads made right, when it is a WordPiece over byte-level pre-tokens (the
    recipe's and the reference's; any other, BERT's or RoBERTa's say, is returned as it is):

    - every special token swallows the spaces before it (`lstrip`), so that "The cat [MASK] on" gives
      `Ġcat [MASK] Ġon`, as the masked word's own token stands in pretraining, not `Ġcat Ġ [MASK] Ġon`; and the
      pre-tokenizer drops the spaces that end a piece of text (`DROP_FINAL_SPACES`), so that a token added later
      (`add_tokens(["<e1>"])`, `add_special_tokens(...)`) stands the same way, and text that ends in spaces gets no
      lone `Ġ` at its end;
    - offsets leave out the space in front of a token (a ByteLevel post-processing step with `trim_offsets`), so
      that spans of token classification start at the word;
    - the decoder is the ByteLevel one alone: decoded text starts with the space in front of its first word (as
      RoBERTa's does), which is what lets a token-classification pipeline's `first`, `average` and `max` put the
      words of an entity back together with their spaces ("George Washington"). So a pipeline's `word` and
      `token_str` start with that space (" George Washington", " the"), as RoBERTa's do with `add_prefix_space`
      (`tests/test_handoffs.py` compares them); strip it where it is not wanted.

    The ids of text without special or added tokens that does not end in spaces do not change. Returns a new tokenizer;
    `tokenizer` is not modified.
    """
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    if backend["model"].get("type") != "WordPiece" or not _is_byte_level(backend):
        return tokenizer
    special = set(tokenizer.all_special_tokens)
    for token in backend.get("added_tokens", []):
        if token["special"] or token["content"] in special:
            token["lstrip"] = True
    backend["pre_tokenizer"] = _dropping_final_spaces(backend["pre_tokenizer"])
    backend["post_processor"] = _trimming_post_processor(backend.get("post_processor"))
    decoder = backend.get("decoder") or {}
    if decoder.get("type") == "Sequence" and decoder["decoders"][1:] == [STRIP_FIRST_SPACE]:
        backend["decoder"] = decoder["decoders"][0]
    special_tokens = {
        name: getattr(tokenizer, name)
        for name in ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token", "bos_token", "eos_token")
        if getattr(tokenizer, name, None) is not None
    }
    extra = [token for token in tokenizer.all_special_tokens if token not in special_tokens.values()]
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(backend)),
        additional_special_tokens=extra,
        model_max_length=tokenizer.model_max_length,
        padding_side=tokenizer.padding_side,
        truncation_side=tokenizer.truncation_side,
        name_or_path=tokenizer.name_or_path,
        **special_tokens,
    )


def load_tokenizer(source: str | Path, **kwargs) -> PreTrainedTokenizerFast:
    """`AutoTokenizer.from_pretrained(source)` made `pipeline_ready`: tokenizers saved by earlier versions of the
    package and converted reference tokenizers get the same fix as new ones."""
    return pipeline_ready(AutoTokenizer.from_pretrained(source, **kwargs))


def save_tokenizer(tokenizer, folder: str | Path) -> None:
    """`tokenizer.save_pretrained(folder)` in a form that every transformers from 4.46 on loads: tokenizer_config.json
    names a class they all have (`TOKENIZER_CLASS`), no custom code (a plain `AutoTokenizer.from_pretrained` needs no
    `trust_remote_code`), and the extra special tokens under the key 4.x reads as a list."""
    tokenizer.save_pretrained(folder)
    config_file = Path(folder) / TOKENIZER_CONFIG
    config = read_json(config_file, "a tokenizer config")
    if config.get("tokenizer_class") == "TokenizersBackend":
        config["tokenizer_class"] = TOKENIZER_CLASS
    config.pop("auto_map", None)
    if isinstance(config.get("extra_special_tokens"), list):  # 4.x reads a list under its older name only
        config["additional_special_tokens"] = config.pop("extra_special_tokens")
    config_file.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
