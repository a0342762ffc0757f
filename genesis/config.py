"""One Settings class for every Genesis process (env prefix ``GENESIS_``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GENESIS_", env_file=".env", extra="ignore")

    database_url: str = "postgresql+asyncpg://genesis:genesis@127.0.0.1:5432/genesis"
    redis_url: str = "redis://127.0.0.1:6379/0"
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    temporal_ui_url: str = "http://127.0.0.1:8233"
    task_queue: str = "genesis"

    api_host: str = "127.0.0.1"
    api_port: int = 8000
    state_dir: Path = PROJECT_ROOT / ".state"

    # Sandbox (trait host container) limits.
    sandbox_image: str = ""  # empty: the offline-built image for the current trait host
    sandbox_ticks: int = 50
    sandbox_seed: int = 1234
    sandbox_call_timeout_ms: float = 5.0
    sandbox_tick_deadline_s: float = 2.0  # wall clock per tick before the container is killed
    sandbox_memory: str = "64m"
    sandbox_pids_limit: int = 32
    sandbox_cpus: float = 1.0
    sandbox_min_fps: float = 30.0  # projected world fps with the trait below this -> SANDBOX_FPS_DROP
    sandbox_concurrency: int = Field(default=8, ge=1)


@lru_cache
def get_settings() -> Settings:
    return Settings()
