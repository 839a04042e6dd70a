"""Storage built from settings: S3 credentials and endpoint reach fsspec for s3:// URLs, and only for them."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from shared.settings import Settings
from shared.storage import Storage, storage_options

S3 = {"s3_endpoint_url": "http://127.0.0.1:9000", "s3_key": "k", "s3_secret": SecretStr("s"), "s3_region": "eu-1"}


def test_s3_urls_get_the_endpoint_keys_and_region_and_no_stale_listings() -> None:
    options = storage_options(Settings(**S3), "s3://bucket/prefix")
    assert options == {
        "use_listings_cache": False,
        "endpoint_url": "http://127.0.0.1:9000",
        "key": "k",
        "secret": "s",
        "client_kwargs": {"region_name": "eu-1"},
    }


def test_unset_s3_settings_leave_boto_its_own_credential_chain() -> None:
    assert storage_options(Settings(), "s3://bucket") == {"use_listings_cache": False}


@pytest.mark.parametrize("url", ["file:///srv/swapfarm", "/srv/swapfarm", "memory://x"])
def test_other_protocols_get_no_s3_options(url: str) -> None:
    assert storage_options(Settings(**S3), url) == {}


def test_storage_from_settings_uses_the_storage_url(tmp_path: object) -> None:
    storage = Storage.from_settings(Settings(storage_url=f"file://{tmp_path}"))
    assert storage.root_url == f"file://{tmp_path}"
    assert storage.job_url("j", "output.mp4") == f"file://{tmp_path}/jobs/j/output.mp4"


def test_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SWAPFARM_S3_SECRET", "SWAPFARM_S3_KEY", "SWAPFARM_S3_ENDPOINT_URL"):
        monkeypatch.setenv(name, "")
    settings = Settings()
    assert settings.s3_secret is None and settings.s3_key is None and settings.s3_endpoint_url is None


@pytest.mark.parametrize(
    ("field", "value", "variable"),
    [
        ("secret_key", "change-me", "SWAPFARM_SECRET_KEY"),
        ("flower_password", "change-me", "SWAPFARM_FLOWER_PASSWORD"),
        ("s3_secret", "minioadmin", "SWAPFARM_S3_SECRET"),
    ],
)
def test_production_refuses_default_secrets(field: str, value: str, variable: str) -> None:
    good = {"secret_key": SecretStr("a-real-secret"), "environment": "production"}
    Settings(**good)
    with pytest.raises(ValueError, match=variable):
        Settings(**{**good, field: SecretStr(value)})
    Settings(**{**good, "environment": "development", field: SecretStr(value)})
