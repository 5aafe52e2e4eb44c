"""Job configs: YAML files with `key=value` overrides from the command line, into dataclasses.

Every field of a job config is declared with `config_field`: its help text, its bounds and, for a mapping, the class
whose keyword arguments it holds live there, once. `check_fields` (called by each config's `__post_init__`) converts
every value to its field's declared type and checks it, so that a bad value is refused with the key's name before any
work starts (the conversion is `conversion.py`'s); `help.describe_config` builds a job's `--help` from the same
fields.
"""

import copy
import dataclasses
import re
from pathlib import Path

import yaml
from transformers import TrainingArguments
from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

from .. import runs
from ..models.errors import InputError, InputNotFoundError
from .conversion import bounds_text, check_keys, convert, field_default, field_types, within

# What every job's `report_to` may name: the Trainer's experiment trackers (each needs its own package).
TRACKERS = tuple(INTEGRATION_TO_CALLBACK)


class ConfigLoader(yaml.SafeLoader):
    """YAML as config files mean it: only true/false are booleans (YAML 1.2), so that `language: no` (Norwegian) or
    `language=no` stays the string it says; a bool field still takes yes/no (`convert`)."""


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def read_yaml(text_or_stream, source: str | None = None, key: str = ""):
    """The value of a YAML text or file (`ConfigLoader`'s booleans); a malformed one is an InputError that names the
    file (or the text) and the line. A key given twice in one mapping, which YAML would settle silently for the last,
    is an InputError naming `source` (by default the file), the dotted key (under `key`) and both lines."""
    loader = ConfigLoader(text_or_stream)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, source or node.start_mark.name, key, set())
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise InputError(f"not valid YAML: {error}") from None
    finally:
        loader.dispose()


def _refuse_duplicate_keys(node, source: str, key: str, seen: set) -> None:
    """Walks a composed YAML node (before YAML's own reading drops the first of two equal keys); `key` is where it
    sits (dotted, `[i]` for a list item)."""
    if id(node) in seen:  # an alias of a node already walked (or of itself)
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _refuse_duplicate_keys(item, source, f"{key}[{index}]", seen)
    elif isinstance(node, yaml.MappingNode):
        lines = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            name = f"{key}.{key_node.value}" if key else key_node.value
            line, identity = key_node.start_mark.line + 1, (key_node.tag, key_node.value)
            if identity in lines:
                raise InputError(f"{source}: {name} is given twice (lines {lines[identity]} and {line}): keep one")
            lines[identity] = line
            _refuse_duplicate_keys(value_node, source, name, seen)


# The ranges of the TrainingArguments numbers a `training:` mapping may set, which TrainingArguments itself takes
# as they come (`max_grad_norm: -1` turns clipping off, `weight_decay: -3` pushes weights up: both train).
TRAINING_BOUNDS = {
    "learning_rate": "> 0",
    "num_train_epochs": "> 0",
    "weight_decay": ">= 0",
    "max_grad_norm": ">= 0",  # 0 turns clipping off
    "warmup_steps": ">= 0",  # steps, or below 1 a fraction of them
    "label_smoothing_factor": "[0, 1)",
    "adam_beta1": "[0, 1)",
    "adam_beta2": "[0, 1)",
    "adam_epsilon": "> 0",
    "gradient_accumulation_steps": ">= 1",
    "per_device_train_batch_size": ">= 1",
    "per_device_eval_batch_size": ">= 1",
    "eval_accumulation_steps": ">= 1",
    "logging_steps": "> 0",
    "save_steps": "> 0",
    "eval_steps": "> 0",
    "dataloader_num_workers": ">= 0",
}


def config_field(default=dataclasses.MISSING, help: str = "", *, bounds: str | None = None, keys=None, key_bounds=None):
    """A job config field. `help` says what it means (shown by `elc-bert JOB --help`); `bounds` is the range of a
    number (">= 1", "> 0", or an interval such as "[0, 1)"; for a list, of each item); `keys` is the class or
    callable (or a tuple of them) whose keyword arguments a mapping holds, e.g. `TrainingArguments`: its keys must be
    theirs, its values get their types; `key_bounds` maps some of those keys to their ranges. A list or dict default
    is copied for each instance."""
    metadata = {"help": help, "bounds": bounds, "keys": keys, "key_bounds": key_bounds or {}}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def report_to_field():
    """Every job's `report_to`: the experiment trackers of the Trainer it reports to."""
    help = (
        "experiment trackers the Trainer reports to (tensorboard, wandb, trackio, mlflow, ...; each needs its package)"
    )
    return config_field([], f"{help}: [] reports nowhere")


def training_field():
    """Every job's `training`: further TrainingArguments (a field the job sets itself is refused, `check_fields`)."""
    return config_field({}, "further TrainingArguments", keys=TrainingArguments, key_bounds=TRAINING_BOUNDS)


def allow_unloaded_weights_field():
    """The fine-tuning jobs' `allow_unloaded_weights`."""
    return config_field(False, "fine-tune a model whose checkpoint does not fill it (its missing weights start random)")


def check_fields(config) -> None:
    """Converts each field of the dataclass instance `config` to its declared type and checks its bounds and, for a
    mapping, its keys and their bounds (`key_bounds`); raises ValueError naming the (dotted) key, what it must be and
    the value. A `training.*` key for a TrainingArguments field that the job sets itself (the class's
    `training_owned`: {field: the job key that sets it}) is refused naming the job's key: it would be ignored, or
    fight the job's own setting."""
    types_ = field_types(type(config))
    for field in dataclasses.fields(config):
        key, value = field.name, getattr(config, field.name)
        value = convert(value, types_[key], key, field.metadata.get("keys"))
        _check_bounds(key, value, field.metadata.get("bounds"))
        setattr(config, key, value)
    owned = getattr(type(config), "training_owned", {})
    taken = [name for name in getattr(config, "training", {}) if name in owned]
    if taken:  # one source per setting: the job's own key
        raise InputError("; ".join(f"training.{name} is set by the job: use {owned[name]}" for name in taken))
    for field in dataclasses.fields(config):
        mapping = getattr(config, field.name)
        for name, bounds in field.metadata.get("key_bounds", {}).items():
            if name in mapping:
                _check_bounds(f"{field.name}.{name}", mapping[name], bounds)


def _check_bounds(key: str, value, bounds: str | None) -> None:
    """Refuses a number (or a list item) outside `bounds` (see `config_field`), naming the key."""
    if bounds is None:
        return
    for item in value if isinstance(value, list) else [value]:
        if item is not None and not within(item, bounds):
            raise InputError(f"{key} must be {bounds_text(bounds)}, got {value!r}")


def named_config(name: str, job: str) -> Path:
    """The YAML file a config argument names: a path as given, or else one of the package's named configs of `job`
    (`configs/<job>/<name>.yaml`, shipped inside the package: `elc-bert finetune-ner conll03_fewshot_dwatt`)."""
    path = Path(name)
    if path.exists() or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path
    shipped = Path(__file__).resolve().parents[1] / "configs" / job
    candidate = shipped / f"{name}.yaml"
    if not candidate.is_file():
        known = sorted(p.stem for p in shipped.glob("*.yaml"))
        raise InputNotFoundError(f"{name}: no such config file, nor a named {job} config (named ones: {known})")
    return candidate


def load_config(config_class, path: str | Path | None, overrides: list[str] = ()):
    """Reads a YAML file into `config_class` (a dataclass whose `__post_init__` calls `check_fields`), after applying
    `key=value` overrides (dotted keys reach into mappings, e.g. `training.logging_steps=10`). Unknown or missing keys,
    values of the wrong type and numbers out of bounds raise ValueError naming the key and the file."""
    where = str(path) if path is not None else "overrides"
    if overrides:
        where += f" with {' '.join(overrides)}" if path is None else " + overrides"
    values = {}
    if path is not None:
        with open(path, encoding="utf-8") as handle:
            values = read_yaml(handle)
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise InputError(f"{path}: a config file holds key: value lines, got {type(values).__name__}")
    for override in overrides:
        key, equals, raw = override.partition("=")
        if not equals or not key:
            raise InputError(f"{where}: override {override!r} is not key=value")
        *parents, last = key.split(".")
        target = values
        for depth, parent in enumerate(parents):
            if target.get(parent) is None:
                target[parent] = {}
            target = target[parent]
            if not isinstance(target, dict):
                raise InputError(f"{where}: override {override!r}: {'.'.join(parents[: depth + 1])} is not a mapping")
        target[last] = read_yaml(raw, f"{where}: override {override!r}", key)
    try:
        check_keys(values, config_class)
        return config_class(**values)
    except ValueError as error:
        raise InputError(f"{where}: {error}") from None


def _flatten(values: dict, prefix: str = "") -> dict:
    """A nested mapping as dotted keys (`training.save_steps`); an empty mapping adds no key."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _defaults(config, keys: set) -> dict:
    """The defaults of the dotted `keys` of `config`'s class (a nested key: its field's default mapping's entry)."""
    given = {field.name: field_default(field) for field in dataclasses.fields(config)}
    given = {name: value for name, value in given.items() if value is not dataclasses.MISSING}
    defaults = _flatten(yaml.safe_load(yaml.safe_dump(given)))  # the same types as the file's
    return {key: defaults[key] for key in keys if key in defaults}


def save_config(config, path: str | Path) -> None:
    """Writes the resolved config beside a run's outputs. When the folder already holds work the run would resume or
    reuse (`runs.has_work`: checkpoints, finished trials or tasks), the config must be the one it was started with: a
    different one raises ValueError naming the fields that differ, instead of mixing two configs in one run. The
    fields a config class names in its `may_change` (e.g. more trials; dotted names reach into mappings) may differ."""
    path = Path(path)
    if path.exists() and runs.has_work(path.parent):
        with open(path, encoding="utf-8") as handle:
            saved = yaml.safe_load(handle) or {}
        current = _flatten(yaml.safe_load(yaml.safe_dump(dataclasses.asdict(config))))  # the same types as the file's
        saved = _flatten(saved)
        keys = ({*saved, *current}) - {"output_dir", *getattr(config, "may_change", ())}
        # a key the saved config lacks was added to the job since: the run was made with its default
        saved = {**_defaults(config, keys - set(saved)), **saved}
        changed = sorted(key for key in keys if saved.get(key) != current.get(key))
        if changed:
            details = "; ".join(f"{key}: {saved.get(key)!r} -> {current.get(key)!r}" for key in changed)
            raise InputError(
                f"{path}: the work in {path.parent} was done with a different config ({details}). "
                "Resume with the same config, or choose a new output_dir."
            )
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(dataclasses.asdict(config), handle, sort_keys=False)
