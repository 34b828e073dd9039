"""The engine's exception tree: one boundary, one root.

    EngineError
    ├── ModelLoadError          unknown preset, missing or unreadable checkpoint (ValueError)
    ├── BadRequestError         empty prompt, max_tokens <= 0, prompt past the context (ValueError)
    ├── CacheLayoutError        the model's cache tensors do not fit the pool's layout
    └── CacheImportError        exported records that do not cover what the receiver lacks

Running out of pool pages is not an error: requests wait (admission control).
"""

from __future__ import annotations


class EngineError(Exception):
    """Root of every error the engine raises on purpose."""


class ModelLoadError(EngineError, ValueError):
    pass


class BadRequestError(EngineError, ValueError):
    pass


class CacheLayoutError(EngineError):
    pass


class CacheImportError(EngineError):
    pass
