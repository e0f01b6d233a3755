"""Loads libattnkit_torch.so, which registers torch.ops.attnkit.* (C++ schemas and kernels)."""

import os

import torch

_LIBRARY_NAME = "libattnkit_torch.so"


def _library_path() -> str:
    override = os.environ.get("ATTNKIT_TORCH_LIBRARY")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY_NAME)


def _registered() -> bool:
    try:
        torch.ops.attnkit.attention_fwd.default
        return True
    except (AttributeError, RuntimeError):
        return False


def load() -> str:
    """Loads the op library once per process; returns its path."""
    path = _library_path()
    if not _registered():
        if not os.path.exists(path):
            raise ImportError(
                f"attnkit: {path} not found. Install the package with "
                "`pip install --no-build-isolation .` from the repository (it builds the library "
                "against the installed torch), or point ATTNKIT_TORCH_LIBRARY at a built one."
            )
        torch.ops.load_library(path)
    return path


LIBRARY_PATH = load()
