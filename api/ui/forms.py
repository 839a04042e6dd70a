"""The submit form's option fields, built from the ``JobOptions`` JSON schema, and the form read back into options.

Every option the API takes is a field here, with the schema's choices, bounds and defaults; a new option in
``shared/options.py`` appears in the form without touching the console. Fields are named ``options.<path>``
(``options.face.detector``); validation errors come back keyed by the same path, shown next to their field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import ValidationError

from shared.options import JobOptions

PREFIX = "options."
# Shown first; the rest wait in "More options".
ESSENTIAL = (
    "processors",
    "preset",
    "face.swapper",
    "face.enhancer",
    "face.selector_mode",
    "encoder.quality",
    "trim_start_frame",
    "trim_end_frame",
    "output_height",
    "output_fps",
)
Kind = Literal["select", "checkboxes", "number", "checkbox", "numbers", "strings", "text"]


@dataclass(frozen=True)
class OptionField:
    path: str  # "face.detector"
    label: str
    kind: Kind
    description: str = ""
    choices: tuple[str, ...] = ()
    default: str = ""  # as the form shows it
    optional: bool = False  # may be left empty: the preset or the farm decides
    minimum: str | None = None
    maximum: str | None = None
    step: str = "any"
    values: tuple[Any, ...] = ()  # a select's choices as the schema types them (192, not "192")

    @property
    def name(self) -> str:
        return PREFIX + self.path

    @property
    def id(self) -> str:
        return "opt-" + self.path.replace(".", "-").replace("_", "-")

    @property
    def group(self) -> str:
        return self.path.split(".")[0].capitalize() if "." in self.path else "Job"

    @property
    def essential(self) -> bool:
        return self.path in ESSENTIAL


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else ""
    if isinstance(value, list | tuple):
        return ",".join(_text(v) for v in value)
    return str(value)


def _instance_default(path: str) -> Any:
    """A default the schema cannot state (a ``default_factory``), read from a default ``JobOptions``."""
    value: Any = JobOptions().model_dump(mode="json")
    for part in path.split("."):
        value = value[part]
    return value


def _resolve(node: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        return {**defs[ref.rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _field(path: str, node: dict[str, Any], defs: Mapping[str, Any]) -> OptionField:
    label = str(node.get("title") or path.rsplit(".", 1)[-1].replace("_", " ").capitalize())
    common: dict[str, Any] = {"path": path, "label": label, "description": str(node.get("description", ""))}
    default = node["default"] if "default" in node else _instance_default(path)
    branches = [_resolve(b, defs) for b in node.get("anyOf", [node])]
    optional = any(b.get("type") == "null" for b in branches)
    typed = [b for b in branches if b.get("type") != "null"]
    values = [c for b in typed for c in b.get("enum", [b["const"]] if "const" in b else [])]
    choices = [str(c) for c in values]
    if choices and any(b.get("type") == "string" and "enum" not in b and "const" not in b for b in typed):
        # choices that also take a name of the caller's (deep_swapper.model: custom/<stem>): text, choices suggested
        return OptionField(**common, kind="text", choices=tuple(choices), default=_text(default), optional=optional)
    if choices and len(choices) == sum(len(b.get("enum", [])) or ("const" in b) for b in typed):
        return OptionField(
            **common, kind="select", choices=tuple(choices), values=tuple(values), default=_text(default),
            optional=optional,
        )  # fmt: skip
    first = typed[0]
    kind = first.get("type")
    if kind == "array" and "enum" in first.get("items", {}):
        items = tuple(str(c) for c in first["items"]["enum"])
        return OptionField(**common, kind="checkboxes", choices=items, default=_text(default))
    if kind == "array" and first.get("items", {}).get("type") == "string":  # free words, e.g. required_tags
        return OptionField(**common, kind="strings", default=_text(default))
    if kind == "array":  # a fixed-length tuple of numbers, e.g. mask padding
        return OptionField(**common, kind="numbers", default=_text(default))
    if kind == "boolean":
        return OptionField(**common, kind="checkbox", default=_text(default))
    if kind in {"integer", "number"}:
        low = first.get("minimum", first.get("exclusiveMinimum"))
        high = first.get("maximum", first.get("exclusiveMaximum"))
        step = str(first.get("multipleOf", 1)) if kind == "integer" else "any"
        return OptionField(
            **common,
            kind="number",
            default=_text(default),
            optional=optional,
            minimum=None if low is None else str(low),
            maximum=None if high is None else str(high),
            step=step,
        )
    raise ValueError(f"option {path}: no form field for {node}")


@cache
def option_fields() -> tuple[OptionField, ...]:
    """One field per option of :class:`JobOptions` (nested models flattened into dotted paths), in schema order."""
    schema = JobOptions.model_json_schema()
    defs = schema.get("$defs", {})

    def walk(properties: Mapping[str, Any], prefix: str) -> list[OptionField]:
        found: list[OptionField] = []
        for name, raw in properties.items():
            node = _resolve(raw, defs)
            if node.get("type") == "object" and "properties" in node:
                found += walk(node["properties"], f"{prefix}{name}.")
            else:
                found.append(_field(prefix + name, node, defs))
        return found

    return tuple(walk(schema["properties"], ""))


@cache
def form_value_count() -> int:
    """How many values the submit form posts at most: one per field, one per box of a checkbox group and the empty
    value each box group and checkbox also sends, and the CSRF token; the upload reader refuses a post with more."""
    count = 1
    for field in option_fields():
        if field.kind == "checkboxes":
            count += len(field.choices) + 1
        elif field.kind == "checkbox":
            count += 2
        else:
            count += 1
    return count


class OptionsInvalid(Exception):
    """The form's options did not validate; ``errors`` maps field paths (``""``: the whole form) to messages."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(errors)
        self.errors = errors


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def read_options(form: Mapping[str, list[str]]) -> JobOptions:
    """The options a submitted form asks for; an empty field leaves its option to the preset or the default.

    Raises:
        OptionsInvalid: a value is not a number where one is needed, or the options fail validation.
    """
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for field in option_fields():
        values = [v.strip() for v in form.get(field.name, [])]
        if field.kind in {"checkbox", "checkboxes"} and field.name not in form:
            # The form sends an empty value with every box (checked or not); a post without the field (a script)
            # leaves the option to its default, as any other field left out.
            continue
        if field.kind == "checkboxes":
            _set(data, field.path, [v for v in values if v])
            continue
        if field.kind == "checkbox":
            _set(data, field.path, any(v in {"on", "true", "1"} for v in values))
            continue
        value = values[-1] if values else ""
        if not value:
            continue  # left to the preset or the default
        if field.kind == "text":
            _set(data, field.path, value)
            continue
        if field.kind == "select":  # the choice as the schema types it: a number choice is sent as its text
            _set(data, field.path, dict(zip(field.choices, field.values, strict=True)).get(value, value))
            continue
        if field.kind == "strings":  # comma-separated; the options' own rules judge each word
            _set(data, field.path, [part.strip() for part in value.split(",") if part.strip()])
            continue
        try:
            if field.kind == "numbers":
                _set(data, field.path, [int(part) for part in value.split(",")])
            elif field.step == "any":
                _set(data, field.path, float(value))
            else:
                _set(data, field.path, int(value))
        except ValueError:
            errors[field.path] = "a number is needed" if field.kind == "number" else "numbers separated by commas"
    if errors:
        raise OptionsInvalid(errors)
    try:
        return JobOptions.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = ".".join(str(p) for p in error["loc"] if not isinstance(p, int))
            errors.setdefault(loc, str(error["msg"]))
        raise OptionsInvalid(errors) from exc


def form_values(form: Mapping[str, list[str]] | None) -> dict[str, list[str]]:
    """What each field shows: what was submitted, else its default."""
    shown: dict[str, list[str]] = {}
    for field in option_fields():
        if form is not None and field.name in form:
            shown[field.path] = (
                [v for v in form[field.name] if v] if field.kind in {"checkbox", "checkboxes"} else form[field.name]
            )
        else:
            shown[field.path] = field.default.split(",") if field.kind == "checkboxes" else [field.default]
    return shown
