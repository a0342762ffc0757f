"""Settings are grouped per room (``settings.sandbox.memory``) while every environment variable
keeps its one flat name (``GENESIS_SANDBOX_MEMORY``), both ways."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from genesis.config import GROUPS, Settings


def test_a_grouped_setting_is_read_from_its_flat_variable(monkeypatch):
    monkeypatch.setenv("GENESIS_SANDBOX_CALL_TIMEOUT_MS", "7.5")
    monkeypatch.setenv("GENESIS_TASK_QUEUE", "elsewhere")
    monkeypatch.setenv("GENESIS_TASK_TTL_HIGH_S", "42")
    monkeypatch.setenv("GENESIS_GEPA_GITHUB_URL", "https://git.example.org/")
    settings = Settings(_env_file=None)
    assert settings.sandbox.call_timeout_ms == 7.5
    assert settings.task_queue == "elsewhere" and settings.task.ttl_s("high") == 42
    assert settings.gepa.github_url == "https://git.example.org"  # validated inside its group


def test_a_bad_value_names_its_variable(monkeypatch):
    monkeypatch.setenv("GENESIS_ENGINE_TICK_RATE", "-1")
    with pytest.raises(ValidationError, match=r"engine\.tick_rate"):
        Settings(_env_file=None)


def test_the_environment_gives_back_the_same_settings(monkeypatch):
    changed = Settings(_env_file=None).override(
        sandbox_memory="256m", webhook_secret=SecretStr("s3cret"), auth="open", gepa_keep_worktrees=True
    )
    env = changed.environment()
    assert env["GENESIS_SANDBOX_MEMORY"] == "256m" and env["GENESIS_WEBHOOK_SECRET"] == "s3cret"
    assert "GENESIS_GEPA_GITHUB_PRIVATE_KEY_PATH" not in env  # unset optional path: no variable
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings(_env_file=None) == changed


def test_every_group_is_one_word_so_its_variables_split_once():
    assert all("_" not in group for group in GROUPS)


def test_an_override_of_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="GENESIS_SANDBOX_MEMROY"):
        Settings(_env_file=None).override(sandbox_memroy="1g")
