"""Schema statements written once, rendered for SQLite, PostgreSQL and MariaDB/MySQL.

Pony has no migration tool, so the schema is ours: migrations describe tables with
`Table`/`Column` and this module renders the dialect's SQL. Choices that keep the three
backends identical: counters are BIGINT (no overflow past 2^32), JSON is stored as text
we serialise ourselves (PostgreSQL's jsonb would reorder keys), and MySQL tables use a
binary collation so uniqueness and ordering are case-sensitive everywhere; case rules
live in the services, on normalised key columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TYPES = {
    "int": {"sqlite": "INTEGER", "postgres": "INTEGER", "mysql": "INTEGER"},
    "bigint": {"sqlite": "BIGINT", "postgres": "BIGINT", "mysql": "BIGINT"},
    "bool": {"sqlite": "BOOLEAN", "postgres": "BOOLEAN", "mysql": "BOOL"},
    "float": {"sqlite": "REAL", "postgres": "DOUBLE PRECISION", "mysql": "DOUBLE"},
    "text": {"sqlite": "TEXT", "postgres": "TEXT", "mysql": "LONGTEXT"},
}
PRIMARY_KEY = {
    "sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "postgres": "SERIAL PRIMARY KEY",
    "mysql": "INTEGER PRIMARY KEY AUTO_INCREMENT",
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # int | bigint | bool | float | text | str
    size: int = 0  # VARCHAR length for type "str"
    null: bool = False
    default: object = None
    references: str = ""  # "table" -> FOREIGN KEY (name) REFERENCES table(id)
    on_delete: str = "CASCADE"

    def render(self, dialect: str) -> str:
        if self.type == "str":
            sql_type = f"VARCHAR({self.size or 255})"
        else:
            sql_type = TYPES[self.type][dialect]
        parts = [quote(self.name, dialect), sql_type]
        parts.append("NULL" if self.null else "NOT NULL")
        if self.default is not None:
            parts.append(f"DEFAULT {literal(self.default, dialect)}")
        return " ".join(parts)


@dataclass(frozen=True)
class Index:
    columns: tuple[str, ...]
    unique: bool = False


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    indexes: tuple[Index, ...] = field(default_factory=tuple)

    def create(self, dialect: str) -> list[str]:
        """CREATE TABLE plus its indexes, in the dialect's words."""
        defs = [f"{quote('id', dialect)} {PRIMARY_KEY[dialect]}"]
        defs += [column.render(dialect) for column in self.columns]
        for column in self.columns:
            if column.references:
                defs.append(
                    f"FOREIGN KEY ({quote(column.name, dialect)}) REFERENCES "
                    f"{quote(column.references, dialect)}({quote('id', dialect)}) "
                    f"ON DELETE {column.on_delete}"
                )
        suffix = ""
        if dialect == "mysql":
            suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        statements = [f"CREATE TABLE {quote(self.name, dialect)} ({', '.join(defs)}){suffix}"]
        statements += [create_index(self.name, index, dialect) for index in self.indexes]
        return statements


def create_index(table: str, index: Index, dialect: str) -> str:
    name = f"ix_{table}_{'_'.join(index.columns)}"
    cols = ", ".join(quote(c, dialect) for c in index.columns)
    unique = "UNIQUE " if index.unique else ""
    return f"CREATE {unique}INDEX {quote(name, dialect)} ON {quote(table, dialect)} ({cols})"


def add_column(table: str, column: Column, dialect: str) -> str:
    return f"ALTER TABLE {quote(table, dialect)} ADD COLUMN {column.render(dialect)}"


def quote(name: str, dialect: str) -> str:
    return f"`{name}`" if dialect == "mysql" else f'"{name}"'


def literal(value: object, dialect: str) -> str:
    if isinstance(value, bool):
        if dialect == "postgres":
            return "TRUE" if value else "FALSE"
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def adding_upsert(table: str, keys: tuple[str, ...], columns: tuple[str, ...], dialect: str) -> str:
    """The clause that makes an INSERT into `table` add its `columns` to the row already
    holding its unique `keys`, in the dialect's words (SQLite and PostgreSQL share one)."""
    return _upsert(keys, columns, dialect, lambda column, new: f"{table}.{column} + {new}")


def replacing_upsert(keys: tuple[str, ...], columns: tuple[str, ...], dialect: str) -> str:
    """The clause that makes an INSERT set its `columns` on the row already holding its
    unique `keys`, in the dialect's words."""
    return _upsert(keys, columns, dialect, lambda column, new: new)


def _upsert(keys: tuple[str, ...], columns: tuple[str, ...], dialect: str, value) -> str:
    """ON DUPLICATE KEY / ON CONFLICT with each column set to `value(column, the value
    the INSERT brought)`."""
    if dialect == "mysql":
        sets = ", ".join(f"{c} = {value(c, f'VALUES({c})')}" for c in columns)
        return f" ON DUPLICATE KEY UPDATE {sets}"
    sets = ", ".join(f"{c} = {value(c, f'excluded.{c}')}" for c in columns)
    return f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {sets}"
