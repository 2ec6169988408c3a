"""The configuration page documents every field of ConsumerConfig as the code defines it: the
name the file uses, the type, default, bounds, the variable and the flag that set it."""

from __future__ import annotations

import argparse
import typing
from collections.abc import Iterator
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from docgen import configuration
from kafleet.cli import worker
from kafleet.config.model import ConsumerConfig
from tests.docs.pages import row, section


def leaves(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every leaf field's dotted name, walked here apart from the generator's own walk."""
    for name, info in model.model_fields.items():
        held = [a for a in typing.get_args(info.annotation) if a is not type(None)]
        inner = held[0] if len(held) == 1 else info.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            yield from leaves(inner, f"{prefix}{name}.")
        else:
            yield prefix + name


def page() -> str:
    return configuration.build()


def test_every_field_of_the_model_is_on_the_page_with_its_variable_and_flag() -> None:
    text = page()
    parser = argparse.ArgumentParser()
    worker.add_arguments(parser)
    flags = {a.dest.removeprefix("field:"): a.option_strings[0] for a in parser._actions}

    names = list(leaves(ConsumerConfig))

    assert len(names) > 60
    for name in names:
        line = row(text, f"`{name}`")
        assert f"`KAFLEET_{name.upper().replace('.', '__')}`" in line, name
        if name in flags:
            assert f"`{flags[name]}" in line, name


def test_every_field_says_what_it_is() -> None:
    found = configuration.fields(ConsumerConfig, {}, "KAFLEET_", "__")

    undescribed = [f.name for rows in found.values() for f in rows if not f.description]

    assert sum(map(len, found.values())) > 60
    assert undescribed == []


def test_a_secret_has_a_variable_and_no_flag() -> None:
    line = row(page(), "`security.sasl_password`")

    assert "`KAFLEET_SECURITY__SASL_PASSWORD`" in line
    assert "--security" not in line
    assert "none: the file or the variable" in line


def test_bounds_allowed_values_and_defaults_are_those_the_model_checks() -> None:
    text = page()

    assert "> 0; < 1" in row(text, "`queue.resume_at`")
    assert "`0.5`" in row(text, "`queue.resume_at`")
    assert "one of `classic`, `consumer`" in row(text, "`group_protocol`")
    assert "required" in row(text, "`bootstrap_servers`")
    assert "length ≥ 1; length ≤ 255" in row(text, "`group_id`")
    assert "matches `^[a-zA-Z0-9._-]{1,249}$`" in row(text, "`dead_letter_topic`")
    assert "`--kafka PROPERTY=VALUE`" in row(text, "`kafka`")


def test_each_nested_model_has_a_section_that_says_what_it_is() -> None:
    text = page()

    assert "How much each assigned partition may hold" in section(text, "## `queue`")
    assert "`spark` is optional" in section(text, "## `spark`")
    assert "| `spark.batch.linger_ms` |" in section(text, "## `spark.batch`")


class Small(BaseSettings):
    """A model of two fields."""

    model_config = SettingsConfigDict(env_prefix="APP_", env_nested_delimiter="__")

    mode: Literal["fast", "safe"] = Field("safe", description="how <it> runs | always")
    limit: int | None = Field(None, gt=0, le=10)


def test_a_model_s_own_prefix_and_the_parser_s_flags_are_used_and_text_stays_in_its_cell() -> None:
    text = configuration.page(Small, {"mode": "--mode"}, "APP_", "__")

    mode, limit = row(text, "`mode`"), row(text, "`limit`")
    assert "`APP_MODE`<br>`--mode`" in mode
    assert "how &lt;it&gt; runs \\| always" in mode
    assert "one of `fast`, `safe`" in mode
    assert "`int | null`" in limit
    assert "unset" in limit
    assert "> 0; ≤ 10" in limit
    assert "none: the file or the variable" in limit
