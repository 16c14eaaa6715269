"""User journeys, end to end over HTTP, on SQLite and PostgreSQL.

Each story follows a user's steps (agents writing on their branches, a person reviewing and
merging, documents ingested and edited) and asserts at every step that ``main`` ends exactly as
the reviewer was shown (the dry run's plan is what the merge applied; ``main`` after the merge
is ``main`` before plus that plan, read back through the API: nodes, ``neighbors``, the log and
the diff) and that nothing acknowledged is missing (every write answered 2xx reads back on its
branch, and is found by search once the index has caught up). The helper is
:mod:`tests.journeys.journey`.
"""
