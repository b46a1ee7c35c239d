"""Server secrets: random keys generated once and kept in the database, so every replica
and worker of one deployment uses the same (the key that hashes session and user ids)."""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.models.base import Base


class ServerSecret(Base):
    __tablename__ = "server_secrets"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    # Hex text; the first writer wins (insert if absent, then read).
    value: Mapped[str] = mapped_column(String(128))
