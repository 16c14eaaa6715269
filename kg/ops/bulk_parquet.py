"""The columnar import (``kg import parquet``): the records of a ``kg-ndjson`` file as the columns
of one Parquet file, read and checked a row group at a time.

The format (``kg-parquet``, version 1):

- the header, as the NDJSON header record with ``"format": "kg-parquet"``, is the JSON text of
  the file's key-value metadata ``kg-header``;
- a row is a record, in file order; the string column ``record`` says which (``node``,
  ``relation`` or ``chunk``); the other columns are the records' fields (:mod:`kg.ops.bulk`),
  each present or not, null where a record does not have it: ``workspace``, ``path``,
  ``node_type``, ``properties``, ``order``, ``created_at``, ``updated_at``; ``from``, ``to``,
  ``type``, ``weight``, ``valid_from``, ``valid_to``, ``invalidated_by``; ``content_key``,
  ``chunk_index``, ``field``, ``text``, ``char_start``, ``char_end``, ``model``, ``dim``,
  ``vector``;
- ``properties`` is a string: the JSON text of an object (as in a record); times are timestamps
  (with or without a zone; without, as an ISO text without one is read) or ISO 8601 strings;
  ``vector`` a list of float32 (or float64, stored as float32) values, ``dim`` of them.

What differs from the NDJSON reader is how, not what: a chunk's fields are checked a column at a
time (pyarrow's compute kernels: the key pattern, the counts, the lengths of the vectors, then the
vectors as one float32 matrix: finite, not all zero) and bound as the store's columns with no
base64 and no object per chunk; a node's and a relation's fields go through the same checks as a
line's (:class:`kg.ops.bulk._Reader`), their properties parsed from their JSON text. Errors name
the row (``"row N: ..."``, ``details["row"]``, counted from 1) and nothing is written.

pyarrow is the ``kg[parquet]`` extra: without it :func:`read_parquet` says so.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson
from pydantic import ValidationError

from kg import collector
from kg.context import Actor, Resources
from kg.errors import InvalidInput
from kg.ops import bulk as ndjson
from kg.store.repos import MAIN
from kg.text.storable import check_json
from kg.types.bulk import DEFAULT_NODE_TYPE, PARQUET_FORMAT, HeaderRecord, NdjsonImport

__all__ = ["HEADER_KEY", "PARQUET_FORMAT", "ParquetSink", "export_parquet", "import_parquet", "read_parquet"]

#: The key of the file's metadata that holds the header's JSON text.
HEADER_KEY = b"kg-header"
#: Rows read and checked at a time.
BATCH_ROWS = 16_384

_NODE = ("workspace", "path", "node_type", "properties", "order", "created_at", "updated_at")
_RELATION = ("from", "to", "type", "weight", "properties", "created_at", "valid_from", "valid_to",
             "invalidated_by")
_CHUNK = ("content_key", "chunk_index", "field", "text", "char_start", "char_end", "model", "dim", "vector")
_FIELDS = {"node": _NODE, "relation": _RELATION, "chunk": _CHUNK}
_COLUMNS = frozenset(("record", *_NODE, *_RELATION, *_CHUNK))
_REQUIRED = {"node": ("workspace", "path"), "relation": ("from", "to", "type"), "chunk": _CHUNK}
_STRINGS = frozenset(("record", "workspace", "path", "node_type", "properties", "from", "to", "type",
                      "invalidated_by", "content_key", "field", "text", "model"))
_COUNTS = ("chunk_index", "char_start", "char_end", "dim")
_TIMES = frozenset(("created_at", "updated_at", "valid_from", "valid_to"))


def _pyarrow(doing: str = "reading") -> tuple[Any, Any, Any]:
    """pyarrow, its compute module and its Parquet module; without it, an error naming what
    needed it (``doing``: ``reading`` or ``writing``) and the extra."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise InvalidInput(f"{doing} Parquet needs pyarrow: pip install 'kg[parquet]'") from exc
    return pa, pc, pq


class _Rows:
    """Errors named by row (the NDJSON reader names lines: its messages are renamed here)."""

    @staticmethod
    def bad(row: int, why: str, **details: Any) -> InvalidInput:
        return InvalidInput(f"row {row}: {why}", details={"row": row, **details})

    @staticmethod
    def renamed(exc: InvalidInput) -> InvalidInput:
        """An NDJSON reader's ``line N: ...`` error as ``row N: ...``."""
        details = dict(exc.details or {})
        if "line" not in details:
            return exc
        row = details.pop("line")
        message = re.sub(r"^line \d+: ", f"row {row}: ", exc.message)
        message = re.sub(r"\(first on line (\d+)\)", r"(first on row \1)", message)
        return InvalidInput(message, details={"row": row, **details})


def _schema_checked(schema: Any, pa: Any) -> None:
    """Refuse unknown columns and columns of the wrong type, before any row is read."""
    names = list(schema.names)
    unknown = [name for name in names if name not in _COLUMNS]
    if unknown:
        raise InvalidInput(f"unknown column {unknown[0]!r} (a kg-parquet file's columns are the records' fields)",
                           details={"column": unknown[0]})
    if "record" not in names:
        raise InvalidInput("a kg-parquet file needs the column 'record' (node, relation or chunk)")
    types = pa.types
    for name in names:
        kind = schema.field(name).type
        if types.is_null(kind):
            continue  # a column of nulls only
        if name in _STRINGS:
            ok = types.is_string(kind) or types.is_large_string(kind)
        elif name in _COUNTS:
            ok = types.is_integer(kind)
        elif name in ("order", "weight"):
            ok = types.is_integer(kind) or types.is_floating(kind)
        elif name in _TIMES:
            ok = types.is_timestamp(kind) or types.is_string(kind) or types.is_large_string(kind)
        else:  # vector
            ok = ((types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind))
                  and (types.is_float32(kind.value_type) or types.is_float64(kind.value_type)))
        if not ok:
            raise InvalidInput(f"column {name!r} is {kind}, not what a kg-parquet file holds there "
                               "(docs/guides/export-import.md)", details={"column": name})


def _header(metadata: dict[bytes, bytes] | None, reader: Any) -> None:
    raw = (metadata or {}).get(HEADER_KEY)
    if raw is None:
        raise InvalidInput(f"the file's metadata holds no {HEADER_KEY.decode()!r}: not a kg-parquet file")
    try:
        header = HeaderRecord.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"the header in {HEADER_KEY.decode()!r}: {where + ': ' if where else ''}{first['msg']}") \
            from exc
    try:
        reader._header(0, header, format_name=PARQUET_FORMAT)
    except InvalidInput as exc:
        raise InvalidInput(f"the header: {exc.message.removeprefix('line 0: ')}") from exc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _properties(row: int, text: str | None, what: str) -> dict[str, Any]:
    """A record's properties from their JSON text (null: none): an object, integers exact, no
    NaN or infinity, no text the store cannot hold, nested as deep as a request may be."""
    if text is None:
        return {}
    try:
        value = orjson.loads(text)
        if type(value) is dict:
            ndjson._object(value)  # a whole float past 2**63 may have been an integer: read exactly
    except (orjson.JSONDecodeError, ndjson._Slow):
        try:
            value = json.loads(text, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise _Rows.bad(row, f"{what} properties are not JSON: {exc}") from exc
    if type(value) is not dict:
        raise _Rows.bad(row, f"{what} properties must be a JSON object")
    if "\\u" in text:  # text the store cannot hold (a NUL, a lone surrogate) can only come as a \u escape
        try:
            check_json(value, f"the {what}'s properties")
        except InvalidInput as exc:
            raise _Rows.bad(row, exc.message) from exc
    return value


def _when(reader: Any, row: int, value: Any, name: str, what: str) -> Any:
    if value is None or not isinstance(value, str):
        return value  # a timestamp column's value (a datetime), or null
    try:
        return reader._when(value)
    except ndjson._Slow as exc:
        raise _Rows.bad(row, f"{what} record field {name!r}: not an ISO 8601 time: {value!r}") from exc


def _floats(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    if not np.isfinite(number):
        raise ValueError(number)
    return number


def _nodes(reader: Any, rows: list[int], cols: dict[str, list[Any]]) -> None:
    for i, row in enumerate(rows):
        text = cols["properties"][i]
        try:
            order = _floats(cols["order"][i])
        except ValueError as exc:
            raise _Rows.bad(row, "node record field 'order' must be a finite number") from exc
        node_type = cols["node_type"][i]
        fields = {"workspace": cols["workspace"][i], "path": cols["path"][i],
                  "node_type": DEFAULT_NODE_TYPE if node_type is None else node_type,
                  "properties": _properties(row, text, "node"), "order": order,
                  "created_at": _when(reader, row, cols["created_at"][i], "created_at", "node"),
                  "updated_at": _when(reader, row, cols["updated_at"][i], "updated_at", "node")}
        size = None if text is None else ndjson._JSON_GROWTH * len(text.encode())
        try:
            reader._node(row, fields, size=size, refs=text is not None and "kg:ref" in text)
        except InvalidInput as exc:
            raise _Rows.renamed(exc) from exc


def _relations(reader: Any, rows: list[int], cols: dict[str, list[Any]]) -> None:
    for i, row in enumerate(rows):
        by = cols["invalidated_by"][i]
        if by is not None and not 1 <= len(by) <= 2000:
            raise _Rows.bad(row, "relation record field 'invalidated_by' must be 1 to 2,000 characters")
        try:
            weight = _floats(cols["weight"][i])
        except ValueError as exc:
            raise _Rows.bad(row, "relation record field 'weight' must be a finite number") from exc
        fields = {"source": cols["from"][i], "to": cols["to"][i], "type": cols["type"][i], "weight": weight,
                  "properties": _properties(row, cols["properties"][i], "relation"),
                  "created_at": _when(reader, row, cols["created_at"][i], "created_at", "relation"),
                  "valid_from": _when(reader, row, cols["valid_from"][i], "valid_from", "relation"),
                  "valid_to": _when(reader, row, cols["valid_to"][i], "valid_to", "relation"),
                  "invalidated_by": by}
        try:
            reader._relation(row, fields, plain=True)
        except InvalidInput as exc:
            raise _Rows.renamed(exc) from exc


def _first(mask: Any, rows: np.ndarray) -> int:
    """The row of the first true value of a boolean array."""
    return int(rows[int(np.flatnonzero(np.asarray(mask))[0])])


def _chunks(reader: Any, rows: np.ndarray, table: Any, pa: Any, pc: Any) -> None:
    """Chunk rows checked a column at a time and appended to the file's chunk columns."""
    n = len(rows)
    for name in ("content_key", "chunk_index", "char_start", "char_end", "dim"):
        column = table.column(name)
        if name == "content_key":
            bad = pc.invert(pc.fill_null(pc.match_substring_regex(column, r"^[0-9a-f]{64}$"), False))
            why = "chunk record field 'content_key' must be 64 lowercase hex digits"
        else:
            low = 1 if name == "dim" else 0
            bad = pc.fill_null(pc.less(column, low), True)
            why = f"chunk record field {name!r} must be an integer >= {low}"
        if pc.any(bad).as_py():
            raise _Rows.bad(_first(bad, rows), why)
    starts = table.column("char_start").to_numpy()
    ends = table.column("char_end").to_numpy()
    if (ends < starts).any():
        raise _Rows.bad(_first(ends < starts, rows), "chunk char_end is before its char_start")
    vectors = table.column("vector")
    lengths = pc.fill_null(pc.list_value_length(vectors), -1).to_numpy()
    dims = table.column("dim").to_numpy()
    if (lengths != dims).any():
        at = int(np.flatnonzero(lengths != dims)[0])
        held = "no vector" if lengths[at] < 0 else f"{lengths[at]} values"
        raise _Rows.bad(int(rows[at]), f"chunk vector holds {held}, but its dim is {dims[at]}", dim=int(dims[at]))
    values = pc.list_flatten(vectors).to_numpy(zero_copy_only=False)  # a null value reads as NaN: refused
    if values.dtype != np.float32:
        values = values.astype(np.float32)
    key_column = table.column("content_key").to_pylist()
    index_column = table.column("chunk_index").to_pylist()
    texts = {name: table.column(name).to_pylist() for name in ("field", "text", "model")}
    embeddings: list[bytes] = []
    if n and (dims == dims[0]).all():  # one dimension: the vectors are one matrix
        width = int(dims[0])
        matrix = values.reshape(n, width)
        finite = np.isfinite(matrix).all(axis=1)
        ok = finite & matrix.any(axis=1)
        if not ok.all():
            at = int(np.flatnonzero(~ok)[0])
            raise _Rows.bad(int(rows[at]), "chunk vector is all zeros" if finite[at]
                            else "chunk vector has non-finite values (NaN or inf)")
        native = matrix.tobytes()
        embeddings = [native[i:i + 4 * width] for i in range(0, len(native), 4 * width)]
    else:
        offset = 0
        for i, dim in enumerate(dims.tolist()):
            vector = values[offset:offset + dim]
            offset += dim
            if not np.isfinite(vector).all():
                raise _Rows.bad(int(rows[i]), "chunk vector has non-finite values (NaN or inf)")
            if not vector.any():
                raise _Rows.bad(int(rows[i]), "chunk vector is all zeros")
            embeddings.append(vector.tobytes())
    seen = reader.chunks
    for i, key in enumerate(zip(key_column, index_column, strict=True)):
        first = seen.get(key)
        if first is not None:
            raise _Rows.bad(int(rows[i]), f"chunk {key[1]} of content key {key[0]} is named twice (first on row "
                                          f"{first})")
        seen[key] = int(rows[i])
    c = reader.bulk.chunks
    c.line.extend(rows.tolist())
    c.content_key.extend(key_column)
    c.chunk_index.extend(index_column)
    c.source_field.extend(texts["field"])
    c.text.extend(texts["text"])
    c.char_start.extend(starts.tolist())
    c.char_end.extend(ends.tolist())
    c.model.extend(texts["model"])
    c.dim.extend(dims.tolist())
    c.embedding.extend(embeddings)


def _batches(source: str | Path | BinaryIO, pq: Any) -> tuple[Any, Iterator[Any]]:
    try:
        parquet = pq.ParquetFile(source)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise InvalidInput(f"not a Parquet file: {exc}") from exc
    return parquet, parquet.iter_batches(batch_size=BATCH_ROWS)


def read_parquet(source: str | Path | BinaryIO) -> ndjson.BulkFile:
    """Read and check a ``kg-parquet`` file on its own (no database), a row group at a time.

    Parameters
    ----------
    source : str, Path or binary file
        The file (pyarrow reads it: a path, or a seekable binary file).

    Returns
    -------
    kg.ops.bulk.BulkFile
        The records as :func:`kg.ops.bulk.parse_ndjson` gives them (``line`` is the row).

    Raises
    ------
    kg.errors.InvalidInput
        Not a Parquet file or no ``kg-header``; an unknown column or one of the wrong type;
        ``"row N: ..."`` (``details["row"]``) for the first bad record, as the NDJSON reader
        refuses a line: an unknown record type, a missing field, a field of another record's,
        a bad path, type, properties, reference, relation type or weight, a record named twice,
        a vector not of ``dim`` finite float32 values; other counts than the header announces.

    Notes
    -----
    O(rows): chunk fields are checked by pyarrow's kernels and numpy over whole columns, node
    and relation fields a row at a time (their properties are JSON text to parse).
    """
    pa, pc, pq = _pyarrow()
    parquet, batches = _batches(source, pq)
    _schema_checked(parquet.schema_arrow, pa)
    reader = ndjson._Reader()
    _header(parquet.schema_arrow.metadata, reader)
    start = 1
    try:
        for batch in batches:
            _batch(reader, batch, start, pa, pc)
            start += batch.num_rows
    except (OSError, pa.ArrowException, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read the Parquet file: {exc}") from exc
    try:
        return reader.finish(start - 1)
    except InvalidInput as exc:
        raise _Rows.renamed(exc) from exc


def _batch(reader: Any, batch: Any, start: int, pa: Any, pc: Any) -> None:
    """One batch of rows (``start`` the first's number), kind by kind in file order.

    The rows of each kind keep their order; kinds are checked node, relation, chunk: an error
    names a bad row of the batch, the first of its kind (a file's first bad row when its records
    are grouped by kind, as an export writes them).
    """
    names = set(batch.schema.names)
    kinds = batch.column("record")
    known = pc.is_in(kinds, value_set=pa.array(list(_FIELDS)))
    if not pc.all(pc.fill_null(known, False)).as_py():
        at = int(np.flatnonzero(~np.asarray(pc.fill_null(known, False)))[0])
        value = kinds[at].as_py()
        raise _Rows.bad(start + at, "a record needs a 'record' field: 'node', 'relation' or 'chunk'" if value is None
                        else f"unknown record type {value!r} (expected 'node', 'relation' or 'chunk')")
    numbers = np.arange(start, start + batch.num_rows)
    for name in sorted(names & _STRINGS - {"properties", "record"}):
        column = batch.column(name)
        if pa.types.is_null(column.type):
            continue
        nul = pc.fill_null(pc.match_substring(column, "\x00"), False)
        if pc.any(nul).as_py():
            raise _Rows.bad(int(numbers[int(np.flatnonzero(np.asarray(nul))[0])]),
                            f"field {name!r} holds a NUL character, which the store cannot hold")
    for kind, fields in _FIELDS.items():
        mask = pc.equal(kinds, kind)
        if not pc.any(mask).as_py():
            continue
        table = batch.filter(mask)
        rows = numbers[np.asarray(mask)]
        for name in names - {"record"} - set(fields):
            column = table.column(name)
            if column.null_count != len(column):
                at = int(np.flatnonzero(~np.asarray(column.is_null()))[0])
                raise _Rows.bad(int(rows[at]), f"{kind} record has an unknown field {name!r}")
        for name in _REQUIRED[kind]:
            column = table.column(name) if name in names else None
            if column is None or column.null_count:
                at = 0 if column is None else int(np.flatnonzero(np.asarray(column.is_null()))[0])
                raise _Rows.bad(int(rows[at]), f"{kind} record needs the field {name!r}")
        if kind == "chunk":
            _chunks(reader, rows, table, pa, pc)
            continue
        cols = {name: _values(table.column(name), pa, pc) if name in names else [None] * len(rows)
                for name in fields}
        if kind == "node":
            _nodes(reader, rows.tolist(), cols)
        else:
            _relations(reader, rows.tolist(), cols)


def _values(column: Any, pa: Any, pc: Any) -> list[Any]:
    """A column's values as Python objects; a timestamp column's as ``datetime`` in microseconds
    (pyarrow gives a nanosecond one as pandas' ``Timestamp``; the store keeps microseconds)."""
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.unit == "ns":
        column = pc.cast(column, pa.timestamp("us", tz=kind.tz), safe=False)
    values: list[Any] = column.to_pylist()
    return values


def import_parquet(services: Resources, caller: Actor, repo: str, source: str | Path | BinaryIO, *,
                   branch: str = MAIN, batch_size: int | None = None, create: bool = True,
                   message: str | None = None) -> NdjsonImport:
    """Import a ``kg-parquet`` file into a branch: :func:`read_parquet`, then what
    :func:`kg.ops.bulk.import_ndjson` does with the records (the same access, rows, revisions,
    index placement and report).

    Raises
    ------
    kg.errors.InvalidInput
        As :func:`read_parquet` and :func:`kg.ops.bulk.import_ndjson` (``row N`` for ``line N``).
    kg.errors.NotFound
        Repository or workspace missing without ``create``.
    """
    ndjson.check_batch_size(batch_size)
    with collector.held():
        records = read_parquet(source)
        try:
            return ndjson.import_records(services, caller, repo, records, branch=branch, batch_size=batch_size,
                                         create=create, message=message)
        except InvalidInput as exc:
            raise _Rows.renamed(exc) from exc


# -- writing --------------------------------------------------------------------------------




class ParquetSink:
    """Writes ``kg-ndjson`` records, a line at a time (``write``), as a ``kg-parquet`` file.

    The header line becomes the file's ``kg-header`` metadata (its format renamed); every
    other record a row, :data:`BATCH_ROWS` to a row group: properties as their JSON text,
    times as the ISO texts the records hold, vectors as float32 lists.

    Parameters
    ----------
    out : str or Path
        The file written (replaced).
    """

    def __init__(self, out: str | Path) -> None:
        self._out = out
        self._writer: Any = None
        self._schema: Any = None
        self._rows: list[dict[str, Any]] = []
        self._partial = ""

    def write(self, text: str) -> int:
        """Take text holding whole or partial lines (as ``IO[str].write``)."""
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line.strip():
                self._record(orjson.loads(line))
        return len(text)

    def _record(self, record: dict[str, Any]) -> None:
        if record.get("record") == "header":
            pa, _, pq = _pyarrow("writing")
            header = {**record, "format": PARQUET_FORMAT}
            fields = [pa.field("record", pa.string())]
            for name in sorted(_COLUMNS - {"record"}, key=_column_order):
                fields.append(pa.field(name, _column_type(name, pa)))
            self._schema = pa.schema(fields, metadata={HEADER_KEY: json.dumps(header).encode()})
            self._writer = pq.ParquetWriter(self._out, self._schema)
            return
        if self._writer is None:
            raise InvalidInput("the first record must be the header")
        self._rows.append(record)
        if len(self._rows) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        rows, self._rows = self._rows, []
        if not rows:
            return
        pa, _, _ = _pyarrow("writing")
        columns = []
        for field in self._schema:
            name = field.name
            if name == "vector":
                columns.append(_vectors(rows, pa))
            elif name == "properties":
                columns.append(pa.array([_json_text(r["properties"]) if "properties" in r else None for r in rows],
                                        type=field.type))
            else:
                columns.append(pa.array([r.get(name) for r in rows], type=field.type))
        self._writer.write_table(pa.Table.from_arrays(columns, schema=self._schema))

    def close(self) -> None:
        """Write what is left and the file's footer.

        Raises
        ------
        kg.errors.InvalidInput
            No header record was written.
        """
        if self._partial.strip():
            self._record(orjson.loads(self._partial))
            self._partial = ""
        if self._writer is None:
            raise InvalidInput("nothing to write: no header record")
        self._flush()
        self._writer.close()


def _column_order(name: str) -> int:
    order = (*_NODE, *_RELATION, *_CHUNK)
    return order.index(name)


def _column_type(name: str, pa: Any) -> Any:
    if name in _COUNTS:
        return pa.int64()
    if name in ("order", "weight"):
        return pa.float64()
    if name == "vector":
        return pa.list_(pa.float32())
    return pa.string()


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # an integer past 64 bits
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _vectors(rows: list[dict[str, Any]], pa: Any) -> Any:
    """The rows' base64 vectors as one list<float32> column (null where a row has none)."""
    values: list[np.ndarray] = []
    offsets = [0]
    nulls = []
    for r in rows:
        vector = r.get("vector")
        if vector is None:
            nulls.append(True)
            offsets.append(offsets[-1])
            continue
        floats = np.frombuffer(base64.b64decode(vector), dtype="<f4")
        values.append(floats)
        nulls.append(False)
        offsets.append(offsets[-1] + len(floats))
    flat = np.concatenate(values).astype(np.float32) if values else np.empty(0, dtype=np.float32)
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(flat),
                                    mask=pa.array(nulls, type=pa.bool_()))


def export_parquet(services: Resources, caller: Actor, repo: str, branch: str = MAIN, *, out: str | Path,
                   at_revision: int | None = None, with_chunks: bool = False) -> HeaderRecord:
    """A branch's content as a ``kg-parquet`` file: the records :func:`kg.ops.bulk.export_ndjson`
    writes, as columns (the same access, order and counts); the header written (its format
    ``kg-parquet``). :func:`import_parquet` reads it back."""
    _pyarrow("writing")
    sink = ParquetSink(out)
    header = ndjson.export_ndjson(services, caller, repo, branch, out=sink, at_revision=at_revision,  # type: ignore[arg-type]
                                  with_chunks=with_chunks)
    sink.close()
    return header.model_copy(update={"format": PARQUET_FORMAT})
