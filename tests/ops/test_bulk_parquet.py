"""The columnar import and export (``kg.ops.bulk_parquet``), on both databases: a branch exported
as kg-parquet imports to the same content as its NDJSON export (the two exports of the copy equal
the original's, byte for byte), chunks keep their vectors exactly, every bad file or row is
refused with its row and nothing written, and the CLI speaks both formats."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import func, select

from kg.context import OPERATOR
from kg.errors import InvalidInput
from kg.ops import bulk, bulk_parquet
from kg.store.models import Chunk, NodeVersion, Repository
from tests.ops.test_bulk import HEADER, KEY_A, _body, _build, _export, _reads

PARQUET_HEADER = {**HEADER, "format": "kg-parquet"}


@pytest.mark.parametrize("branch", ["main", "agent/session-1"])
@pytest.mark.parametrize("with_chunks", [False, True])
def test_a_parquet_round_trip_imports_what_the_ndjson_export_holds(services, tmp_path, branch, with_chunks):
    _build(services)
    out = tmp_path / "acme.parquet"
    header = bulk_parquet.export_parquet(services, OPERATOR, "acme", branch, out=out, with_chunks=with_chunks)
    assert header.format == "kg-parquet" and header.branch == branch
    lines = _export(services, "acme", branch, with_chunks=with_chunks)
    table = pq.read_table(out)
    assert json.loads(table.schema.metadata[b"kg-header"]) == {**json.loads(lines[0]), "format": "kg-parquet"}
    assert table.column("record").to_pylist() == [json.loads(line)["record"] for line in lines[1:]]
    report = bulk_parquet.import_parquet(services, OPERATOR, "copy", out)
    assert report.created_repository and len(report.revisions) == 1
    assert report.chunks == (header.counts.chunks if header.counts else -1)
    copied = _export(services, "copy", "main", with_chunks=with_chunks)
    (old_header, old_body), (new_header, new_body) = _body(lines), _body(copied)
    assert new_body == old_body  # vectors too: their base64 is the same float32 bytes
    assert new_header == {**old_header, "branch": "main"}
    assert _reads(services, "copy") == _reads(services, "acme", branch)
    with services.db.read() as s:
        log = s.scalars(select(NodeVersion.id)).all()
    assert log


def _write(path: Path, columns: dict[str, Any], *, header: dict[str, Any] | None = PARQUET_HEADER,
           schema: pa.Schema | None = None) -> Path:
    """A Parquet file of these columns (pyarrow infers their types unless ``schema``)."""
    table = pa.table(columns, schema=schema)
    if header is not None:
        table = table.replace_schema_metadata({b"kg-header": json.dumps(header).encode()})
    pq.write_table(table, path)
    return path


def _nodes(*paths: str, **extra: list[Any]) -> dict[str, Any]:
    return {"record": ["node"] * len(paths), "workspace": ["w"] * len(paths), "path": list(paths), **extra}


VECTOR = pa.list_(pa.float32())


def _with_chunk(vector: list[float] | None = None, **extra: Any) -> dict[str, Any]:
    """A node ``/a`` titled A and its one chunk (fake:hash-64's dimension)."""
    row = {"content_key": KEY_A, "chunk_index": 0, "field": "title", "text": "A", "char_start": 0, "char_end": 1,
           "model": "fake:hash-64", "dim": 64, "vector": [1.0] * 64 if vector is None else vector, **extra}
    columns: dict[str, Any] = {"record": pa.array(["node", "chunk"]), "workspace": pa.array(["w", None]),
                               "path": pa.array(["/a", None]),
                               "properties": pa.array(['{"title": "A"}', None])}
    for name, value in row.items():
        kind = VECTOR if name == "vector" else None
        columns[name] = pa.array([None, value], type=kind)
    return columns


BAD_ROWS: dict[str, tuple[dict[str, Any], int, str]] = {
    "unknown record type": ({"record": ["node", "edge"], "workspace": ["w", "w"], "path": ["/a", "/b"]}, 2,
                            "unknown record type 'edge'"),
    "no record type": ({"record": ["node", None], "workspace": ["w", "w"], "path": ["/a", "/b"]}, 2,
                       "needs a 'record' field"),
    "a field of another record": ({**_nodes("/a", "/b"), "to": [None, "w:/a"]}, 2,
                                  "node record has an unknown field 'to'"),
    "missing path": ({"record": ["node", "node"], "workspace": ["w", "w"], "path": ["/a", None]}, 2,
                     "needs the field 'path'"),
    "bad path": (_nodes("/a", "/a//b"), 2, "empty segment"),
    "duplicate path": (_nodes("/a", "/b", "/a"), 3, "named twice (first on row 1)"),
    "workspace not in the header": ({**_nodes("/a"), "workspace": ["elsewhere"]}, 1,
                                    "not one of the header's workspaces"),
    "NUL in a path": (_nodes("/a", "/b\u0000"), 2, "NUL character"),
    "NUL in properties": ({**_nodes("/a", "/b"), "properties": ['{}', '{"x": "a\\u0000b"}']}, 2, "NUL character"),
    "properties not JSON": ({**_nodes("/a", "/b"), "properties": ['{}', '{"x": ']}, 2, "not JSON"),
    "properties not an object": ({**_nodes("/a"), "properties": ["[1, 2]"]}, 1, "must be a JSON object"),
    "NaN in properties": ({**_nodes("/a"), "properties": ['{"x": NaN}']}, 1, "not JSON"),
    "infinite order": ({**_nodes("/a", "/b"), "order": [1.0, float("inf")]}, 2, "'order' must be a finite"),
    "bad time": ({**_nodes("/a"), "created_at": ["yesterday"]}, 1, "not an ISO 8601 time"),
    "parent missing": (_nodes("/a", "/b/c"), 2, "parent w:/b"),
    "relation endpoint missing": ({**_nodes("/a", "/b"), "record": ["node", "relation"], "path": ["/a", None],
                                   "workspace": ["w", None], "from": [None, "w:/a"], "to": [None, "w:/nowhere"],
                                   "type": [None, "cites"]}, 2, "relation to w:/nowhere"),
    "bad relation type": ({"record": ["node", "relation"], "workspace": ["w", None], "path": ["/a", None],
                           "from": [None, "w:/a"], "to": [None, "w:/a"], "type": [None, "has space"]}, 2,
                          "invalid relation type"),
    "wrong vector length": (_with_chunk([1.0] * 32), 2, "holds 32 values, but its dim is 64"),
    "NaN in a vector": (_with_chunk([1.0] * 63 + [float("nan")]), 2, "non-finite"),
    "null in a vector": (_with_chunk([1.0] * 63 + [None]), 2, "non-finite"),
    "all-zero vector": (_with_chunk([0.0] * 64), 2, "all zeros"),
    "bad content key": (_with_chunk(content_key="ABC"), 2, "64 lowercase hex digits"),
    "negative chunk index": (_with_chunk(chunk_index=-1), 2, "'chunk_index' must be an integer >= 0"),
    "end before start": (_with_chunk(char_start=3, char_end=1), 2, "char_end is before its char_start"),
    "chunk of another model": (_with_chunk(model="fake:other"), 2, "is not 'fake:hash-64'"),
    "chunk of no node": ({**_with_chunk(), "properties": pa.array(['{"title": "B"}', None])}, 2,
                         "the key of no node"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_a_bad_row_is_named_and_nothing_is_written(services, tmp_path, case):
    columns, row, words = BAD_ROWS[case]
    path = _write(tmp_path / "bad.parquet", columns)
    with pytest.raises(InvalidInput) as caught:
        bulk_parquet.import_parquet(services, OPERATOR, "fresh", path)
    assert caught.value.message.startswith(f"row {row}: "), caught.value.message
    assert words in caught.value.message, caught.value.message
    assert caught.value.details["row"] == row and "line" not in caught.value.details
    with services.db.read() as s:  # not even the repository
        assert s.scalar(select(Repository.id).where(Repository.name == "fresh")) is None
        assert s.scalar(select(NodeVersion.id)) is None


BAD_FILES: dict[str, tuple[Any, str]] = {
    "not Parquet": (b"PAR1 not really", "not a Parquet file"),
    "no header": ((_nodes("/a"), None, None), "holds no 'kg-header'"),
    "the NDJSON format's header": ((_nodes("/a"), HEADER, None), "this reader takes 'kg-parquet'"),
    "a header of an unknown version": ((_nodes("/a"), {**PARQUET_HEADER, "version": 2}, None), "version"),
    "an unknown column": (({**_nodes("/a"), "colour": ["red"]}, PARQUET_HEADER, None), "unknown column 'colour'"),
    "no record column": (({"workspace": ["w"], "path": ["/a"]}, PARQUET_HEADER, None), "needs the column 'record'"),
    "order as text": (({**_nodes("/a"), "order": ["1"]}, PARQUET_HEADER, None), "column 'order' is string"),
    "vector of integers": (({"record": ["chunk"], "vector": [[1, 2]]}, PARQUET_HEADER, None),
                           "column 'vector' is list<element: int64>"),
    "truncated": ((_nodes("/a", "/b"), {**PARQUET_HEADER, "counts": {"nodes": 3, "relations": 0, "chunks": 0}},
                   None), "row 2: the file ends with 2 nodes records where its header announces 3"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_file_is_refused_before_anything_is_written(services, tmp_path, case):
    spec, words = BAD_FILES[case]
    path = tmp_path / "bad.parquet"
    if isinstance(spec, bytes):
        path.write_bytes(spec)
    else:
        columns, header, schema = spec
        _write(path, columns, header=header, schema=schema)
    with pytest.raises(InvalidInput) as caught:
        bulk_parquet.import_parquet(services, OPERATOR, "fresh", path)
    assert words in caught.value.message, caught.value.message
    assert "\n" not in caught.value.message
    with services.db.read() as s:
        assert s.scalar(select(Repository.id).where(Repository.name == "fresh")) is None


def test_chunks_keep_their_vectors_exactly_and_a_float64_vector_is_stored_as_float32(services, tmp_path):
    rng = np.random.default_rng(7)
    vector = rng.standard_normal(64)
    columns = _with_chunk()
    columns["vector"] = pa.array([None, vector.tolist()], type=pa.list_(pa.float64()))
    report = bulk_parquet.import_parquet(services, OPERATOR, "fresh", _write(tmp_path / "v.parquet", columns))
    assert (report.nodes, report.chunks, report.queued) == (1, 1, 0)
    with services.db.read() as s:
        stored = s.scalar(select(Chunk.embedding))
        assert s.scalar(select(func.count()).select_from(Chunk)) == 1
    assert np.frombuffer(stored, dtype=np.float32).tolist() == vector.astype(np.float32).tolist()
    line = next(json.loads(x) for x in _export(services, "fresh", with_chunks=True) if '"chunk"' in x)
    assert base64.b64decode(line["vector"]) == vector.astype("<f4").tobytes()


def test_the_same_records_read_alike_from_either_format(tmp_path):
    """parse_ndjson and read_parquet give the same columns for the same records (rows for lines)."""
    records = [HEADER, {"record": "node", "workspace": "w", "path": "/a", "properties": {"title": "A", "n": 2**70}},
               {"record": "node", "workspace": "w", "path": "/a/b", "node_type": "kb:Doc", "order": 2,
                "created_at": "2024-01-02T03:04:05+00:00", "properties": {"kg": {"kg:ref": "/a"}}},
               {"record": "relation", "from": "w:/a", "to": "w:/a/b", "type": "has", "weight": 0.5,
                "valid_from": "2020-01-01T00:00:00Z", "properties": {"since": 1}},
               {"record": "chunk", "content_key": KEY_A, "chunk_index": 0, "field": "title", "text": "A",
                "char_start": 0, "char_end": 1, "model": "fake:hash-64", "dim": 64,
                "vector": base64.b64encode(np.arange(1, 65, dtype="<f4").tobytes()).decode()}]
    lines = [json.dumps(r) for r in records]
    sink = bulk_parquet.ParquetSink(tmp_path / "r.parquet")
    for line in lines:
        sink.write(line + "\n")
    sink.close()
    a, b = bulk.parse_ndjson(lines), bulk_parquet.read_parquet(tmp_path / "r.parquet")
    assert b.header.format == "kg-parquet" and a.header.model_dump(exclude={"format"}) == \
        b.header.model_dump(exclude={"format"})
    for part in ("nodes", "relations", "chunks"):
        left, right = vars(getattr(a, part)), vars(getattr(b, part))
        assert {k: v for k, v in left.items() if k != "line"} == {k: v for k, v in right.items() if k != "line"}
    assert b.nodes.properties[0]["n"] == 2**70  # an integer past 64 bits, exact
    assert b.nodes.line == [1, 2] and b.relations.line == [3] and b.chunks.line == [4]


def test_without_pyarrow_the_columnar_import_names_the_extra(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    with pytest.raises(InvalidInput, match=r"^reading Parquet needs pyarrow: pip install 'kg\[parquet\]'$"):
        bulk_parquet.read_parquet(tmp_path / "x.parquet")


def test_without_pyarrow_the_columnar_export_says_writing_needs_it(monkeypatch, services, tmp_path):
    import sys

    _build(services)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(InvalidInput, match=r"^writing Parquet needs pyarrow: pip install 'kg\[parquet\]'$"):
        bulk_parquet.export_parquet(services, OPERATOR, "acme", out=tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()


def test_times_as_timestamp_columns_are_stored_as_their_iso_texts_would_be(services, tmp_path):
    """A timestamp column (nanoseconds with a zone, microseconds without: read as UTC, as an ISO
    text without a zone is) stores the same times as the ISO texts of an NDJSON record."""
    from datetime import UTC, datetime

    created = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    updated = datetime(2025, 6, 7, 8, 9, 10)
    columns = {**_nodes("/a"), "created_at": pa.array([created], type=pa.timestamp("ns", tz="UTC")),
               "updated_at": pa.array([updated], type=pa.timestamp("us"))}
    bulk_parquet.import_parquet(services, OPERATOR, "columns", _write(tmp_path / "t.parquet", columns))
    lines = [json.dumps(HEADER), json.dumps({"record": "node", "workspace": "w", "path": "/a", "properties": {},
                                             "created_at": created.isoformat(), "updated_at": updated.isoformat()})]
    bulk.import_ndjson(services, OPERATOR, "lines", lines)
    by_columns, by_lines = (json.loads(_export(services, repo)[1]) for repo in ("columns", "lines"))
    assert by_columns == by_lines
    assert by_columns["created_at"] == "2024-01-02T03:04:05.123456+00:00"
    assert by_columns["updated_at"] == "2025-06-07T08:09:10+00:00"


def test_each_reader_refuses_the_other_formats_header():
    with pytest.raises(InvalidInput) as caught:
        bulk.parse_ndjson([json.dumps(PARQUET_HEADER)])
    assert caught.value.message == "line 1: the header says 'kg-parquet': this reader takes 'kg-ndjson' files"
