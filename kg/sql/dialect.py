"""kg's SQL dialect: PostgreSQL's syntax, with ``<=>`` as the vector-distance operator.

PostgreSQL's tokenizer gives ``'...'::jsonb``, ``->>``, ``$1`` and ``name => value``; sqlglot
reads ``<=>`` as null-safe equality (MySQL's), which kg's dialect makes pgvector's cosine
distance (:class:`sqlglot.exp.CosineDistance`), binding as tightly as ``+``. The tokenizer has no
"command" statements (PostgreSQL's reads ``SHOW ...`` and ``EXPLAIN ...`` as one opaque string),
so every statement is tokenized, strings and comments included, before it is split at ``;``;
``REFERENCES`` is a function name (kg's ``REFERENCES('ws:/path')``), not a keyword.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.parsers.postgres import PostgresParser
from sqlglot.tokens import TokenType


class KG(Postgres):
    """PostgreSQL's dialect with ``<=>`` as vector distance and no opaque commands."""

    class Tokenizer(Postgres.Tokenizer):
        """PostgreSQL's tokenizer without opaque commands."""

        COMMANDS: ClassVar[set[Any]] = set()
        #: ``REFERENCES(...)`` is kg's table function, not the constraint keyword.
        KEYWORDS: ClassVar[dict[str, Any]] = {k: v for k, v in Postgres.Tokenizer.KEYWORDS.items()
                                              if k != "REFERENCES"}

    class Parser(PostgresParser):
        """PostgreSQL's parser; ``a <=> b`` is :class:`sqlglot.exp.CosineDistance`."""

        EQUALITY: ClassVar[dict[Any, Any]] = {k: v for k, v in PostgresParser.EQUALITY.items()
                                              if k != TokenType.NULLSAFE_EQ}
        TERM: ClassVar[dict[Any, Any]] = {**PostgresParser.TERM, TokenType.NULLSAFE_EQ: exp.CosineDistance}


DIALECT = KG()
