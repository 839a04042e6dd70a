"""Generated clients know the job options: the OpenAPI description types the ``options`` part of a submission by
the JobOptions schema (per-part encoding: JSON), with every field's type and bounds, and offers a JSON body."""

from __future__ import annotations

from typing import Any

import schemathesis
from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen, MultipleOf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from api.app import create_app
from shared.options import EncoderOptions, FaceOptions, JobOptions

schema = schemathesis.openapi.from_dict(create_app().openapi())
SUBMIT = schema["/v1/jobs"]["POST"]
# pydantic's constraint → the JSON Schema keyword a client sees
KEYWORDS = {
    Ge: ("minimum", "ge"),
    Gt: ("exclusiveMinimum", "gt"),
    Le: ("maximum", "le"),
    Lt: ("exclusiveMaximum", "lt"),
    MultipleOf: ("multipleOf", "multiple_of"),
    MinLen: ("minItems", "min_length"),
    MaxLen: ("maxItems", "max_length"),
}


def _resolve(node: Any, root: dict[str, Any]) -> Any:
    """The schema as schemathesis bundled it, with every ``$ref`` replaced by what it names."""
    if isinstance(node, dict):
        if "$ref" in node:
            target: Any = root
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            return _resolve({**target, **{k: v for k, v in node.items() if k != "$ref"}}, root)
        return {key: _resolve(value, root) for key, value in node.items()}
    if isinstance(node, list):
        return [_resolve(item, root) for item in node]
    return node


def _check_model(model: type[BaseModel], described: dict[str, Any], where: str) -> int:
    assert described.get("additionalProperties") is False, f"{where}: unknown options are refused"
    assert set(described["properties"]) == set(model.model_fields), where
    checked = 0
    for name, field in model.model_fields.items():
        prop = described["properties"][name]
        assert {"type", "enum", "anyOf", "properties", "$ref"} & set(prop), f"{where}.{name} has no type"
        # an optional option (X | None) keeps its bounds on the X branch
        typed = next((b for b in prop.get("anyOf", []) if b.get("type") != "null"), prop)
        for constraint in field.metadata:
            keyword, attribute = KEYWORDS[type(constraint)]
            assert typed.get(keyword) == getattr(constraint, attribute), f"{where}.{name}: {keyword}"
            checked += 1
        nested = field.annotation if isinstance(field.annotation, type) else None
        if nested is not None and issubclass(nested, BaseModel):
            checked += _check_model(nested, prop, f"{where}.{name}")
    return checked


def test_every_job_option_is_in_the_description_with_its_type_and_bounds() -> None:
    for media_type in ("multipart/form-data", "application/json"):
        body = SUBMIT.get_body_for_media_type(media_type)
        assert body is not None, media_type
        described = _resolve(body.optimized_schema, body.optimized_schema)
        options = described["properties"]["options"]
        bounds = _check_model(JobOptions, options, f"{media_type}: options")
        assert bounds >= 12, "ranges such as quality 0-100 and detector_size 160-1280 are described"
    encoder, face = options["properties"]["encoder"], options["properties"]["face"]
    assert encoder["properties"]["quality"]["minimum"] == 0 and encoder["properties"]["quality"]["maximum"] == 100
    assert face["properties"]["detector_size"]["multipleOf"] == 32
    assert set(face["properties"]["selector_mode"]["enum"]) == {"all", "largest", "one", "reference"}
    assert EncoderOptions.model_fields.keys() <= encoder["properties"].keys()
    assert FaceOptions.model_fields.keys() <= face["properties"].keys()
    multipart = SUBMIT.get_body_for_media_type("multipart/form-data")
    assert multipart is not None and multipart.get_property_content_types("options") == ["application/json"]


@given(data=st.data())
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_options_schemathesis_generates_from_the_description_are_accepted_by_the_model(data: st.DataObject) -> None:
    case = data.draw(SUBMIT.as_strategy(media_type="application/json"))
    JobOptions.model_validate(case.body.get("options", {}))
