"""Pseudo-relevance feedback for the lexical leg: RM3 query expansion.

A first BM25 pass ranks the documents; its best few are taken as relevant, the terms they use
most (and the collection does not use everywhere) are added to the query, weighted, and the
expanded query is searched again (:meth:`kg.index.bm25.BM25Index.search` takes the weighted
query). Whether it helps a collection is an empirical question: ``bench/cv_expansion.py``
measures it by cross-validation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kg.index.bm25 import BM25Index, Selection

__all__ = ["rm3"]


def rm3(index: BM25Index, query: str, feedback: Sequence[tuple[str, float]], *, terms: int = 10,
        original_weight: float = 0.5, max_df_share: float = 0.1,
        selection: Selection | None = None) -> dict[str, float]:
    r"""The RM3 expansion of ``query`` from feedback documents: index terms and their weights.

    Parameters
    ----------
    index : BM25Index
        The index searched: its analyzer reads the feedback texts, its document frequencies
        filter the expansion terms.
    query : str
        The user's query (free text).
    feedback : sequence of (str, float)
        The first pass's best documents, best first: each one's text and its BM25 score (> 0).
    terms : int
        How many terms each feedback document contributes at most, and how many the relevance
        model keeps (Anserini's ``fbTerms``).
    original_weight : float
        :math:`\lambda` in [0, 1], the share of the original query in the expanded one.
    max_df_share : float
        A term held by more than this share of the searched documents is never an expansion
        term (Anserini's collection-independent stop-word rule).
    selection : Selection, optional
        The searched documents (their N and df); every document when omitted.

    Returns
    -------
    dict of str to float
        A weighted query for :meth:`BM25Index.search` / ``search_groups``: the original terms
        and the expansion terms, weights summing to 1 (the original query's alone when the
        feedback gives no term; ``{}`` for a query without terms).

    Raises
    ------
    ValueError
        ``original_weight`` outside [0, 1], ``terms`` < 1 or ``max_df_share`` outside (0, 1].

    Notes
    -----
    The relevance model of Lavrenko and Croft (2001), interpolated with the query as in
    Abdul-Jaleel et al. (2004), as Anserini computes it: each feedback document D's term
    counts, after the document-frequency filter and kept to its ``terms`` most frequent, are
    L1-normalised (:math:`P(w|D)`) and weighted by D's first-pass score (standing for
    :math:`P(Q|D)`):

    .. math::

        P(w|R) \propto \sum_{D} P(w|D)\, \mathrm{score}(D), \qquad
        q'(w) = \lambda\, q(w) + (1 - \lambda)\, P(w|R)

    with :math:`P(w|R)` kept to its ``terms`` heaviest terms and normalised, and :math:`q` the
    query's distinct terms weighing ``1 / |q|`` each. Ties between terms of equal weight are
    broken by the term, so the expansion is deterministic.

    References
    ----------
    .. [1] V. Lavrenko and W. B. Croft, "Relevance-Based Language Models", SIGIR 2001.
    .. [2] N. Abdul-Jaleel et al., "UMass at TREC 2004: Novelty and HARD", TREC 2004 (RM3).
    .. [3] J. Lin et al., Anserini ``Rm3Reranker`` (fbDocs 10, fbTerms 10, original weight 0.5,
       the 10% document-frequency rule).

    Examples
    --------
    >>> index = BM25Index()
    >>> index.add_many(enumerate(["solar panel output", "solar panel cost", "wind turbine output",
    ...                           "panel inverter efficiency", "grid storage", "battery storage",
    ...                           "hydro dam", "tidal power", "coal plant", "gas plant", "nuclear plant"]))
    >>> expanded = rm3(index, "solar", [("solar panel inverter", 2.0)], terms=3, max_df_share=0.25)
    >>> sorted(expanded.items())  # "panel" is in 3 of the 11 documents: too common
    [('invert', 0.25), ('solar', 0.75)]
    """
    if not 0.0 <= original_weight <= 1.0:
        raise ValueError(f"original_weight must be in [0, 1], got {original_weight}")
    if terms < 1:
        raise ValueError(f"terms must be >= 1, got {terms}")
    if not 0.0 < max_df_share <= 1.0:
        raise ValueError(f"max_df_share must be in (0, 1], got {max_df_share}")
    original = index.query_weights(query)
    if not original:
        return {}
    n = index.n_docs if selection is None else selection.n_selected
    limit = max_df_share * n
    df_cache: dict[str, bool] = {}

    def rare(term: str) -> bool:
        if term not in df_cache:
            df_cache[term] = index.document_frequency(term, selection) <= limit
        return df_cache[term]

    model: dict[str, float] = {}
    for text, score in feedback:
        counts = Counter(term for term in index.terms(text) if rare(term))
        kept = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:terms]
        total = sum(count for _, count in kept)
        if total and score > 0:
            for term, count in kept:
                model[term] = model.get(term, 0.0) + count / total * score
    expanded = {term: original_weight / len(original) for term in original}
    top = sorted(model.items(), key=lambda item: (-item[1], item[0]))[:terms]
    mass = sum(weight for _, weight in top)
    if not mass or original_weight == 1.0:
        return {term: 1.0 / len(original) for term in original}
    for term, weight in top:
        expanded[term] = expanded.get(term, 0.0) + (1.0 - original_weight) * weight / mass
    return expanded
