"""The journeys' fixtures: the app as it is served (a write is answered once stored, the
background indexer embeds its text), one repository and a reviewer."""

from __future__ import annotations

import pytest

from tests.journeys.journey import Kg, Reviewer


@pytest.fixture
def settings(settings):
    """The shared test settings with ``KG_INDEX_INLINE`` off, as served: the journeys settle the
    index (:meth:`Kg.settle`) before they search."""
    return settings.model_copy(update={"index_inline": False})


@pytest.fixture
def kg(client) -> Kg:
    """The repository ``acme`` with the workspace ``kb``."""
    k = Kg(client, "acme")
    k.create("kb")
    return k


@pytest.fixture
def reviewer(kg: Kg) -> Reviewer:
    return Reviewer(kg)
