"""Errors raised while reading or resolving specs.

    SpecError (ValueError)
    ├── UnknownModelError      a model name not in the catalog
    ├── UnknownChipError       a chip name not in the catalog
    ├── UnsupportedConfigError a Hugging Face config of a family we cannot read
    └── SpecFileError          a YAML/JSON spec file that does not validate

The CLI prints any SpecError as one line and exits non-zero; anything else is a bug.
"""

from __future__ import annotations


class SpecError(ValueError):
    """Base of every user-facing spec error."""


class UnknownModelError(SpecError):
    pass


class UnknownChipError(SpecError):
    pass


class UnsupportedConfigError(SpecError):
    pass


class SpecFileError(SpecError):
    pass
