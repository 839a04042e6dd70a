"""The console's option form (api/ui/forms.py): a choice the schema types as a number is posted as text by the browser
and must reach the job as the number (the frame colouriser's sizes are 192, 256, 384 and 512); a choice that also takes
a name of the operator's (the deep swapper's custom/<stem>) is a text field with the choices suggested."""

from __future__ import annotations

import pytest

from api.ui.forms import OptionsInvalid, option_fields, read_options
from shared.deep_swap_options import DeepSwapperCatalogue
from shared.options import choices


def test_a_number_choice_posted_as_text_reaches_the_job_as_the_number() -> None:
    (size,) = [field for field in option_fields() if field.path == "frame_colorizer.size"]
    assert size.kind == "select" and size.choices == ("192", "256", "384", "512")
    options = read_options({size.name: ["384"]})
    assert options.frame_colorizer.size == 384


def test_a_text_choice_is_kept_and_an_unknown_one_refused_with_the_field_named() -> None:
    (model,) = [field for field in option_fields() if field.path == "frame_colorizer.model"]
    assert read_options({model.name: ["deoldify"]}).frame_colorizer.model == "deoldify"
    (size,) = [field for field in option_fields() if field.path == "frame_colorizer.size"]
    with pytest.raises(OptionsInvalid) as refused:
        read_options({size.name: ["300"]})
    assert "frame_colorizer.size" in refused.value.errors


def test_the_deep_swapper_model_is_typed_with_the_catalogue_suggested_and_a_custom_name_taken() -> None:
    """A choice that also takes a name of the operator's (``custom/<stem>``) is a text field suggesting the catalogue:
    a select could not offer the workers' own files; what no rule allows is refused with the field named."""
    (model,) = [field for field in option_fields() if field.path == "deep_swapper.model"]
    assert model.kind == "text" and model.default == "iperov/elon_musk_224"
    assert set(model.choices) == set(choices(DeepSwapperCatalogue)) and len(model.choices) == 157
    assert read_options({model.name: ["custom/my-face_v2"]}).deep_swapper.model == "custom/my-face_v2"
    assert read_options({model.name: ["rumateus/taylor_swift_224"]}).deep_swapper.model == "rumateus/taylor_swift_224"
    for hostile in ("../models/x", "custom/../x", "custom/.hidden", "iperov/nobody_224"):
        with pytest.raises(OptionsInvalid) as refused:
            read_options({model.name: [hostile]})
        assert "deep_swapper.model" in refused.value.errors, hostile
    (age,) = [field for field in option_fields() if field.path == "age_modifier.model"]
    assert age.kind == "select" and age.choices == ("fran", "styleganex_age")


def test_the_submit_page_offers_the_catalogue_as_suggestions_of_a_text_field() -> None:
    from api.ui.rendering import templates

    (model,) = [field for field in option_fields() if field.path == "deep_swapper.model"]
    html = templates.env.get_template("_option_field.html").render(f=model, values={}, errors={})
    assert 'type="text" list="opt-deep-swapper-model-choices"' in html
    assert html.count("<option value=") == 157 and '<option value="iperov/elon_musk_224">' in html


def test_the_livePortrait_processors_options_are_form_fields_that_reach_the_job() -> None:
    fields = {field.path: field for field in option_fields()}
    assert {"expression_restorer", "face_editor"} <= set(fields["processors"].choices)
    areas = fields["expression_restorer.areas"]
    assert areas.kind == "checkboxes" and areas.choices == ("upper-face", "lower-face")
    factor = fields["expression_restorer.factor"]
    assert (factor.kind, factor.minimum, factor.maximum, factor.default) == ("number", "0", "100", "80")
    controls = [path for path in fields if path.startswith("face_editor.")]
    assert len(controls) == 14
    assert all((fields[p].kind, fields[p].minimum, fields[p].maximum) == ("number", "-1.0", "1.0") for p in controls)
    options = read_options(
        {
            fields["processors"].name: ["face_swapper", "expression_restorer"],
            areas.name: ["", "lower-face"],  # the form sends an empty value with the boxes
            fields["face_editor.mouth_smile"].name: ["-0.35"],
        }
    )
    assert options.expression_restorer.areas == ["lower-face"] and options.face_editor.mouth_smile == -0.35
    with pytest.raises(OptionsInvalid) as refused:
        read_options({fields["face_editor.head_yaw"].name: ["0.33"]})  # not a step of 0.05
    assert "face_editor.head_yaw" in refused.value.errors


def test_a_list_of_words_is_a_text_field_read_as_words_and_a_bad_word_refused_with_the_field_named() -> None:
    (tags,) = [field for field in option_fields() if field.path == "required_tags"]
    assert tags.kind == "strings"
    assert read_options({tags.name: ["studio-a, 48gb,"]}).required_tags == ["studio-a", "48gb"]
    with pytest.raises(OptionsInvalid) as refused:
        read_options({tags.name: ["Studio A"]})
    assert "required_tags" in refused.value.errors
    (padding,) = [field for field in option_fields() if field.path == "face.mask_padding"]
    assert padding.kind == "numbers", "a tuple of numbers stays numbers"
