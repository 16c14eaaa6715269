"""kg's SQL endpoint: the content-database guide's query language compiled to kg's use cases.

:mod:`kg.sql.parse` reads the text (sqlglot with kg's dialect, and short hand-written parsers for
the branch and relation statements), :mod:`kg.sql.plan` compiles each statement to calls of
:mod:`kg.ops` and :mod:`kg.rag` functions, :mod:`kg.sql.execute` runs them in order. No SQL text
ever reaches the database. docs/guides/sql.md.
"""
