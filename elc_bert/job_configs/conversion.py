"""The config type system: a YAML value converted to a field's declared type (`convert`), the keys of a mapping
checked against the class whose keyword arguments it holds (`check_keys`, with a did-you-mean), and how a type is
named in messages and help (`phrase`, `type_name`).
"""

import dataclasses
import difflib
import enum
import inspect
import math
import sys
import types
import typing
from typing import Any, Literal, Union

from ..models.errors import InputError

# Keyword arguments that a transformers `PreTrainedConfig` takes beyond its dataclass fields.
CONFIG_KEYWORDS = {"num_labels": int, "attn_implementation": str | None, "output_attentions": bool}


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
        raise InputError(f"{key} has no value: it must be {phrase(annotation)}")
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
    for target in as_tuple(targets):
        target_types, target_required = _keyword_types(target)
        accepted.update(target_types)
        required |= target_required
    prefix = f"{key}." if key else ""
    unknown = [name for name in values if name not in accepted]
    if unknown:
        names = " / ".join(target_name(target) for target in as_tuple(targets))
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(str(name), list(accepted), n=1)
            hints.append(f"{prefix}{name}: did you mean {prefix}{close[0]}?" if close else f"{prefix}{name}: no match")
        raise InputError(f"unknown keys {[f'{prefix}{name}' for name in unknown]} for {names} ({'; '.join(hints)})")
    missing = sorted(required - set(values))
    if missing:
        raise InputError(f"missing required keys {[f'{prefix}{name}' for name in missing]}")
    return accepted


def target_name(target) -> str:
    """A class's or function's name; a classmethod's with the class it was reached through."""
    owner = getattr(target, "__self__", None)
    return f"{owner.__name__}.{target.__name__}" if isinstance(owner, type) else target.__qualname__


def as_tuple(targets) -> tuple:
    return targets if isinstance(targets, tuple) else (targets,)


def _keyword_types(target) -> tuple[dict, set]:
    """The keyword arguments of a dataclass (its init fields) or a callable (its keyword-only parameters: the
    positional ones are the caller's) with their declared types, and the required ones."""
    if dataclasses.is_dataclass(target):
        declared = field_types(target)
        fields = [field for field in dataclasses.fields(target) if field.init]
        accepted = {field.name: declared[field.name] for field in fields}
        required = {field.name for field in fields if field_default(field) is dataclasses.MISSING}
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


def field_default(field: dataclasses.Field):
    """A dataclass field's default (a new one from its factory), or `dataclasses.MISSING` where it has none."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def field_types(cls) -> dict:
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


def within(value, bounds: str) -> bool:
    if bounds.startswith(">="):
        return value >= float(bounds[2:])
    if bounds.startswith(">"):
        return value > float(bounds[1:])
    low, high = (float(end) for end in bounds[1:-1].split(","))
    above = low <= value if bounds[0] == "[" else low < value
    below = value <= high if bounds[-1] == "]" else value < high
    return above and below


def bounds_text(bounds: str) -> str:
    """A range as messages and help write it: `>= 0`, `in [0, 1)`."""
    return bounds if bounds[0] in "<>" else f"in {bounds}"


def phrase(annotation) -> str:
    """What a value of `annotation` is, in words, for error messages."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(phrase(member) for member in arguments)
    if origin is Literal:
        return f"one of {list(arguments)}"
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
    if annotation in words:
        return words[annotation]
    if origin in (list, tuple) or annotation in (list, tuple):
        return f"a list of {type_name(arguments[0])}" if arguments else "a list"
    if origin is dict or annotation is dict:
        return "a mapping (key: value)"
    return type_name(annotation)


def type_name(annotation) -> str:
    """`annotation` as written in the help: int, float | null, {lamb, adamw}, list[str | dict]."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(member) for member in arguments)
    if origin is Literal:
        return "{" + ", ".join(str(argument) for argument in arguments) + "}"
    if annotation is type(None):
        return "null"
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(argument) for argument in arguments)}]"
    return getattr(annotation, "__name__", str(annotation))


def _error(key: str, annotation, value) -> InputError:
    return InputError(f"{key} must be {phrase(annotation)}, got {value!r}")
