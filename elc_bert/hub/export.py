"""`elc-bert export RUN_OR_MODEL_DIR OUT_DIR`: a Hub-ready folder that loads with or without this package.

The folder holds `config.json` with an `auto_map` over every Auto class of the model's family, the remote code (the
package's own model files, which `save_pretrained` copies beside the weights for every save: one layout for plain
saves and exports), the weights as `model.safetensors`, the tokenizer and a model card (README.md, `model_card.py`).
Users who install the `elc_bert` package (from its repository: it is not on PyPI) load it through the Auto classes
after `import elc_bert` (the package's classes win over the remote code then); users who only have `transformers` load
it with `trust_remote_code=True`. The card carries a run's metrics only when that run saved these very weights (the
fingerprints it records, `elc_bert.runs`).
"""

import importlib
import json
import logging
import os
from pathlib import Path

from elc_bert import runs
from elc_bert.data.tokenizer import TOKENIZER_CONFIG, load_tokenizer, save_tokenizer
from elc_bert.integrations import write_sentence_files
from elc_bert.job_configs import CONFIG_CLASSES, read_run
from elc_bert.models import AUTO_CLASSES
from elc_bert.models.loading import check_weights_loaded, cut_short_weights, key_list, load_pretrained
from elc_bert.pretrained import find_tokenizer

from ..data.jsonl import read_json
from ..models.errors import InputError, InputExistsError, InputNotFoundError

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
RUN_FILES = (runs.METRICS, runs.RESULTS, *(runs.config_file("", job).name for job in CONFIG_CLASSES))

logger = logging.getLogger(__name__)


def has_model(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any((folder / name).is_file() for name in WEIGHT_FILES)


def find_model_dir(source: Path) -> Path:
    """The model folder of `source`: the folder itself when it holds config.json and weights (a model folder, or a
    pretraining run, which saves its final model at the top), else the run's best checkpoint as its last
    `trainer_state.json` names it (`elc-bert mlm` keeps the best-validation one), else its last checkpoint. Weights
    cut short (a process killed while writing them) are passed over with a warning, for the last whole checkpoint."""
    if has_model(source):
        damaged = cut_short_weights(source)
        if damaged is None:
            return source
        logger.warning("%s is cut short: passed over for the run's last whole checkpoint (it stays as it is)", damaged)
    checkpoints = [p for p in runs.checkpoints(source) if has_model(p) and cut_short_weights(p) is None]
    if not checkpoints and has_model(source):
        raise OSError(f"{cut_short_weights(source)} is cut short, and {source} holds no whole checkpoint to export")
    if not checkpoints:
        raise InputNotFoundError(
            f"{source}: no model here (config.json with {' or '.join(WEIGHT_FILES[::2])}) and no checkpoint-*/ "
            "folder holding one. `elc-bert finetune-ner` keeps its trials' models in "
            f"n<N>/trial<t>/{runs.MODEL}/: export one of those and pass the run as --run-dir for its metrics."
        )
    state_file = checkpoints[-1] / runs.TRAINER_STATE
    if state_file.is_file():
        best = read_json(state_file, "a Trainer state").get("best_model_checkpoint")
        if best and has_model(source / Path(best).name):
            return source / Path(best).name
    return checkpoints[-1]


def model_class_of(model_dir: Path):
    """The package class named by the folder's config.json (`architectures`)."""
    config_file = model_dir / "config.json"
    config = read_json(config_file, "a model config")
    if config.get("model_type") == "ltgbert":
        raise InputError(
            f"{config_file}: a published reference checkpoint (model_type 'ltgbert'); run `elc-bert convert` first"
        )
    known = {cls.__name__: cls for family in AUTO_CLASSES.values() for cls in family.values()}
    names = config.get("architectures") or []
    if len(names) != 1 or names[0] not in known:
        raise InputError(f"{config_file}: architectures must name one of {sorted(known)}, got {names}")
    return known[names[0]]


def family_of(model_class):
    """(config class, {auto class: model class}) of the family `model_class` belongs to."""
    for config_class, family in AUTO_CLASSES.items():
        if model_class in family.values():
            return config_class, family
    raise InputError(f"{model_class.__name__} is not one of the package's Auto-registered models")


def _file_of(module: str) -> str:
    """The file name (without .py) of a model module in a saved folder: the model files are shipped side by side."""
    return module.rsplit(".", 1)[-1]


def auto_map(config_class, family: dict) -> dict:
    """config.json's `auto_map`: Auto class name -> `file.Class` of the remote code, for every Auto class of the
    family (a plain save names the saved class's only), so that an exported MLM also loads through `AutoModel`.

    `AutoConfig` points into the modeling file (which imports the config class): `transformers` puts each entry
    file of a local folder into its own dynamic module, so a config class read from the configuration file would
    be another class than the one the modeling file sees, and a layer-fusion model's backbone config would then miss
    the Auto registrations made next to the models."""
    modeling_module = importlib.import_module(next(iter(family.values())).__module__)
    if getattr(modeling_module, config_class.__name__, None) is not config_class:
        raise InputError(f"{modeling_module.__name__} must import {config_class.__name__} at module level")
    entries = {"AutoConfig": f"{_file_of(modeling_module.__name__)}.{config_class.__name__}"}
    for auto_class, model_class in family.items():
        entries[auto_class.__name__] = f"{_file_of(model_class.__module__)}.{model_class.__name__}"
    return entries


def _run_start_model(run_dir: Path | None) -> str | None:
    """The model a fine-tuning run started from, as its resolved config names it (None: from scratch, or no run)."""
    config = read_run(run_dir).config
    return None if config is None else config.start_model


def model_of_run(run_dir: Path, model_dir: Path) -> str:
    """Where (relative to `run_dir`) the run saved the model whose weights `model_dir` holds, by the fingerprints
    the run recorded: a run's metrics go only onto the card of a model that run made. Raises ValueError naming both
    folders when the run made another model, or recorded none (a run made by an older version)."""
    recorded = runs.recorded_models(run_dir)
    if recorded is None:
        raise InputError(
            f"{run_dir} records no fingerprint of the models it saved (no {runs.MODEL_FINGERPRINTS}: a run made by an "
            f"older elc_bert), so its metrics cannot be checked against the model in {model_dir}. Leave --run-dir out "
            "to export the model without them."
        )
    digest = runs.fingerprint(model_dir)
    made = [folder for folder, recorded_digest in recorded.items() if recorded_digest == digest]
    if not made:
        raise InputError(
            f"the model in {model_dir} was not made by the run in {run_dir} (its weights' sha256 {digest[:16]}... is "
            f"none of the run's models: {', '.join(sorted(recorded)) or 'none'}), so the run's metrics do not describe "
            "it. Pass the run that made it as --run-dir, or leave --run-dir out for a card without metrics."
        )
    return made[-1]


def check_out_dir(source: Path, out_dir: Path, overwrite: bool) -> None:
    """Refuses an output folder that is the source, lies inside it or holds it: writing there would replace what is
    being read. A non-empty one is replaced only with `overwrite`."""
    source_path, out_path = source.resolve(), out_dir.resolve()
    if out_path == source_path or out_path.is_relative_to(source_path) or source_path.is_relative_to(out_path):
        raise InputError(f"{out_dir}: the output folder must not be {source}, lie inside it or hold it (it is read)")
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise InputExistsError(f"{out_dir} exists and is not empty (pass --overwrite to replace it)")


def give_usual_modes(folder: Path) -> None:
    """Gives `folder` and everything in it the modes a plain write gives under the umask (0755 and 0644 under 022):
    transformers writes the weights through a temporary file, 0600, so that a copy or an upload of the folder would
    keep them private to one user."""
    umask = os.umask(0o022)  # the only way to read it is to set it
    os.umask(umask)
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def export(
    source: str | Path,
    out_dir: str | Path,
    *,
    run_dir: str | Path | None = None,
    tokenizer: str | Path | None = None,
    repo_id: str | None = None,
    license: str = "apache-2.0",
    templates_dir: str | Path | None = None,
    overwrite: bool = False,
    metrics: bool = True,
    sentence: bool = False,
    sentence_like: str | Path | None = None,
) -> Path:
    """Writes the Hub-ready folder of the model in `source` (a model folder or a run directory) to `out_dir`.

    `run_dir` (default: `source` when it holds a run's metrics or config) feeds the model card, and must be the run
    that saved the model (`model_of_run`), except that a default one made before runs recorded their models'
    fingerprints gives a card without its metrics (with a warning); `metrics` False leaves any run's metrics out. The
    tokenizer is `tokenizer` (a folder, Hub name or alias) when given, else the first found (`find_tokenizer`)
    in the model folder, the source, the run, or the model the run started from (its config's `model`, e.g. an
    `elc-bert mlm` run); `repo_id` (USER/NAME) goes into the card's snippets. `sentence` (implied by
    `sentence_like`) makes the folder a sentence-transformers one as well, with the pooling (and Normalize) of the
    sentence encoder `sentence_like` (a sentence-transformers folder or Hub name), or mean pooling without it
    (`integrations.write_sentence_files`).
    """
    source, out_dir = Path(source), Path(out_dir)
    if not source.is_dir():
        raise InputNotFoundError(f"{source} is not a folder")
    model_dir = find_model_dir(source)
    given_run_dir = run_dir is not None
    if run_dir is None and any((source / name).is_file() for name in RUN_FILES):
        run_dir = source
    run_dir = Path(run_dir) if run_dir is not None else None
    check_out_dir(source, out_dir, overwrite)
    if "." in out_dir.name:
        logger.warning(
            "%s: the folder's name holds a dot, and transformers 4.x cannot load remote code from such a folder "
            "(ModuleNotFoundError: transformers_modules...): name it without one (e.g. %s) for users of transformers "
            "before 5",
            out_dir,
            out_dir.name.replace(".", "-"),
        )
    run_model = None
    left_out = None if metrics else "the export was asked for none (`--no-metrics`)"  # why the card has no metrics
    if run_dir is not None:
        check_out_dir(run_dir, out_dir, overwrite)
        read_run(run_dir)  # a run the card can read
        if given_run_dir or runs.recorded_models(run_dir) is not None:
            run_model = model_of_run(run_dir, model_dir)
        elif metrics:  # the run in SOURCE, made before runs recorded their models: its metrics cannot be tied to it
            left_out = (
                f"the run did not record this model (`{run_dir}` holds no {runs.MODEL_FINGERPRINTS}: a run made by an "
                "older elc_bert), so they cannot be tied to these weights"
            )
            logger.warning("%s: the card leaves out the run's metrics: %s", out_dir, left_out)
    card = dict(
        run_dir=run_dir,
        run_model=run_model,
        metrics_left_out=left_out,
        repo_id=repo_id,
        license=license,
        templates_dir=templates_dir,
        source=model_dir,
        name=out_dir.name,  # not the scratch folder's
    )
    sentence = dict(like=sentence_like) if sentence or sentence_like is not None else None
    with runs.replacing_folder(out_dir) as scratch:
        _write_export(source, model_dir, scratch, run_dir, tokenizer, card, sentence)
        give_usual_modes(scratch)
    return out_dir


def _write_export(source, model_dir, out_dir, run_dir, tokenizer, card: dict, sentence: dict | None):
    from .model_card import write_model_card

    model_class = model_class_of(model_dir)
    candidates = [tokenizer] if tokenizer is not None else [model_dir, source, run_dir, _run_start_model(run_dir)]
    try:
        tokenizer_source = find_tokenizer(candidates)  # before the model loads: a missing one is named at once
    except FileNotFoundError as error:
        raise InputNotFoundError(f"{error}: pass --tokenizer") from None
    model, info = load_pretrained(model_class, model_dir)
    check_weights_loaded(model_dir, model, info, "Exporting it would publish random weights.")
    diverged = [
        name
        for name, tensor in model.state_dict().items()
        if tensor.is_floating_point() and not tensor.isfinite().all()
    ]
    if diverged:
        raise InputError(
            f"{model_dir}: weights hold NaN or inf ({key_list(diverged)}): the run diverged, and exporting would "
            "publish them"
        )
    model.eval()
    model.save_pretrained(out_dir)  # safetensors, and the model files as remote code (`register_for_auto_class`)
    tokenizer = load_tokenizer(tokenizer_source)
    save_tokenizer(tokenizer, out_dir)
    config_file = out_dir / "config.json"
    config = read_json(config_file, "a model config")
    config["auto_map"] = auto_map(*family_of(model_class))
    # transformers 4.x's pipeline() loads a tokenizer for a model whose config is remote code only when the config
    # names the tokenizer's class (without it, pipeline("fill-mask", REPO, trust_remote_code=True) has none)
    tokenizer_config = read_json(out_dir / TOKENIZER_CONFIG, "a tokenizer config")
    config["tokenizer_class"] = tokenizer_config["tokenizer_class"]
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    if sentence is not None:
        card["sentence_modules"] = write_sentence_files(model, tokenizer, out_dir, **sentence)
    write_model_card(out_dir, model, **card)


__all__ = ["export", "find_model_dir", "auto_map", "check_out_dir", "give_usual_modes"]
