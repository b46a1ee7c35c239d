"""Shadowplane's configuration: one pydantic-settings class, read once.

Every setting comes from a `SHADOWPLANE_*` environment variable. With none set, the
embedded default runs: a SQLite file in the working directory and no Redis.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///./shadowplane.db"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SHADOWPLANE_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    evalsets_dir: str = "evalsets"
    webhook_urls: str = ""
    webhook_secret: str | None = None
    public_url: str = "http://127.0.0.1:8000"
    max_body_bytes: int = 16 * 1024 * 1024
    max_batch_items: int = 1000
    error_cost_veto: float = 0.7
    # How long a process trusts a cached API-key record (DESIGN §5: revoked within 5 s).
    key_cache_seconds: float = 5.0
    log_level: str = "INFO"
    # Seconds between passes of the in-process scheduler, which `api` runs when no Redis
    # is configured (the embedded default) and `demo` always runs; 0 turns it off.
    tick_seconds: float = 10.0

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
