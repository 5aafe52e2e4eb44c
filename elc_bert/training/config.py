"""Job configs: YAML files with `key=value` overrides from the command line, into dataclasses."""

import dataclasses
from pathlib import Path

import yaml


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
        raise FileNotFoundError(f"{name}: no such config file, nor a named {job} config (named ones: {known})")
    return candidate


def load_config(config_class, path: str | Path | None, overrides: list[str] = ()):
    """Reads a YAML file into `config_class` (a dataclass), after applying `key=value` overrides (dotted keys reach
    into dict fields, e.g. `training.max_steps=10`). Unknown keys raise ValueError naming the key and the file."""
    values = {}
    if path is not None:
        with open(path, encoding="utf-8") as handle:
            values = yaml.safe_load(handle) or {}
    for override in overrides:
        if "=" not in override:
            raise ValueError(f"override {override!r} is not key=value")
        key, raw = override.split("=", 1)
        *parents, last = key.split(".")
        target = values
        for parent in parents:
            target = target.setdefault(parent, {})
        target[last] = yaml.safe_load(raw)
    known = {field.name for field in dataclasses.fields(config_class)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{path or 'overrides'}: unknown keys {unknown} for {config_class.__name__}")
    return config_class(**values)


def save_config(config, path: str | Path) -> None:
    """Writes the resolved config beside a run's outputs. When the folder already holds a Trainer checkpoint (the run
    will resume), the config must be the one it was started with: a different one raises ValueError naming the
    fields that differ, instead of resuming a mismatched checkpoint."""
    path = Path(path)
    has_checkpoint = any(path.parent.glob("checkpoint-*"))
    if has_checkpoint and path.exists():
        with open(path, encoding="utf-8") as handle:
            saved = yaml.safe_load(handle) or {}
        current = yaml.safe_load(yaml.safe_dump(dataclasses.asdict(config)))  # the same types as the file's
        keys = ({*saved, *current}) - {"output_dir"}
        changed = sorted(key for key in keys if saved.get(key) != current.get(key))
        if changed:
            details = "; ".join(f"{key}: {saved.get(key)!r} -> {current.get(key)!r}" for key in changed)
            raise ValueError(
                f"{path}: the checkpoints in {path.parent} were made with a different config ({details}). "
                "Resume with the same config, or choose a new output_dir."
            )
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(dataclasses.asdict(config), handle, sort_keys=False)
