"""Database URLs: one string picks the backend.

`sqlite:///abs/path.db` (or a bare path) is the embedded default; `postgresql://` and
`mysql://` (also `mariadb://`) name a networked server. The parsed form feeds both Pony's
`bind()` and the raw DB-API connection the migrations use, so the two never disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from appliance.errors import ServiceError

SCHEMES = {
    "sqlite": "sqlite",
    "postgres": "postgres",
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
}


@dataclass(frozen=True)
class DbUrl:
    kind: str  # sqlite | postgres | mysql
    path: str = ""
    host: str = ""
    port: int = 0
    user: str = ""
    password: str = ""
    database: str = ""

    def redacted(self) -> str:
        """The URL as it may appear in logs: never with its password."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.path.lstrip('/')}" if self.path else "sqlite://"
        auth = f"{self.user}:***@" if self.password else (f"{self.user}@" if self.user else "")
        return f"{self.kind}://{auth}{self.host}:{self.port}/{self.database}"


def parse_db_url(url: str) -> DbUrl:
    """Parse a database URL; a string without a scheme is a SQLite file path."""
    url = url.strip()
    if not url:
        raise ServiceError("database URL is empty")
    if "://" not in url:
        return DbUrl("sqlite", path=os.path.abspath(url))
    parts = urlsplit(url)
    kind = SCHEMES.get(parts.scheme.split("+")[0].lower())
    if kind is None:
        raise ServiceError(
            f"database URL scheme must be sqlite, postgresql or mysql (got '{parts.scheme}')"
        )
    if kind == "sqlite":
        path = unquote(url.split("://", 1)[1].split("?", 1)[0])
        if not path or path == "/":
            raise ServiceError(
                "sqlite URL needs a file path, e.g. sqlite:///var/lib/appliance/panel.db"
            )
        if path.startswith("//"):
            path = path[1:]
        return DbUrl("sqlite", path=os.path.abspath(path))
    try:
        port = parts.port or (5432 if kind == "postgres" else 3306)
    except ValueError as exc:
        raise ServiceError(f"database URL has an invalid port: {exc}") from None
    database = unquote(parts.path.lstrip("/")) or parse_qs(parts.query).get("dbname", [""])[0]
    if not database:
        raise ServiceError(f"{kind} URL needs a database name, e.g. {parts.scheme}://host/panel")
    return DbUrl(
        kind,
        host=parts.hostname or "127.0.0.1",
        port=port,
        user=unquote(parts.username or ("postgres" if kind == "postgres" else "root")),
        password=unquote(parts.password or ""),
        database=database,
    )
