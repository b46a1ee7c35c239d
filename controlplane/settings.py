"""Shadowplane's configuration: one pydantic-settings class, read once.

Every setting comes from a `SHADOWPLANE_*` environment variable. With none set, the
embedded default runs: a SQLite file in the working directory and no Redis.
"""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///./shadowplane.db"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


REDIS_SCHEMES = ("redis", "rediss", "unix")


class Settings(BaseSettings):
    # Errors never echo the input: it holds secrets (the webhook secret, database passwords).
    model_config = SettingsConfigDict(
        env_prefix="SHADOWPLANE_", extra="ignore", hide_input_in_errors=True
    )

    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    evalsets_dir: str = "evalsets"
    # Webhook receivers, comma-separated (docs/http-api.md); every one needs the secret to
    # sign with.
    webhook_urls: str = ""
    webhook_secret: str | None = None
    # Seconds a receiver has to answer one POST.
    webhook_timeout_seconds: float = 5.0
    # Attempts per delivery before it is marked failed (kept and listed, never dropped);
    # retries wait webhook_backoff_seconds, doubling on each failure, at most the cap.
    webhook_max_attempts: int = 12
    webhook_backoff_seconds: float = 2.0
    webhook_backoff_max_seconds: float = 600.0
    # Seconds between delivery passes: the embedded thread's wake-up and the beat entry's
    # period (an action's commit also wakes them at once).
    webhook_poll_seconds: float = 1.0
    public_url: str = "http://127.0.0.1:8000"
    max_body_bytes: int = 16 * 1024 * 1024
    # The body limit of every route but results, task configs and eval-set runs (labels,
    # actions, backfills): their bodies are parsed before the key is checked.
    max_small_body_bytes: int = 256 * 1024
    max_batch_items: int = 1000
    # A task whose error_cost is at or above it never leaves shadow: a fraction as error_cost
    # is, above 0 and at most 1 (`_veto_a_fraction`); 70, NaN or infinity would veto nothing.
    error_cost_veto: float = 0.7
    # How long a process trusts a cached API-key record (a revoked key stops within 5 s).
    key_cache_seconds: float = 5.0
    # DEBUG, INFO, WARNING, ERROR or CRITICAL (any case): the API, the workers, beat and the
    # dashboard log at it.
    log_level: str = "INFO"
    # Seconds between passes of the in-process scheduler, which `api` runs when no Redis
    # is configured (the embedded default) and `demo` always runs; 0 turns it off.
    tick_seconds: float = 10.0
    # Seconds a window, plan or partition job may run before its worker kills it (the next
    # plans queue its window again); a webhook delivery pass starts no send after it. A job
    # whose worker died runs again after about twice this (shadowplane_workers/app.py, `job_limits`).
    # Half a second to an hour: less kills every job as it starts; more hides a dead worker's job
    # (and infinity, which the float type would take, gives no limit at all).
    job_time_limit_seconds: float = Field(60.0, ge=0.5, le=3600)
    # Seconds PostgreSQL has to accept a connection or answer the check made before a pooled
    # one is used; past them the database counts as unavailable (a 503, a job retried: one
    # WARNING per process), and TCP keepalives find a silent connection in about twice this.
    database_timeout_seconds: float = Field(5.0, gt=0, le=600)
    # `shadowplane migrate` on PostgreSQL: how long each lock a migration takes is waited
    # for. Queries that come after a waiting ALTER queue behind it (ingest, flags), so a
    # migration never waits long: it gives up, changes nothing and tries again (3 attempts).
    migrate_lock_timeout_seconds: float = Field(10.0, gt=0, le=3600)
    # How far back a result's `ts` may lie (ISO 8601 duration such as P7D, or seconds);
    # older results are rejected per item. Results may lie at most 5 minutes ahead.
    max_backfill: timedelta = Field(timedelta(days=7), gt=timedelta(0))
    # Text fields longer than this are stored and counted but not compared (`too_long`),
    # and under `redacted` only their first `compare_max_chars` are masked and kept.
    compare_max_chars: int = 32_000
    # Key for the HMAC that replaces session and user ids under `payload_policy: redacted`
    # and `none` (only `full` keeps raw ids).
    # Unset: one random key is generated once and kept in the database (shared by replicas).
    id_hash_secret: str | None = None
    # Token buckets per key and scope: sustained requests per second, and the burst.
    rate_ingest_per_second: float = 2000.0
    rate_ingest_burst: int = 4000
    rate_flags_per_second: float = 5000.0
    rate_flags_burst: int = 10000
    rate_read_per_second: float = 100.0
    rate_read_burst: int = 200
    rate_review_per_second: float = 50.0
    rate_review_burst: int = 100
    rate_admin_per_second: float = 20.0
    rate_admin_burst: int = 50
    # Failed authentications (unknown or revoked keys) allowed per client address per minute.
    auth_failures_per_minute: int = 30
    # Seconds between the checks each API process makes that its in-process copy of the
    # flags is current: the Redis revision key when Redis is configured (a published change
    # reloads it at once anyway), else the database's revision.
    flag_check_seconds: float = 1.0
    # GET /v1/flags/stream: a comment line after this many seconds without an event, so
    # proxies and routers can tell a quiet stream from a dead one.
    flag_stream_heartbeat_seconds: float = 15.0
    # Open flag streams one key may hold on one API process; more get 429.
    flag_streams_per_key: int = 10
    # Seconds a reviewer holds a claimed review item; past it the item returns to the queue
    # and a label from them is refused (409).
    review_lease_seconds: float = Field(600.0, gt=0, le=7 * 86400)
    # Hours a dashboard sign-in lasts (reloads and links opened in new tabs keep it);
    # signing out or revoking the key ends it sooner.
    dashboard_session_hours: float = Field(8.0, gt=0, le=30 * 24)

    @field_validator("error_cost_veto")
    @classmethod
    def _veto_a_fraction(cls, veto: float) -> float:
        # `not` so that NaN, which no comparison holds for, is refused too.
        if not 0 < veto <= 1:
            raise ValueError(
                "must be above 0 and at most 1, as a task's error_cost is (0.7 is the default, "
                "not 70): a task whose error_cost is at or above it never leaves shadow; at 0 "
                "every task would be held, past 1 (or at NaN, or infinity) none"
            )
        return veto

    @field_validator("max_backfill", mode="before")
    @classmethod
    def _backfill_in_seconds(cls, value: object) -> object:
        # An environment variable is text, and pydantic reads text only as an ISO 8601 or
        # HH:MM:SS duration: `SHADOWPLANE_MAX_BACKFILL=86400` is seconds, as documented.
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                return value
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        # Celery's broker and the project's own clients (rate limits, the flag stream) both
        # read it, and redis-py reads only these (not kombu's sentinel:// or redis+socket://).
        if value and value.split("://", 1)[0].lower() not in REDIS_SCHEMES:
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _known_level(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().upper() in LOG_LEVELS:
            return value.strip().upper()
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def webhook_url_list(self) -> list[str]:
        return [u.strip() for u in self.webhook_urls.split(",") if u.strip()]

    @model_validator(mode="after")
    def _webhooks_are_signed(self) -> Settings:
        urls = self.webhook_url_list
        if urls and not self.webhook_secret:
            # Receivers must be able to tell our webhooks from anyone's: no unsigned sending.
            raise ValueError(
                "SHADOWPLANE_WEBHOOK_URLS is set but SHADOWPLANE_WEBHOOK_SECRET is not: "
                "webhooks are signed with the secret; set one (e.g. `openssl rand -hex 32`) "
                "and give it to the receivers, or unset SHADOWPLANE_WEBHOOK_URLS"
            )
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(
                f"SHADOWPLANE_WEBHOOK_URLS: {', '.join(bad)} is not an http:// or https:// URL"
            )
        if self.webhook_max_attempts < 1 or self.webhook_timeout_seconds <= 0:
            raise ValueError(
                "SHADOWPLANE_WEBHOOK_MAX_ATTEMPTS must be at least 1 and "
                "SHADOWPLANE_WEBHOOK_TIMEOUT_SECONDS positive"
            )
        return self

    @model_validator(mode="after")
    def _flag_timings_are_positive(self) -> Settings:
        if self.flag_check_seconds <= 0 or self.flag_stream_heartbeat_seconds <= 0:
            raise ValueError(
                "SHADOWPLANE_FLAG_CHECK_SECONDS and SHADOWPLANE_FLAG_STREAM_HEARTBEAT_SECONDS "
                "must be positive"
            )
        return self


def explain(exc: ValidationError) -> list[str]:
    """One line per refused setting, named as its environment variable."""
    lines = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        names = [f"SHADOWPLANE_{str(part).upper()}" for part in error["loc"]]
        lines.append(f"{'.'.join(names)}: {message}" if names else message)
    return lines


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
