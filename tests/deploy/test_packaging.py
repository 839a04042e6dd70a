"""The project's metadata as setuptools reads it: the licence is an SPDX expression, with no deprecation warning."""

from __future__ import annotations

import warnings
from pathlib import Path

from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

ROOT = Path(__file__).resolve().parents[2]


def test_the_metadata_applies_without_a_warning_and_names_its_licence_in_spdx() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a deprecated field (e.g. license = {text = ...}) fails here
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert dist.metadata.license_expression == "Apache-2.0"
    package_data = dist.package_data or {}
    assert {"templates/*.html", "static/*"} <= set(package_data.get("api.ui", [])), "the console ships its files"
