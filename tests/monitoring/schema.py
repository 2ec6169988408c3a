"""A dashboard's JSON against Grafana's dashboard schema as the ``grafana-foundation-sdk``
carries it: every object is read as the SDK's model for it (the dashboard, its panels and rows,
variables, gridPos, data source references, field configs; by panel type, the panel plugin's
options and custom field config; by data source type, the query), and each field must be one
the model names, of the type it declares (an enum by its values), with every field the model
requires.

Why this check: the SDK's models are generated (by Grafana's ``cog``) from the schemas Grafana
publishes for 11.6 (the dashboard kind, the core panels' and the Prometheus query's composable
kinds), name every field's JSON key and Python type, cover the panels' options and the queries
(which Grafana's dashboard kind leaves open), and are installed already (Apache-2.0; no npm).
Their own ``from_json`` would prove nothing: it drops an unknown key without a word and copies a
scalar of the wrong type as it is; here both fail, named. What the SDK knows that Grafana's own
types do not (the interval variable's ``auto`` fields on every variable) passes here, and is
judged against Grafana 11.6's and 12.4's published types by ``grafana_types``.

Owns: ``problems(board)``, pure: the JSON's disagreements with the schema, each a sentence
naming where. Does not check what a schema cannot say (ids, variables, layout: ``loading``) or
the PromQL (``queries``).
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from typing import Any

from grafana_foundation_sdk.cog import plugins, runtime
from grafana_foundation_sdk.models import dashboard

plugins.register_default_plugins()  # the panel and query models, by panel and data source type


def problems(board: Any) -> list[str]:
    """Where ``board`` (a dashboard's decoded JSON) leaves Grafana's dashboard schema."""
    return _check(board, dashboard.Dashboard, "dashboard")


class _Attribute:
    def __init__(self, name: str) -> None:
        self.name = name


@functools.cache
def _fields(model: type) -> dict[str, Any]:
    """The model's JSON keys, each with its declared type: its ``to_json`` run on a blank whose
    every attribute is a marker tells which key each attribute is written under."""
    hints = typing.get_type_hints(model)
    blank: Any = object.__new__(model)
    for name in hints:
        setattr(blank, name, _Attribute(name))
    return {key: hints[marker.name] for key, marker in blank.to_json().items()}


def _required(hint: Any) -> bool:
    return type(None) not in typing.get_args(hint)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check(value: Any, hint: Any, where: str) -> list[str]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return []
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return []
        found = [_check(value, option, where) for option in args if option is not type(None)]
        return [] if [] in found else min(found, key=len)
    if origin is typing.Literal:
        return [] if value in args else [f"{where}: {value!r} is none of {list(args)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: a list expected, not {_kind(value)} {value!r}"]
        return [p for i, item in enumerate(value) for p in _check(item, args[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: an object expected, not {_kind(value)} {value!r}"]
        return [p for key, item in value.items() for p in _check(item, args[1], f"{where}.{key}")]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        allowed = [member.value for member in hint]
        if isinstance(value, bool) or value not in allowed:
            return [f"{where}: {value!r} is none of {hint.__name__}'s {allowed}"]
        return []
    if hint in (bool, str):
        ok = isinstance(value, hint)
    elif hint in (int, float):  # JSON's numbers; a bool is no number here
        ok = isinstance(value, int if hint is int else (int, float)) and not isinstance(value, bool)
    else:
        ok = None
    if ok is not None:
        return [] if ok else [f"{where}: {hint.__name__} expected, not {_kind(value)} {value!r}"]
    if isinstance(hint, type) and hasattr(hint, "to_json"):
        return _object(value, hint, where)
    raise TypeError(f"{where}: no check for the SDK's type {hint!r}")


def _object(value: Any, model: type, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: an object ({model.__name__}) expected, not {_kind(value)} {value!r}"]
    fields = dict(_fields(model))
    found: list[str] = []
    name = f"{model.__module__.rsplit('.', 1)[-1]}.{model.__name__}"  # e.g. stat.Options
    join = "."
    if model is dashboard.Panel or model is dashboard.RowPanel:
        where, join = f"panel {value.get('id')} {value.get('title', '')!r}", " "
    elif model is dashboard.VariableModel:
        where, join = f"variable {value.get('name')!r}", " "
    if model is dashboard.Panel:
        found += _plugin(value, fields, where)
    for key, hint in fields.items():
        if key not in value and _required(hint):
            found.append(f"{where}: no {key!r}, which {name} requires")
    for key, item in value.items():
        if key not in fields:
            found.append(f"{where}: unknown field {key!r} (not in {name})")
        else:
            found += _check(item, fields[key], f"{where}{join}{key}")
    return found


def _plugin(panel: dict[str, Any], fields: dict[str, Any], where: str) -> list[str]:
    """Narrow ``fields`` (a copy of Panel's) to the panel's plugin and data source: its options,
    its queries; and check its custom field config, which Panel leaves open."""
    found = []
    config = runtime.panelcfg_config(str(panel.get("type", "")))
    if config is None:
        found.append(f"{where}: panel type {panel.get('type')!r} has no schema in the SDK")
    elif "options" in panel and config.options_from_json_hook is not None:
        fields["options"] = _model(config.options_from_json_hook)
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
    if config is not None and custom is not None:
        if config.field_config_from_json_hook is None:
            found.append(f"{where}: a custom field config, which a {panel['type']} panel has not")
        else:
            model = _model(config.field_config_from_json_hook)
            found += _check(custom, model, f"{where} fieldConfig.defaults.custom")
    source = (panel.get("datasource") or {}).get("type", "")
    query = runtime.Runtime().dataquery_variants.get(source)
    if "targets" in panel:
        if query is None:
            found.append(f"{where}: data source type {source!r} has no query schema in the SDK")
            fields["targets"] = list[object]
        else:
            fields["targets"] = list[_model(query.from_json_hook)]  # type: ignore[misc]
    return found


def _model(hook: Any) -> type:
    """The model a plugin's ``from_json`` hook (a bound classmethod) decodes into."""
    model = getattr(hook, "__self__", None)
    if not isinstance(model, type) or not hasattr(model, "to_json"):
        raise TypeError(f"the SDK's hook {hook!r} is not a model's from_json")
    return model
