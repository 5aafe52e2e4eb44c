"""Job configs: YAML files with `key=value` overrides from the command line, into dataclasses.

Every field of a job config is declared with `config_field`: its help text, its bounds and, for a mapping, the class
whose keyword arguments it holds live there, once. `check_fields` (called by each config's `__post_init__`) converts
every value to its field's declared type and checks it, so that a bad value is refused with the key's name before any
work starts; `describe_config` builds a job's `--help` from the same fields.
"""

import copy
import dataclasses
import difflib
import enum
import inspect
import math
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from .. import runs
from ..models.errors import InputError, InputNotFoundError

# Keyword arguments that a transformers `PreTrainedConfig` takes beyond its dataclass fields.
CONFIG_KEYWORDS = {"num_labels": int, "attn_implementation": str | None, "output_attentions": bool}


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


def read_yaml(text_or_stream):
    """The value of a YAML text or file (`ConfigLoader`'s booleans); a malformed one is an InputError that names the
    file (or the text) and the line."""
    try:
        return yaml.load(text_or_stream, Loader=ConfigLoader)
    except yaml.YAMLError as error:
        raise InputError(f"not valid YAML: {error}") from None


def config_field(default=dataclasses.MISSING, help: str = "", *, bounds: str | None = None, keys=None):
    """A job config field. `help` says what it means (shown by `elc-bert JOB --help`); `bounds` is the range of a
    number (">= 1", "> 0", or an interval such as "[0, 1)"; for a list, of each item); `keys` is the class or
    callable (or a tuple of them) whose keyword arguments a mapping holds, e.g. `TrainingArguments`: its keys must be
    theirs, its values get their types. A list or dict default is copied for each instance."""
    metadata = {"help": help, "bounds": bounds, "keys": keys}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def check_fields(config) -> None:
    """Converts each field of the dataclass instance `config` to its declared type and checks its bounds and, for a
    mapping, its keys; raises ValueError naming the (dotted) key, what it must be and the value. A `training.*` key
    for a TrainingArguments field that the job sets itself (the class's `training_owned`: {field: the job key that
    sets it}) is refused naming the job's key: it would be ignored, or fight the job's own setting."""
    types_ = _field_types(type(config))
    for field in dataclasses.fields(config):
        key, value = field.name, getattr(config, field.name)
        value = convert(value, types_[key], key, field.metadata.get("keys"))
        bounds = field.metadata.get("bounds")
        if bounds is not None:
            for item in value if isinstance(value, list) else [value]:
                if item is not None and not _within(item, bounds):
                    where = bounds if bounds[0] in "<>" else f"in {bounds}"
                    raise InputError(f"{key} must be {where}, got {value!r}")
        setattr(config, key, value)
    owned = getattr(type(config), "training_owned", {})
    taken = [name for name in getattr(config, "training", {}) if name in owned]
    if taken:  # one source per setting: the job's own key
        raise InputError("; ".join(f"training.{name} is set by the job: use {owned[name]}" for name in taken))


def convert(value, annotation, key: str, keys=None):
    """`value` (as YAML reads it) as the type `annotation`: "2e-4" or 1 for a float, 3.0 or "3" for an int, "true"
    for a bool, a single value for a list of one; null only where the type allows None. A mapping whose `keys` are
    given (see `config_field`) is checked and converted key by key. Types it does not know are left to their user."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is object:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in arguments:
            return None
        members = [member for member in arguments if member is not type(None)]
        exact = [member for member in members if _is_instance(value, member)]
        inner = None  # the error of a member that the value is a kind of: it names the inner key
        for member in exact + [member for member in members if member not in exact]:
            try:
                return convert(value, member, key, keys)
            except ValueError as error:
                inner = inner or (error if member in exact else None)
        raise inner or _error(key, annotation, value)
    if value is None:
        raise InputError(f"{key} has no value: it must be {_phrase(annotation)}")
    if origin is Literal:
        if not any(value == choice and type(value) is type(choice) for choice in arguments):
            raise _error(key, annotation, value)
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower() if isinstance(value, (int, str)) else None
        if text in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return text in ("1", "true", "yes", "on")
        raise _error(key, annotation, value)
    if annotation is int:
        number = _number(value)
        if number is None or not float(number).is_integer():
            raise _error(key, annotation, value)
        return int(number)
    if annotation is float:
        number = _number(value)
        if number is None:
            raise _error(key, annotation, value)
        if not math.isfinite(number):
            raise InputError(f"{key} must be a finite number, got {value!r}")
        return float(number)
    if annotation is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # YAML's reading of `name: 2024`
            return str(value)
        raise _error(key, annotation, value)
    if origin in (list, tuple) or annotation in (list, tuple):
        items = value if isinstance(value, (list, tuple)) else [value]
        item_type = arguments[0] if arguments else Any
        return [convert(item, item_type, f"{key}[{i}]", keys) for i, item in enumerate(items)]
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise _error(key, annotation, value)
        if keys is not None:
            return _convert_mapping(value, keys, key)
        key_type, value_type = arguments if arguments else (Any, Any)
        return {convert(k, key_type, key): convert(v, value_type, f"{key}.{k}") for k, v in value.items()}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum) and not isinstance(value, annotation):
        try:
            annotation(value)  # checked, but kept as written: the config is saved as YAML
        except ValueError:
            raise _error(key, annotation, value) from None
    return value


def _convert_mapping(values: dict, targets, key: str = "") -> dict:
    """`values` as keyword arguments of `targets` (a class or callable, or a tuple of them), each value of the type
    declared for it."""
    accepted = check_keys(values, targets, key)
    prefix = f"{key}." if key else ""
    return {name: convert(value, accepted[name], f"{prefix}{name}") for name, value in values.items()}


def check_keys(values: dict, targets, key: str = "") -> dict:
    """Refuses keys of `values` that are no keyword argument of `targets` (naming the nearest known one) and names
    the required ones it lacks; returns the accepted keys with their declared types."""
    accepted, required = {}, set()
    for target in _as_tuple(targets):
        target_types, target_required = _keyword_types(target)
        accepted.update(target_types)
        required |= target_required
    prefix = f"{key}." if key else ""
    unknown = [name for name in values if name not in accepted]
    if unknown:
        names = " / ".join(_name(target) for target in _as_tuple(targets))
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(str(name), list(accepted), n=1)
            hints.append(f"{prefix}{name}: did you mean {prefix}{close[0]}?" if close else f"{prefix}{name}: no match")
        raise InputError(f"unknown keys {[f'{prefix}{name}' for name in unknown]} for {names} ({'; '.join(hints)})")
    missing = sorted(required - set(values))
    if missing:
        raise InputError(f"missing required keys {[f'{prefix}{name}' for name in missing]}")
    return accepted


def _name(target) -> str:
    """A class's or function's name; a classmethod's with the class it was reached through."""
    owner = getattr(target, "__self__", None)
    return f"{owner.__name__}.{target.__name__}" if isinstance(owner, type) else target.__qualname__


def _as_tuple(targets) -> tuple:
    return targets if isinstance(targets, tuple) else (targets,)


def _keyword_types(target) -> tuple[dict, set]:
    """The keyword arguments of a dataclass (its init fields) or a callable (its keyword-only parameters: the
    positional ones are the caller's) with their declared types, and the required ones."""
    if dataclasses.is_dataclass(target):
        declared = _field_types(target)
        fields = [field for field in dataclasses.fields(target) if field.init]
        accepted = {field.name: declared[field.name] for field in fields}
        required = {
            field.name
            for field in fields
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        }
        from transformers import PreTrainedConfig

        if issubclass(target, PreTrainedConfig):
            accepted = {**CONFIG_KEYWORDS, **accepted}
        return accepted, required
    try:
        hints = typing.get_type_hints(target)
    except NameError:  # an annotation naming what the module imports for type checkers only
        hints = {}
    parameters = inspect.signature(target).parameters.values()
    return {p.name: hints.get(p.name, Any) for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}, set()


def _field_types(cls) -> dict:
    """The declared type of each field of the dataclass `cls`, its string annotations resolved in the module that
    declared them (an annotation that does not resolve there, such as `torch.dtype` imported for type checkers
    only, counts as Any)."""
    resolved = {}
    for klass in reversed(cls.__mro__):
        namespace = vars(sys.modules[klass.__module__]) if klass.__module__ in sys.modules else {}
        for name, annotation in inspect.get_annotations(klass).items():
            if isinstance(annotation, str):
                try:
                    annotation = eval(annotation, namespace)  # what typing.get_type_hints does, one name at a time
                except Exception:
                    annotation = Any
            resolved[name] = annotation
    return resolved


def _is_instance(value, annotation) -> bool:
    """Whether `value` already is of the kind `annotation` names (a bool is not an int here)."""
    if annotation is Any:
        return True
    cls = typing.get_origin(annotation) or annotation
    if cls is Literal:
        return value in typing.get_args(annotation)
    if not isinstance(cls, type):
        return False
    if isinstance(value, bool) and cls is not bool:
        return False
    return isinstance(value, cls)


def _number(value):
    """An int or float from a number or its text ("2e-4", "3"), else None (bools are not numbers here)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        for kind in (int, float):
            try:
                return kind(value)
            except ValueError:
                pass
    return None


def _within(value, bounds: str) -> bool:
    if bounds.startswith(">="):
        return value >= float(bounds[2:])
    if bounds.startswith(">"):
        return value > float(bounds[1:])
    low, high = (float(end) for end in bounds[1:-1].split(","))
    above = low <= value if bounds[0] == "[" else low < value
    below = value <= high if bounds[-1] == "]" else value < high
    return above and below


def _phrase(annotation) -> str:
    """What a value of `annotation` is, in words, for error messages."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(_phrase(member) for member in arguments)
    if origin is Literal:
        return f"one of {list(arguments)}"
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
    if annotation in words:
        return words[annotation]
    if origin in (list, tuple) or annotation in (list, tuple):
        return f"a list of {_type_name(arguments[0])}" if arguments else "a list"
    if origin is dict or annotation is dict:
        return "a mapping (key: value)"
    return _type_name(annotation)


def _type_name(annotation) -> str:
    """`annotation` as written in the help: int, float | null, {lamb, adamw}, list[str | dict]."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(member) for member in arguments)
    if origin is Literal:
        return "{" + ", ".join(str(argument) for argument in arguments) + "}"
    if annotation is type(None):
        return "null"
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(argument) for argument in arguments)}]"
    return getattr(annotation, "__name__", str(annotation))


def _error(key: str, annotation, value) -> ValueError:
    return ValueError(f"{key} must be {_phrase(annotation)}, got {value!r}")


def describe_config(config_class) -> str:
    """The keys of a job config, with their types, bounds, defaults and meaning: the epilog of `elc-bert JOB -h`."""
    declared = _field_types(config_class)
    lines = ["config keys (in the YAML file, or key=value after it; dotted keys reach into mappings):"]
    for field in dataclasses.fields(config_class):
        kind = _type_name(declared[field.name])
        bounds = field.metadata.get("bounds")
        if bounds:
            kind += f" {bounds}" if bounds[0] in "<>" else f" in {bounds}"
        if field.default is not dataclasses.MISSING:
            kind += f", default {_yaml_text(field.default)}"
        elif field.default_factory is not dataclasses.MISSING:
            kind += f", default {_yaml_text(field.default_factory())}"
        else:
            kind += ", required"
        text = field.metadata.get("help", "")
        if field.metadata.get("keys") is not None:
            text += f" (keys: the arguments of {' / '.join(_name(t) for t in _as_tuple(field.metadata['keys']))})"
        lines.append(f"  {field.name}: {kind}")
        lines.extend(textwrap.wrap(text, width=110, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return "\n".join(lines)


def _yaml_text(value) -> str:
    """A value as it is written in a YAML file (flow style: null, 0.01, [8, 32])."""
    return yaml.safe_dump(value, default_flow_style=True, width=1000).removesuffix("\n...\n").strip()


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
        target[last] = read_yaml(raw)
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
        changed = sorted(key for key in keys if saved.get(key) != current.get(key))
        if changed:
            details = "; ".join(f"{key}: {saved.get(key)!r} -> {current.get(key)!r}" for key in changed)
            raise InputError(
                f"{path}: the work in {path.parent} was done with a different config ({details}). "
                "Resume with the same config, or choose a new output_dir."
            )
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(dataclasses.asdict(config), handle, sort_keys=False)
