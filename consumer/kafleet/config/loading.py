"""Loading a ``ConsumerConfig`` at the edge, and every way it can fail, as a ``ConfigError``.

Owns: ``load_config`` (a YAML file, then ``KAFLEET_*`` variables, then overrides), the messages
of a file that cannot be read or parsed (by line and column), of a ``KAFLEET_*`` variable that
does not parse (naming the variable), and ``config_error``, which turns pydantic's errors into
dotted field names and reasons without showing a secret; the operator uses it for a
ConsumerGroup's spec too, so both judge a value in the same words.

Does not own the settings or their rules (``config/model.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_settings import SettingsError

from kafleet.config.model import YAML_FILE, ConsumerConfig
from kafleet.errors import ConfigError, FieldProblem


def load_config(
    path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
) -> ConsumerConfig:
    """Load and validate: ``overrides`` (flags) over ``KAFLEET_*`` variables over the YAML file.

    Raises ``ConfigError`` naming each bad field (and the file, if any) with the reason.
    """
    source = f"configuration ({path})" if path else "configuration"
    if path is not None:
        file = Path(path)
        try:
            loaded = yaml.safe_load(file.read_text())
        except OSError as exc:
            reason = f"cannot read it: {exc.strerror or exc}"
            raise ConfigError([FieldProblem("(file)", reason)], source) from exc
        except yaml.YAMLError as exc:
            reason = f"not valid YAML: {_yaml_problem(exc)}"
            raise ConfigError([FieldProblem("(file)", reason)], source) from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError([FieldProblem("(file)", "must be a mapping of field: value")], source)
    token = YAML_FILE.set(Path(path) if path is not None else None)
    try:
        return ConsumerConfig(**dict(overrides or {}))
    except ValidationError as exc:
        raise config_error(exc, source) from None
    except SettingsError as exc:  # a KAFLEET_* variable that does not parse (JSON for a section)
        raise _settings_error(exc, source) from None
    finally:
        YAML_FILE.reset(token)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, by line and column (PyYAML's own text names "<unicode string>")."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return str(exc)
    mark = exc.problem_mark
    text = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if exc.context and exc.context_mark is not None:
        text += f" ({exc.context} at line {exc.context_mark.line + 1})"
    return text


def _settings_error(exc: SettingsError, source: str) -> ConfigError:
    found = re.search(r'field "([^"]+)" from source "(\w+)"', str(exc))
    if found is None:
        return ConfigError([FieldProblem("(all)", str(exc))], source)
    field, origin = found.groups()
    where = f"KAFLEET_{field.upper()}" if origin.startswith("Env") else origin
    cause = f": {exc.__cause__}" if exc.__cause__ else ""
    return ConfigError([FieldProblem(field, f"cannot parse {where}{cause}")], source)


def config_error(exc: ValidationError, source: str = "configuration") -> ConfigError:
    """A pydantic ``ValidationError`` as a ``ConfigError`` with dotted field names, no secrets."""
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        reason = error["msg"].removeprefix("Value error, ")
        if not field:  # a whole-model rule: its message holds "field: reason; field: reason"
            for pair in reason.split("; "):
                name, _, why = pair.partition(": ")
                problems.append(FieldProblem(name, why) if why else FieldProblem("(all)", pair))
            continue
        secret = any(word in field for word in ("password", "secret", "token"))
        if "input" in error and not secret and error["type"] not in ("missing",):
            shown = repr(error["input"])
            if len(shown) <= 80 and not isinstance(error["input"], dict):
                reason += f" (got {shown})"
        problems.append(FieldProblem(field, reason))
    return ConfigError(problems, source)
