"""Importing the user's code named in the configuration as ``package.module:function``.

Owns: resolving a reference (the handler, a Spark job) to a callable, with the working
directory importable, and a ``ConfigError`` naming the field when it cannot. Does not call it.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from kafleet.errors import ConfigError, FieldProblem


def import_reference(reference: str, field: str) -> Callable[..., Any]:
    """``package.module:function`` -> the function; ``field`` names the setting in errors."""
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError([FieldProblem(field, f"expected module:function, got {reference!r}")])
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError([FieldProblem(field, f"cannot import {module_name}: {exc}")]) from exc
    except Exception as exc:  # the module itself fails: a SyntaxError, an error at import time
        reason = f"importing {module_name} failed: {type(exc).__name__}: {exc}"
        raise ConfigError([FieldProblem(field, reason)]) from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise ConfigError([FieldProblem(field, f"{module_name} has no function {attr!r}")])
    return function  # type: ignore[no-any-return]
