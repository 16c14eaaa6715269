"""Settings: one pydantic-settings object; every knob has an environment variable ``KG_*``.

Nothing reads the environment at import time: build :class:`Settings` in ``create_app`` or
in the CLI and pass it down.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Configuration of one kg process.

    Attributes
    ----------
    database_url : str or None
        SQLAlchemy URL of the store. ``None`` (``KG_DATABASE_URL`` unset) means a SQLite file
        ``kg.sqlite3`` inside :attr:`data_dir`. PostgreSQL: ``postgresql+psycopg://...``.
    data_dir : Path
        Folder for the SQLite file and the embedded search index (default ``./.kg``).
    embedding_model : str
        Default embedding model of new workspaces, ``<provider>:<model>``.
    embed_batch_size : int
        Texts per embedder call (the indexer's and the pipeline's), and per Ollama request.
    embed_local_batch_size : int
        Texts per model run of the local embedder (default 1: one text per run, unpadded,
        embeds as fast as any batch on 2 cores and within 0.95 of the best bare onnxruntime
        session, ``bench/embedder_runtime.py``).
    sqlite_busy_timeout_s : float
        How long a SQLite writer waits for the write lock, in seconds.
    sqlite_checkpoint : {"background", "commit"}
        Who folds SQLite's write-ahead log into the database file: ``background`` (default), a
        thread of the process, after writes and never inside one; ``commit``: SQLite's automatic
        checkpoint, run by the write whose commit takes the log past 1,000 pages (that write
        waits for it).
    index_inline : bool
        Index a write's text before answering it (tests, scripts). Default: a write is
        answered once stored and the background indexer embeds its text.
    ollama_host : str
        Where Ollama listens, for ``ollama:`` embedders and LLMs.
    llm_model : str
        The LLM of ``ask`` and ``extract-entities``: ``none`` (extractive, no model) or
        ``ollama:<model>``.
    entity_ner : {"auto", "off"}
        ``extract-entities`` with no LLM: ``auto`` runs the offline NER (spaCy's small English
        pipeline, the ``ner`` extra) when its package imports, else the deterministic rules;
        ``off`` always runs the rules.
    ask_min_similarity : float
        The semantic grade of ``ask`` without an LLM: the cosine similarity between the
        question and a passage's sentence that the sentence must reach to be quoted
        (calibrated for ``local:all-MiniLM-L6-v2`` by cross-validation on HotpotQA,
        ``bench/extractive_ask.py --calibrate``).
    ask_max_absent_share : float
        ``ask`` without an LLM answers "not covered" when more than this share of the
        question's content words occur in no searchable passage
        (:func:`kg.rag.functions.absent_terms`) and near no quoted word in meaning
        (``ask_word_similarity``); 1 turns the check off (chosen by cross-validation on
        HotpotQA, ``bench/extractive_ask.py``).
    ask_answer_coverage : float
        ``ask`` without an LLM quotes a sentence as the answer only when it, with its
        document's title, holds at least this share of the question's content words (stems)
        (:func:`kg.rag.functions.answer_coverage`); 0 turns the check off (chosen by 5-fold
        cross-validation on the answer gold set, ``bench/answer_quality.py --sweep``).
    ask_word_similarity : float
        A question's word that no passage holds still counts as covered when its cosine
        similarity with a word of the quoted sentences reaches this
        (:func:`kg.rag.functions.nearest_words`); above 1 no word is.
    ask_slot_similarity : float
        ``ask`` without an LLM quotes a sentence only when it says what the question's answer
        slot is (:func:`kg.text.questions.slot_words`: "What is the *mascot* of X?"); a slot
        word no passage holds counts as said only when a word of the quoted sentences is this
        near it in meaning (:func:`kg.rag.functions.nearest_words`: "warning" said as "notice")
        or it is misspelt; -1: whenever the coverage check excuses it (chosen by 5-fold
        cross-validation on the answer gold set, ``bench/answer_quality.py --sweep-setting``).
    ask_code_names : bool
        ``ask`` without an LLM answers a question asking for a name of code or of a file system
        ("what *file* ...", "which *attribute* ...", "what is the *directory* ... called") only
        with a sentence holding a term written as code (``__pycache__``, ``py.typed``,
        ``RECORD``: :func:`kg.text.questions.has_code_term`), not any capitalised word (chosen
        by 5-fold cross-validation on the answer gold set, ``bench/answer_quality.py
        --sweep-setting``).
    ask_definition_article : bool
        A term asked with an indefinite article ("What is *a* wheel?") is defined by "X is a
        ..." only when a determiner precedes it in the sentence ("A wheel is a ZIP-format
        archive", not "Wheel is an installation format"; :class:`kg.text.questions.TypeChecks`;
        chosen as ``ask_code_names``).
    ask_named_mentions : bool
        ``ask`` without an LLM quotes a sentence only when it or its document's title names each
        named mention of the question (every word of it): a sentence about the entity beside the
        one asked about does not answer (:func:`kg.text.questions.holds_named_mentions`;
        chosen as ``ask_code_names``).
    ask_reference_values : bool
        The number of a cited name ("PEP 480", ":pep:`480`", "RFC 2119") is not the value of a
        number or a date (:func:`kg.text.questions.strip_references`; chosen as ``ask_code_names``).
    ask_name_meanings : bool
        "What does X mean?" of a proper name is answered only by a sentence saying what the name
        means, not what X is (:class:`kg.text.questions.TypeChecks`; chosen as ``ask_code_names``).
    ask_acronym_expansions : bool
        "What does X stand for?" of an acronym is answered only by a sentence holding its
        expansion next to it ("The Update Framework (TUF)"), not one that only uses it
        (:func:`kg.text.questions.expands`, Schwartz and Hearst 2003; chosen as ``ask_code_names``).
    ask_mixed_case_mentions : bool
        A word with a capital past its first letter ("tvOS") is a named mention the quoted
        sentence or its title must hold (chosen as ``ask_code_names``).
    ask_literal_roles : bool
        "Who composed / produced / designed X?" is answered only by a sentence saying that role
        in one of its forms, not a role near it in meaning (:func:`kg.text.questions.holds_roles`;
        chosen as ``ask_code_names``).
    ask_event_words : bool
        "When did X close?" is answered only by a sentence that, with its title, holds every word
        asked of X ("close", by stem or lemma), never one dating another event of X
        (:func:`kg.rag.functions.holds_event_words`; chosen as ``ask_code_names``).
    ask_absent_words : {"all", "salient"}
        Which uncovered words the check counts: all, or those naming the subject (numbers,
        names, rare words: :func:`kg.rag.functions.salient_words`).
    rag_repo : str
        The repository that holds the RAG node's collections (``POST /api/rag``); reserved:
        made by the node's first call, refused to ``POST /api/repos``, reached only by a grant
        naming it.
    rag_max_distance : float
        The RAG node injects only chunks within this cosine distance of the query (a null
        context when nothing relevant is found); 2 injects the top k however far.
        Measured on held data by ``bench/rag_null_context.py``.
    research_max_steps : int
        Most tool calls one ``research-assistant`` run makes (its input ``max_steps`` may only
        lower it); the model then answers from what it found.
    research_result_chars : int
        A tool result is cut to this many characters before the model reads it.
    graph_max_edges : int
        Edges the in-memory relation graphs may hold in all (about 360 bytes each); a branch
        larger than that is answered from SQL.
    graph_max_bytes : int
        The estimated memory the in-memory relation graphs may take in all, in bytes (a fixed
        cost per graph, plus per node and per edge); least recently used graphs go first.
    graph_max_views : int
        The most in-memory relation graphs (one per branch read) kept at once.
    index_poll_s : float
        How often the background indexer looks at the queue when idle, in seconds.
    index_step_chunks : int
        Chunks the background indexer embeds of large texts per pass: a text with more is
        embedded in steps across passes (its chunks stored only once all are embedded), so
        other jobs are claimed and done in between.
    host, port : str, int
        Where ``kg serve`` listens (``--host``, ``--port`` override them).
    index : {"embedded", "weaviate"}
        The search index: the embedded one in :attr:`data_dir` (default), or Weaviate at
        :attr:`weaviate_url` (needs ``pip install 'kg[weaviate]'``; see docs/guides/scale-out.md).
    weaviate_url : str or None
        ``http[s]://host:port`` of Weaviate (gRPC on port 50051 of the same host, or
        ``?grpc_port=N``); required when ``index`` is ``weaviate``.
    weaviate_api_key : SecretStr or None
        Weaviate API key; unset for an unauthenticated instance.
    weaviate_timeout_s : float
        Timeout of one Weaviate query, in seconds (also for RAG-node Weaviate URLs).
    index_ann_min_rows : int
        The embedded index searches a model's vectors through an HNSW graph once it has this
        many rows (and a search allows this many); below it, exactly (0: always exactly).
        Where the two cross on 2 cores, docs/concepts/ann.md.
    index_ann_m, index_ann_ef_construction, index_ann_ef_search : int
        The HNSW graph's neighbours per node, its insertion candidate list and its search
        candidate list (every candidate is reranked exactly); chosen for recall@10 >= 0.98.
    index_flush_interval_s : float
        With a data directory, a sync writes the embedded index's snapshot in the background
        when the last one is this many seconds old (0: after every sync); shutdown writes it
        too, so a restart loads it instead of re-syncing from SQL.
    index_ann_background_rows : int
        A sync or snapshot load that leaves more rows than this to add to a graph hands them
        to a background builder thread (the rows are searched exactly meanwhile); 0: always.
    index_ann_build_threads : int
        Threads that builder adds rows to a graph on (0: every core the process may use).
    index_memory_budget_mb : int
        Memory the embedded index's repositories may hold together, in MiB (estimated); past
        it the least recently used are unloaded (snapshotted first, reloaded on use). 0: no
        bound.
    search_rrf_k : int
        The rank constant of kg's reciprocal rank fusion of hybrid search (chosen by
        cross-validation, ``bench/cv_fusion.py``; docs/benchmarks/retrieval.md).
    search_title_weight : float
        The weight of the ``title`` field in the node-level BM25F of the fulltext leg (other
        fields weigh 1; chosen by cross-validation like :attr:`search_rrf_k`).
    search_vector_weight, search_fulltext_weight : float
        The legs' weights in hybrid fusion when a request names none (>= 0; a request with
        both 0 is refused).
    search_fusion_type : {"ranked", "relative_score"}
        The fusion function of hybrid search when a request names none: reciprocal rank
        fusion, or relative score fusion (min-max normalised scores, convexly combined).
    rerank_model : str
        The reranker of search: ``none``, or ``ollama:<model>`` (a chat model scoring each
        passage's relevance). Searches rerank by default when one is set.
    rerank_depth : int
        How many fused candidates the reranker reorders (the rest keep their order after them).
    rag_weaviate_urls : list of str
        The Weaviate instances a RAG-node request may name as ``weaviateUrl``
        (``KG_RAG_WEAVIATE_URLS``, comma-separated or a JSON list). ``embedded`` is always
        allowed; any other URL is refused (422) before kg connects to it. Default: none.
    max_body_bytes : int
        Largest request body, in bytes (default 10 MiB); a larger one is refused with 413
        from its ``Content-Length``, or as soon as a streamed body passes the limit.
    max_import_bytes : int
        Largest file ``POST /api/repos/{repo}/import`` takes, in bytes (default 256 MiB),
        refused with 413 as :attr:`max_body_bytes` refuses a body; and the most bytes the files
        being received or imported hold at once in a process (past it, 503 with
        ``Retry-After``: the disk is not filled by concurrent uploads). The file is received into
        ``data_dir/uploads`` (on disk, not counted in :attr:`max_buffered_body_bytes`) and gone
        once the import has answered; the import holds the file's records in memory while it
        checks them, as ``kg import`` does.
    max_chunks_per_request : int
        Chunks one RAG-node request may make of its input's files (default 20,000); more is
        refused with 413 before anything is embedded or written.
    webhook_allowed_urls : list of str
        The URLs a webhook may deliver to (``KG_WEBHOOK_ALLOWED_URLS``, comma-separated or a JSON
        list), compared as endpoints the way ``KG_RAG_WEAVIATE_URLS`` is (scheme, host without
        regard to case, port with its default), the webhook's path starting with the listed
        one's. Any other URL is refused (422) at registration and never contacted at delivery.
        Default: none (no webhook can be registered).
    webhook_timeout_s : float
        How long one delivery may take (connect, send, each read of the answer), in seconds
        (default 10): a receiver that hangs is cut then and the attempt counts as failed.
    webhook_max_attempts : int
        Attempts of one delivery before it is marked ``failed`` (default 8).
    webhook_backoff_s : float
        The wait before a failed delivery's first retry, in seconds (default 5), doubled at each
        further attempt, at most an hour.
    changes_poll_s : float
        How often an open change feed stream reads the store for new revisions, in seconds
        (default 1; writes of any process, on SQLite or PostgreSQL, are seen so).
    changes_heartbeat_s : float
        How often a change feed stream sends a comment while idle, in seconds (default 15), so
        that proxies keep it open.
    changes_max_streams : int
        Change feed streams one key (or the anonymous caller) may hold open at once, per process
        (default 4); one more is refused with 429.
    allow_fake_embedder : bool
        Allow the ``fake:`` embedding provider (tests only; default off, so a client cannot
        name it).
    keepalive_timeout_s : int
        How long ``kg serve`` keeps an idle HTTP connection open, in seconds.
    header_timeout_s : float
        How long ``kg serve`` waits for a request's head (request line and headers), in
        seconds from the connection's opening or the previous response; then it closes the
        connection (a client sending its headers a byte at a time holds no slot for long).
    body_timeout_s : float
        How long ``kg serve`` waits for a request body, in seconds from the end of its head,
        extended by one second per :attr:`body_min_bytes_per_s` bytes received, and at most
        this long between two parts of it: a body sent more slowly, or paused longer, is cut
        with 408 and the connection closed.
    body_min_bytes_per_s : int
        The rate, in bytes per second, a body must keep up past :attr:`body_timeout_s`.
    max_buffered_body_bytes : int
        The bytes that request bodies being received may hold in all, per process (default
        128 MiB): past it a request is refused with 503 and ``Retry-After``, before more of
        its body is read. Keep it above :attr:`max_body_bytes`.
    allowed_hosts : list of str
        While :attr:`auth` is off, the ``Host`` names (``KG_ALLOWED_HOSTS``, comma-separated
        or a JSON list) the server answers besides the loopback ones (``localhost``,
        ``127.0.0.1`` and any other loopback address, ``[::1]``, with any port); any other
        ``Host`` is refused with 421 (a DNS-rebinding page), on every path. Default: none.
    auth : bool
        Require an API key (``Authorization: Bearer kg_...``) on every HTTP request. Off, the
        server listens on loopback only (``kg serve`` refuses any other host).
    key_pepper : SecretStr or None
        The server-side secret keyed into every stored key hash (HMAC-SHA256); required to
        create keys and to turn ``auth`` on. Changing it invalidates every key.
    protected_branches : str
        Comma-separated branch names or globs that need a grant naming them literally for
        write, merge, reset and delete (default ``main``).
    key_touch_s : float
        A key's ``last_used_at`` is written at most this often, in seconds.
    key_cache_s : float
        Seconds a server trusts a key it authenticated without reading it again (0..300;
        0: every request reads its key). A revocation holds at once in the process that made
        it and within this bound in every other.
    rate_expensive_per_min : float
        Expensive calls (the ``ask``, ``extract-entities`` and ``research-assistant`` functions, a workspace re-embed,
        the RAG node) a caller may make per minute, on average: a token bucket per API key
        (one shared by every anonymous caller), refilled at this rate; 0 turns the limit off.
        Beyond it the call is refused with 429 and ``Retry-After``. Per process.
    rate_expensive_burst : int
        Expensive calls a caller that was idle may make at once (the bucket's size), >= 1.
    mcp_read_only : bool
        Serve only the MCP server's read tools (``KG_MCP_READ_ONLY``): no write, branch or
        merge tool is registered, whatever the caller's grants.
    mcp_sessions : bool
        Mount the MCP streamable HTTP endpoint with sessions and a server-to-client SSE stream
        (``KG_MCP_SESSIONS``; default off: stateless, plain JSON answers). On, clients may
        subscribe to a branch's change feed (``resources/subscribe``) and are sent
        ``notifications/resources/updated``; a session lives in the process that opened it, so
        behind a load balancer (or ``kg serve --workers N``) requests must be routed stickily by
        their ``Mcp-Session-Id``.
    ui_secret : SecretStr or None
        The key that signs the review console's session cookie (``KG_UI_SECRET``). Unset, it is
        derived from ``key_pepper`` (so every process of one deployment shares it), or, with no
        pepper either, drawn at random when the server starts (a restart signs everyone out).
    ui_session_s : float
        How long a console sign-in lasts, in seconds (default 12 hours); the key itself is
        checked again on every page, so a revoked or expired key ends the session at once.
    metrics : bool
        Count requests and use cases and serve them in Prometheus's format (``KG_METRICS``,
        default on; off: nothing is counted and ``/metrics`` answers 404).
    metrics_port : int or None
        Serve the metrics on this port of their own (``KG_METRICS_PORT``, by prometheus-client's
        server, without authentication) instead of ``/metrics`` on the API's port (which then
        answers 404). Unset: ``/metrics`` on the API's port, for an admin key (``KG_AUTH`` on)
        or a loopback client (off).
    metrics_host : str
        The interface of the metrics port (``KG_METRICS_HOST``, default ``127.0.0.1``).
    """

    model_config = SettingsConfigDict(env_prefix="KG_", extra="ignore")

    database_url: str | None = None
    data_dir: Path = Path(".kg")
    embedding_model: str = "local:all-MiniLM-L6-v2"
    embed_batch_size: int = Field(default=32, gt=0)
    embed_local_batch_size: int = Field(default=1, gt=0)
    sqlite_busy_timeout_s: float = Field(default=30.0, gt=0)
    sqlite_checkpoint: Literal["background", "commit"] = "background"
    index_inline: bool = False
    index_poll_s: float = Field(default=1.0, gt=0)
    index_step_chunks: int = Field(default=16, gt=0)
    ollama_host: str = "http://127.0.0.1:11434"
    llm_model: str = "none"
    entity_ner: Literal["auto", "off"] = "auto"
    ask_min_similarity: float = Field(default=0.32, ge=-1.0, le=1.0)
    ask_max_absent_share: float = Field(default=0.05, ge=0.0, le=1.0)
    ask_word_similarity: float = Field(default=0.55, ge=-1.0, le=1.01)
    ask_slot_similarity: float = Field(default=0.4, ge=-1.0, le=1.01)
    ask_answer_coverage: float = Field(default=0.6, ge=0.0, le=1.0)
    ask_code_names: bool = True
    ask_definition_article: bool = True
    ask_named_mentions: bool = True
    ask_reference_values: bool = True
    ask_name_meanings: bool = True
    ask_acronym_expansions: bool = True
    ask_mixed_case_mentions: bool = True
    ask_literal_roles: bool = True
    ask_event_words: bool = True
    ask_absent_words: Literal["all", "salient"] = "salient"
    research_max_steps: int = Field(default=6, ge=1, le=50)
    research_result_chars: int = Field(default=4_000, ge=200, le=100_000)
    rag_repo: str = "rag"
    rag_max_distance: float = Field(default=0.6, ge=0.0, le=2.0)
    graph_max_edges: int = Field(default=2_000_000, gt=0)
    graph_max_bytes: int = Field(default=1_000_000_000, gt=0)
    graph_max_views: int = Field(default=512, gt=0)
    host: str = "127.0.0.1"
    port: int = 8765
    index: Literal["embedded", "weaviate"] = "embedded"
    weaviate_url: str | None = None
    weaviate_api_key: SecretStr | None = None
    weaviate_timeout_s: float = Field(default=30.0, gt=0)
    index_ann_min_rows: int = Field(default=20_000, ge=0)
    index_ann_m: int = Field(default=32, ge=4, le=128)
    index_ann_ef_construction: int = Field(default=128, ge=8, le=4096)
    index_ann_ef_search: int = Field(default=128, ge=8, le=4096)
    index_ann_background_rows: int = Field(default=4096, ge=0)
    index_ann_build_threads: int = Field(default=0, ge=0, le=256)
    index_flush_interval_s: float = Field(default=300.0, ge=0)
    index_memory_budget_mb: int = Field(default=4096, ge=0)
    search_rrf_k: int = Field(default=60, ge=0, le=10_000)
    search_title_weight: float = Field(default=1.0, ge=0, le=100)
    search_fusion_type: Literal["ranked", "relative_score"] = "relative_score"
    search_vector_weight: float = Field(default=0.25, ge=0, le=100)
    search_fulltext_weight: float = Field(default=1.0, ge=0, le=100)
    rerank_model: str = "none"
    rerank_depth: int = Field(default=20, ge=1, le=1000)
    rag_weaviate_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    max_body_bytes: int = Field(default=10 * 1024 * 1024, gt=0)
    max_import_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    max_chunks_per_request: int = Field(default=20_000, gt=0)
    allow_fake_embedder: bool = False
    webhook_allowed_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=300)
    webhook_max_attempts: int = Field(default=8, ge=1, le=100)
    webhook_backoff_s: float = Field(default=5.0, ge=0, le=3600)
    changes_poll_s: float = Field(default=1.0, gt=0, le=60)
    changes_heartbeat_s: float = Field(default=15.0, gt=0, le=600)
    changes_max_streams: int = Field(default=4, ge=1, le=1000)
    keepalive_timeout_s: int = Field(default=5, gt=0)
    header_timeout_s: float = Field(default=10.0, gt=0, le=600)
    body_timeout_s: float = Field(default=20.0, gt=0, le=600)
    body_min_bytes_per_s: int = Field(default=500, gt=0)
    max_buffered_body_bytes: int = Field(default=128 * 1024 * 1024, gt=0)
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    auth: bool = False
    key_pepper: SecretStr | None = None
    protected_branches: str = "main"
    key_touch_s: float = Field(default=300.0, ge=0)
    key_cache_s: float = Field(default=2.0, ge=0, le=300)
    rate_expensive_per_min: float = Field(default=60.0, ge=0)
    rate_expensive_burst: int = Field(default=20, ge=1)
    mcp_read_only: bool = False
    mcp_sessions: bool = False
    ui_secret: SecretStr | None = None
    ui_session_s: float = Field(default=12 * 3600.0, gt=0, le=30 * 24 * 3600.0)
    metrics: bool = True
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"

    @field_validator("rag_weaviate_urls", "allowed_hosts", "webhook_allowed_urls", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        """``KG_RAG_WEAVIATE_URLS``, ``KG_ALLOWED_HOSTS``: a JSON list, or values separated by commas."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _weaviate_needs_a_url(self) -> Settings:
        if self.index == "weaviate" and not (self.weaviate_url or "").strip():
            raise ValueError("KG_INDEX=weaviate needs KG_WEAVIATE_URL (e.g. http://localhost:8080)")
        return self

    @model_validator(mode="after")
    def _auth_needs_a_pepper(self) -> Settings:
        if self.auth and not (self.key_pepper and self.key_pepper.get_secret_value().strip()):
            raise ValueError("KG_AUTH=true needs KG_KEY_PEPPER (a long random secret, e.g. from "
                             "python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        return self

    def protected(self) -> tuple[str, ...]:
        """Return the protected branch globs of :attr:`protected_branches`."""
        return tuple(b.strip() for b in self.protected_branches.split(",") if b.strip())

    def resolved_database_url(self) -> str:
        """Return the database URL, defaulting to a SQLite file in :attr:`data_dir`."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'kg.sqlite3').resolve()}"
