"""A job's `--help`: its config keys with their types, bounds, defaults and meaning, read from the fields."""

import dataclasses
import textwrap

import yaml

from .conversion import as_tuple, bounds_text, field_default, field_types, target_name, type_name


def describe_config(config_class) -> str:
    """The keys of a job config, with their types, bounds, defaults and meaning: the epilog of `elc-bert JOB -h`."""
    declared = field_types(config_class)
    lines = ["config keys (in the YAML file, or key=value after it; dotted keys reach into mappings):"]
    for field in dataclasses.fields(config_class):
        kind = type_name(declared[field.name])
        bounds = field.metadata.get("bounds")
        if bounds:
            kind += f" {bounds_text(bounds)}"
        default = field_default(field)
        kind += ", required" if default is dataclasses.MISSING else f", default {_yaml_text(default)}"
        text = field.metadata.get("help", "")
        if field.metadata.get("keys") is not None:
            targets = " / ".join(target_name(t) for t in as_tuple(field.metadata["keys"]))
            owned = getattr(config_class, "training_owned", {})
            ranges = [
                f"{name} {bounds_text(b)}" for name, b in field.metadata["key_bounds"].items() if name not in owned
            ]
            text += f" (keys: the arguments of {targets}{'; ' if ranges else ''}{', '.join(ranges)})"
        lines.append(f"  {field.name}: {kind}")
        lines.extend(textwrap.wrap(text, width=110, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return "\n".join(lines)


def _yaml_text(value) -> str:
    """A value as it is written in a YAML file (flow style: null, 0.01, [8, 32])."""
    return yaml.safe_dump(value, default_flow_style=True, width=1000).removesuffix("\n...\n").strip()
