"""The trainer's configuration: one typed tree, YAML presets, `key=value` overrides, one validator.

Every field carries its help text and, where it has one, its range rule, side by side
(`mappa train --help` prints the help). A run's config is `load_config(yaml_path, overrides)`:
defaults, then the YAML file, then the overrides, each key and value checked against the field's
type; then the frozen tree is built and `validate()` runs every field's rule and the cross-field
rules. Nothing is rewritten afterwards (the dataclasses are frozen).

The package: schema.py (the dataclasses, `doc` and the range rules), validation.py (`validate`),
loading.py (`load_config`, overrides, `help_lines`). Import every name from `mappa_train.config`.

Why not tyro or another CLI/config library: the overrides are `key=value` with YAML values and
errors that name the key and the fix, the help text is generated from the same fields, and the
whole loader is ~150 lines with no dependency; a library would add one without removing code.
"""
from mappa_train.config.loading import from_dict, help_lines, load_config, load_section, to_dict
from mappa_train.config.schema import (
    AlgoConfig,
    ConfigError,
    EnvConfig,
    GenerationConfig,
    HardwareConfig,
    LearnerConfig,
    LogConfig,
    LoraConfig,
    ModelConfig,
    Normalization,
    RayConfig,
    RolloutConfig,
    Rule,
    Scope,
    TrainConfig,
    doc,
    non_negative,
    one_of,
    positive,
    within,
)
from mappa_train.config.validation import validate

__all__ = [
    "AlgoConfig", "ConfigError", "EnvConfig", "GenerationConfig", "HardwareConfig", "LearnerConfig", "LogConfig",
    "LoraConfig", "ModelConfig", "Normalization", "RayConfig", "RolloutConfig", "Rule", "Scope", "TrainConfig",
    "doc", "from_dict", "help_lines", "load_config", "load_section", "non_negative", "one_of", "positive", "to_dict",
    "validate", "within",
]
