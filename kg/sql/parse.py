"""Read SQL text into statements: sqlglot with kg's dialect, hand-written parsers for the rest.

The text is tokenized once (strings and comments understood), split at the top-level ``;``,
and each statement is parsed on its own: ``SELECT`` / ``INSERT`` / ``UPDATE`` / ``DELETE`` by
sqlglot (:mod:`kg.sql.dialect`); ``CREATE BRANCH``, ``MERGE BRANCH``, ``SHOW BRANCHES``,
``RELATE`` and ``UNRELATE`` by the short parsers below; ``EXPLAIN`` and a trailing
``AS OF REVISION n`` wrap either. Every refusal is a :class:`kg.errors.InvalidInput` whose
details name the construct and where it is (``line``, ``column``, 1-based, in the whole text).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from kg.errors import InvalidInput, TooLarge
from kg.sql.dialect import DIALECT
from kg.types.sql import MAX_SQL_CHARS

#: The deepest nesting of parentheses kg parses (sqlglot's parser recurses on each level).
MAX_NESTING = 64
#: The most statements one request runs.
MAX_STATEMENTS = 100
#: The most syntax-tree nodes one statement may have.
MAX_NODES = 20_000


@dataclass(frozen=True)
class CreateBranch:
    """``CREATE BRANCH 'name' [FROM 'branch'] [AT REVISION n]``."""

    name: exp.Expr
    from_branch: exp.Expr | None
    at_revision: exp.Expr | None


@dataclass(frozen=True)
class MergeBranch:
    """``MERGE BRANCH 'source' [INTO 'target']``."""

    source: exp.Expr
    into: exp.Expr | None


@dataclass(frozen=True)
class ShowBranches:
    """``SHOW BRANCHES``."""


@dataclass(frozen=True)
class Relate:
    """``RELATE FROM path='..' IN WORKSPACE '..' TO path='..' IN WORKSPACE '..' TYPE '..' [WEIGHT w]``
    and ``UNRELATE`` (``TYPE`` optional, no ``WEIGHT``)."""

    unrelate: bool
    from_path: exp.Expr
    from_workspace: exp.Expr | None
    to_path: exp.Expr
    to_workspace: exp.Expr | None
    rel_type: exp.Expr | None
    weight: exp.Expr | None


Command = CreateBranch | MergeBranch | ShowBranches | Relate


@dataclass
class Statement:
    """One statement of the text.

    Attributes
    ----------
    index : int
        1-based, in the text.
    text : str
        Its text (without the ``;``).
    line, column : int
        Where it starts in the whole text (1-based).
    node : sqlglot.exp.Expr or Command
        The parsed statement (``EXPLAIN`` and ``AS OF REVISION`` removed).
    explain : bool
        ``EXPLAIN``: say which use cases it becomes, run nothing.
    at_revision : int or None
        ``AS OF REVISION n``.
    source : str
        The whole text (positions in errors are in it).
    offset : int
        Where the statement starts in it.
    """

    index: int
    text: str
    line: int
    column: int
    node: exp.Expr | Command
    explain: bool = False
    at_revision: int | None = None
    source: str = field(default="", repr=False)
    offset: int = 0


def position(source: str, offset: int) -> tuple[int, int]:
    """The 1-based ``(line, column)`` of ``offset`` in ``source``.

    >>> position("SELECT\\n  x", 9)
    (2, 3)
    """
    line = source.count("\n", 0, offset) + 1
    return line, offset - (source.rfind("\n", 0, offset) + 1) + 1


def refuse(message: str, source: str, offset: int, construct: str, statement: int | None = None,
           **details: Any) -> InvalidInput:
    """The 422 of a construct kg does not run: its message, construct and position."""
    line, column = position(source, offset)
    info: dict[str, Any] = {"construct": construct, "line": line, "column": column}
    if statement is not None:
        info["statement"] = statement
    return InvalidInput(f"{message} (line {line}, column {column})", details=info | details)


def _tokens(sql: str) -> list[Token]:
    if len(sql) > MAX_SQL_CHARS:
        raise TooLarge(f"the SQL text is {len(sql)} characters, more than {MAX_SQL_CHARS}",
                       details={"chars": len(sql), "max_chars": MAX_SQL_CHARS})
    try:
        return list(DIALECT.tokenize(sql))
    except TokenError as exc:
        raise InvalidInput(f"the SQL text cannot be tokenized: {exc}", details={"construct": "token"}) from None


def _split(tokens: list[Token]) -> list[list[Token]]:
    parts: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            parts.append([])
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def parse(sql: str) -> list[Statement]:
    """The statements of ``sql``, parsed, in order.

    Parameters
    ----------
    sql : str
        ``;``-separated statements (docs/guides/sql.md).

    Returns
    -------
    list of Statement

    Raises
    ------
    kg.errors.InvalidInput
        A statement kg cannot parse or does not run, with the construct and its position; no
        statement, more than :data:`MAX_STATEMENTS`, nesting deeper than :data:`MAX_NESTING`.
    kg.errors.TooLarge
        A text longer than :data:`kg.types.sql.MAX_SQL_CHARS`.

    Examples
    --------
    >>> [type(s.node).__name__ for s in parse("SHOW BRANCHES; SELECT path FROM 'knowledge'")]
    ['ShowBranches', 'Select']
    """
    if len(sql) <= CACHED_CHARS:
        return list(_parse_cached(sql))
    return _parse(sql)


#: Texts up to this long are parsed once and kept (a statement with ``$n`` parameters is the
#: same text call after call; the trees are never changed once parsed).
CACHED_CHARS = 4096


@functools.lru_cache(maxsize=512)
def _parse_cached(sql: str) -> tuple[Statement, ...]:
    return tuple(_parse(sql))


def _parse(sql: str) -> list[Statement]:
    parts = _split(_tokens(sql))
    if not parts:
        raise InvalidInput("no SQL statement", details={"construct": "empty"})
    if len(parts) > MAX_STATEMENTS:
        raise InvalidInput(f"{len(parts)} statements, more than {MAX_STATEMENTS}",
                           details={"construct": "statements", "max_statements": MAX_STATEMENTS})
    return [_statement(sql, i, part) for i, part in enumerate(parts, start=1)]


def _word(token: Token) -> str:
    return token.text.upper() if token.token_type != TokenType.STRING else ""


def _check_nesting(sql: str, index: int, tokens: list[Token]) -> None:
    depth = 0
    for token in tokens:
        if token.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
            if depth > MAX_NESTING:
                raise refuse(f"parentheses nested deeper than {MAX_NESTING}", sql, token.start, "nesting", index)
        elif token.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1


def _statement(sql: str, index: int, tokens: list[Token]) -> Statement:
    _check_nesting(sql, index, tokens)
    line, column = position(sql, tokens[0].start)
    explain = False
    if _word(tokens[0]) == "EXPLAIN":
        explain = True
        tokens = tokens[1:]
        if not tokens:
            raise refuse("EXPLAIN needs a statement", sql, tokens_end(sql), "EXPLAIN", index)
    at_revision: int | None = None
    words = [_word(t) for t in tokens]
    for i in range(len(tokens) - 3):
        if words[i:i + 3] == ["AS", "OF", "REVISION"]:
            number = tokens[i + 3]
            if number.token_type != TokenType.NUMBER or not number.text.isdigit() or i + 4 != len(tokens):
                raise refuse("AS OF REVISION takes a revision number and ends the statement", sql,
                             tokens[i].start, "AS OF REVISION", index)
            at_revision = int(number.text)
            tokens = tokens[:i]
            break
    if not tokens:
        raise refuse("a statement is missing", sql, tokens_end(sql), "statement", index)
    text = sql[tokens[0].start:tokens[-1].end + 1]
    first = words[0]
    node: exp.Expr | Command
    if first in ("CREATE", "MERGE", "SHOW", "RELATE", "UNRELATE"):
        node = _Commands(sql, index, tokens).parse()
    else:
        node = _sqlglot(sql, index, tokens)
    return Statement(index=index, text=text, line=line, column=column, node=node, explain=explain,
                     at_revision=at_revision, source=sql, offset=tokens[0].start)


def tokens_end(sql: str) -> int:
    """The offset of the text's end (where a missing part would be)."""
    return max(len(sql) - 1, 0)


def _sqlglot(sql: str, index: int, tokens: list[Token]) -> exp.Expr:
    try:
        trees = DIALECT.parser(max_nodes=MAX_NODES).parse(tokens, sql)
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        offset = tokens[0].start
        # sqlglot's position is where the parser stopped (line, end column of the token).
        for token in tokens:
            if token.line == first.get("line") and token.col == first.get("col"):
                offset = token.start
                break
        description = first.get("description") or str(exc)
        raise refuse(f"cannot parse statement {index}: {description}", sql, offset,
                     str(first.get("highlight") or "syntax"), index) from None
    except RecursionError:
        raise refuse("the statement is nested too deeply", sql, tokens[0].start, "nesting", index) from None
    if len(trees) != 1 or trees[0] is None:
        raise refuse("one statement expected", sql, tokens[0].start, "statement", index)
    return trees[0]


class _Commands:
    """The hand-written parsers: ``CREATE BRANCH``, ``MERGE BRANCH``, ``SHOW BRANCHES``,
    ``RELATE`` and ``UNRELATE``, over the statement's tokens."""

    def __init__(self, sql: str, index: int, tokens: list[Token]) -> None:
        self.sql = sql
        self.index = index
        self.tokens = tokens
        self.i = 0

    def _error(self, message: str, construct: str) -> InvalidInput:
        offset = self.tokens[self.i].start if self.i < len(self.tokens) else self.tokens[-1].end + 1
        return refuse(message, self.sql, min(offset, tokens_end(self.sql)), construct, self.index)

    def _peek(self) -> str:
        return _word(self.tokens[self.i]) if self.i < len(self.tokens) else ""

    def _keyword(self, *words: str) -> None:
        for word in words:
            if self._peek() != word:
                raise self._error(f"expected {word}", self._peek() or "end")
            self.i += 1

    def _accept(self, word: str) -> bool:
        if self._peek() == word:
            self.i += 1
            return True
        return False

    def _value(self, what: str, *, number: bool = False) -> exp.Expr:
        """A string literal (or a number when ``number``), or a ``$n`` parameter."""
        if self.i >= len(self.tokens):
            raise self._error(f"expected {what}", "end")
        token = self.tokens[self.i]
        if token.token_type == TokenType.PARAMETER and self.i + 1 < len(self.tokens) \
                and self.tokens[self.i + 1].token_type == TokenType.NUMBER:
            self.i += 2
            return exp.Parameter(this=exp.Literal.number(self.tokens[self.i - 1].text))
        if token.token_type == TokenType.STRING and not number:
            self.i += 1
            return exp.Literal.string(token.text)
        if number and token.token_type == TokenType.NUMBER:
            self.i += 1
            return exp.Literal.number(token.text)
        if number and token.token_type == TokenType.NULL:
            self.i += 1
            return exp.Null()
        raise self._error(f"expected {what}", token.text)

    def _end(self) -> None:
        if self.i < len(self.tokens):
            raise self._error(f"unexpected {self.tokens[self.i].text!r}", self.tokens[self.i].text)

    def parse(self) -> Command:
        first = self._peek()
        self.i += 1
        command: Command
        if first == "CREATE":
            self._keyword("BRANCH")
            name = self._value("a branch name")
            from_branch = self._value("a branch name") if self._accept("FROM") else None
            at_revision = None
            if self._accept("AT"):
                self._keyword("REVISION")
                at_revision = self._value("a revision number", number=True)
            command = CreateBranch(name, from_branch, at_revision)
        elif first == "MERGE":
            self._keyword("BRANCH")
            source = self._value("a branch name")
            into = self._value("a branch name") if self._accept("INTO") else None
            command = MergeBranch(source, into)
        elif first == "SHOW":
            self._keyword("BRANCHES")
            command = ShowBranches()
        else:
            command = self._relate(first == "UNRELATE")
        self._end()
        return command

    def _endpoint(self) -> tuple[exp.Expr, exp.Expr | None]:
        self._keyword("PATH")
        if self.i < len(self.tokens) and self.tokens[self.i].token_type == TokenType.EQ:
            self.i += 1
        else:
            raise self._error("expected path = '...'", self._peek() or "end")
        path = self._value("a path")
        workspace = None
        if self._accept("IN"):
            self._keyword("WORKSPACE")
            workspace = self._value("a workspace name")
        return path, workspace

    def _relate(self, unrelate: bool) -> Relate:
        self._keyword("FROM")
        from_path, from_workspace = self._endpoint()
        self._keyword("TO")
        to_path, to_workspace = self._endpoint()
        rel_type = None
        if self._accept("TYPE"):
            rel_type = self._value("a relation type")
        elif not unrelate:
            raise self._error("RELATE needs TYPE '...'", self._peek() or "end")
        weight = None
        if not unrelate and self._accept("WEIGHT"):
            weight = self._value("a weight", number=True)
        return Relate(unrelate, from_path, from_workspace, to_path, to_workspace, rel_type, weight)
