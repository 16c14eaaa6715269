"""What every part of the contract shares: the error shape, the bases of request and result
models, JSON numbers and timestamps, and the documented patterns of names, branches and addresses.

Request models (:class:`Strict`) refuse unknown fields. Result models (:class:`Schema`) describe
exactly what a use case answers: unknown keys are refused and nothing is coerced (``1`` stays
``1``); a key some answers leave out is declared with :func:`absent`, and the HTTP layer
serialises with ``exclude_unset`` so that left out stays left out and ``null`` stays ``null``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, WithJsonSchema
from pydantic.config import JsonDict
from typing_extensions import TypeAliasType

from kg.store.numbers import integral
from kg.store.paths import (
    ADDRESS_PATTERN,
    BRANCH_PATTERN,
    NAME_PATTERN,
    NON_BLANK_PATTERN,
    TEXT_PATTERN,
)
from kg.store.relations import RELATION_TYPE_PATTERN

# Documented patterns (json_schema_extra): the library checks them and says why (kg.store.paths).
NAME_RULE: JsonDict = {"pattern": NAME_PATTERN, "maxLength": 128}
BRANCH_RULE: JsonDict = {"pattern": BRANCH_PATTERN, "maxLength": 255}
ADDRESS_RULE: JsonDict = {"pattern": ADDRESS_PATTERN, "maxLength": 1300}
TEXT_RULE: JsonDict = {"pattern": TEXT_PATTERN}
TYPE_RULE: JsonDict = {"pattern": RELATION_TYPE_PATTERN, "maxLength": 255}
#: A node address 'workspace:/path' and a relation type, items of request lists.
Address = Annotated[str, Field(json_schema_extra=ADDRESS_RULE)]
RelationType = Annotated[str, Field(json_schema_extra=TYPE_RULE)]
#: A revision number (the bounds before :func:`~kg.store.numbers.integral`, so that the document
#: states them as ``minimum`` / ``maximum`` on an optional field too).
RevisionNumber = Annotated[int, Field(ge=0, le=2_147_483_647), BeforeValidator(integral)]


class ErrorInfo(BaseModel):
    """What went wrong: a stable machine-readable ``code``, a human ``message``, and ``details``."""

    model_config = ConfigDict(extra="forbid")
    code: str = Field(description="Stable error code: malformed, invalid_input, not_found, conflict, ...")
    message: str = Field(description="What went wrong, for a human.")
    details: dict[str, Any] = Field(description="Structured details (may be empty).")


class ErrorBody(BaseModel):
    """The one error shape of every 4xx/5xx answer (docs/reference/errors.md)."""

    model_config = ConfigDict(extra="forbid")
    error: ErrorInfo


class Strict(BaseModel):
    """Refuses unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True)


#: A name or glob of a grant, or a key's name: 1 to 255 characters, not only blanks (kg.access.grant),
#: no NUL (:data:`~kg.store.paths.TEXT_PATTERN`).
GLOB_RULE: JsonDict = {"pattern": NON_BLANK_PATTERN, "maxLength": 255}
Glob = Annotated[str, Field(min_length=1, max_length=255, json_schema_extra=GLOB_RULE)]


class WriteMeta(Strict):
    """Optional on every write: why, by whom, and the revision the writer's view was at."""

    message: str | None = Field(default=None, max_length=10_000, json_schema_extra=TEXT_RULE,
                                description="Why: kept in the revision log.")
    actor: str | None = Field(default=None, max_length=255, json_schema_extra=TEXT_RULE)





#: A JSON number kept as it came: an int stays an int, a float a float (a ``float`` field would
#: turn ``1`` into ``1.0``, and a node's ``order`` or a relation's ``weight`` may be either).
Number = Annotated[int | float, WithJsonSchema({"type": "number"})]
#: An ISO 8601 timestamp, as ``datetime.isoformat`` writes it.
Timestamp = Annotated[str, Field(description="ISO 8601 timestamp.")]
#: Node properties, relation properties and other user JSON: any object.
JSONObject = dict[str, Any]

#: A string the store can hold (no NUL): :data:`~kg.store.paths.TEXT_PATTERN`.
StorableText = Annotated[str, Field(pattern=TEXT_PATTERN)]


def _named_keys(schema: dict[str, Any]) -> None:
    """An object whose keys all match the pattern (``propertyNames``) and whose values all are
    the value schema (``additionalProperties``): pydantic writes ``patternProperties``, which
    lets a key that does not match through with any value."""
    patterns = schema.pop("patternProperties", None)
    if patterns:
        ((pattern, value),) = patterns.items()
        schema["propertyNames"] = {"pattern": pattern}
        schema["additionalProperties"] = value


#: JSON the store can hold, at any depth: no NUL in a key or a string (the request guard refuses
#: one, :func:`kg.text.storable.check_json`). For the document only (``json_schema_input_type`` of
#: :data:`StorableObject`): a recursive schema, ``#/components/schemas/StorableJSON``.
if TYPE_CHECKING:  # mypy reads no recursive TypeAliasType made by a call
    StorableJSON = Any
else:
    StorableJSON = TypeAliasType(
        "StorableJSON",
        Union[None, bool, int, float, StorableText, list["StorableJSON"],  # noqa: UP007
              Annotated[dict[StorableText, "StorableJSON"], Field(json_schema_extra=_named_keys)]],
    )


def _json_object(value: Any) -> dict[str, Any]:
    """A JSON object, as it came (its values are not copied nor coerced)."""
    if not isinstance(value, dict):
        raise ValueError("Input should be a valid dictionary")
    return value


def shaped(schema_type: Any) -> PlainValidator:
    """Validated as a JSON object, as it came (the use case checks it and says why it refuses),
    and documented as ``schema_type``: every object the document admits is one kg accepts."""
    return PlainValidator(_json_object, json_schema_input_type=schema_type)


#: A JSON object of user data (node properties, relation properties, a function's input):
#: validated as an object, documented as :data:`StorableJSON` at any depth.
StorableObject = Annotated[dict[str, Any], PlainValidator(
    _json_object, json_schema_input_type=Annotated[dict[StorableText, StorableJSON],
                                                   Field(json_schema_extra=_named_keys)])]


def _drop_default(schema: dict[str, Any]) -> None:
    """No ``"default": null`` in the document for a key that is left out rather than null."""
    schema.pop("default", None)


def absent(description: str, **kwargs: Any) -> Any:
    """A field that some answers leave out (and never answer as ``null`` unless typed so).

    Parameters
    ----------
    description : str
        When the key is present, for the OpenAPI document.
    **kwargs
        Further :func:`pydantic.Field` arguments (``alias``).

    Returns
    -------
    pydantic.fields.FieldInfo
        Not required, default None. The route serialises with ``exclude_unset``, so a key its
        dict did not hold is left out of the body again.
    """
    return Field(default=None, description=description, json_schema_extra=_drop_default, **kwargs)


class Schema(BaseModel):
    """Base of the response models: unknown keys refused, nothing coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)

    def as_json(self) -> dict[str, Any]:
        """The result as the HTTP API answers it, for the surfaces that are not HTTP (MCP tools,
        the CLI's JSON, the console, SQL rows).

        Returns
        -------
        dict
            JSON values under the fields' aliases (``from``), a key the use case left out
            (:func:`absent`) left out: ``model_dump(mode="json", by_alias=True, exclude_unset=True)``.
        """
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


