"""docs/configuration.md is generated from the settings (genesis/config_docs.py): it must match
the generator's output, name every setting, and follow the model when settings are grouped."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from genesis import config_docs
from genesis.config import GROUPS, Settings


def documented_variables(model: type[BaseModel]) -> list[str]:
    return [row.variable for section in config_docs.sections(model) for row in section.rows]


def test_configuration_page_is_up_to_date():
    current = config_docs.DOC_PATH.read_text(encoding="utf-8")
    for variable in documented_variables(Settings):
        assert f"`{variable}`" in current, (
            f"{variable} is missing from docs/configuration.md: run python -m genesis.config_docs"
        )
    assert current == config_docs.render(), "docs/configuration.md is out of date: run python -m genesis.config_docs"


def test_every_setting_is_documented_once():
    variables = documented_variables(Settings)
    fields = [name for name in Settings.model_fields if name not in GROUPS]
    fields += [f"{group}_{name}" for group in GROUPS for name in Settings.model_fields[group].annotation.model_fields]
    assert sorted(variables) == sorted(f"GENESIS_{name.upper()}" for name in fields)
    assert all(v.startswith("GENESIS_") and v == v.upper() for v in variables)


def test_the_command_writes_the_page_and_checks_it(tmp_path, monkeypatch, capsys):
    page = tmp_path / "configuration.md"
    page.write_text("# Configuration\n", encoding="utf-8")
    monkeypatch.setattr(config_docs, "DOC_PATH", page)
    assert config_docs.main(["--check"]) == 1
    assert "out of date: run python -m genesis.config_docs" in capsys.readouterr().err
    assert config_docs.main([]) == 0
    assert page.read_text(encoding="utf-8") == config_docs.render()
    assert config_docs.main(["--check"]) == 0


class Limits(BaseModel):
    """Limits of the test world."""

    tick_rate: float = Field(default=60.0, gt=0, description="Ticks per second.")
    mode: Literal["fast", "slow"] = Field(default="fast", description="How it runs.")


class Storage(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GENESIS_STORE_")

    url: str = Field(default="redis://x", description="Where it is stored.")


class Grouped(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GENESIS_", env_nested_delimiter="_", env_nested_max_split=1)

    seed: int = Field(default=1, description="The seed.")
    token: SecretStr = Field(default=SecretStr(""), description="A secret.")
    limits: Limits = Field(default_factory=Limits)
    storage: Storage = Field(default_factory=Storage, description="Where things are kept.")


def test_groups_become_sections_with_the_names_pydantic_settings_reads(monkeypatch):
    found = {s.title: s for s in config_docs.sections(Grouped)}
    assert list(found) == ["Settings", "Limits", "Storage"]
    assert [r.variable for r in found["Settings"].rows] == ["GENESIS_SEED", "GENESIS_TOKEN"]
    assert found["Settings"].rows[1].default == "*(empty)*" and found["Settings"].rows[1].values == "secret"
    limits = found["Limits"]
    assert limits.intro == "Limits of the test world."
    assert [(r.variable, r.default, r.values) for r in limits.rows] == [
        ("GENESIS_LIMITS_TICK_RATE", "`60`", "number > 0"),
        ("GENESIS_LIMITS_MODE", "`fast`", "`fast` \\| `slow`"),
    ]
    assert found["Storage"].intro == "Where things are kept."
    assert [r.variable for r in found["Storage"].rows] == ["GENESIS_STORE_URL"]

    # The documented names are the ones the settings really read.
    monkeypatch.setenv("GENESIS_LIMITS_TICK_RATE", "30")
    monkeypatch.setenv("GENESIS_LIMITS_MODE", "slow")
    monkeypatch.setenv("GENESIS_STORE_URL", "redis://y")
    read = Grouped()
    assert (read.limits.tick_rate, read.limits.mode, read.storage.url) == (30.0, "slow", "redis://y")


def test_a_setting_without_description_stops_the_generator():
    class Undocumented(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="GENESIS_")
        documented: int = Field(default=1, description="Fine.")
        forgotten: int = 2

    with pytest.raises(config_docs.UndocumentedSetting, match=r"Undocumented\.forgotten has no description"):
        config_docs.sections(Undocumented)
