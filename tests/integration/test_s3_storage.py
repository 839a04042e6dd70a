"""A farm on S3 storage (moto's server on loopback): the API and each worker in a folder of its own, no shared disk."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished
from tests.support.farm import Farm, wait_for
from tests.support.media import assert_frames_match, read_frames
from tests.support.services import s3_server
from tests.support.tenants import bearer, make_key

pytestmark = pytest.mark.integration

BUCKET = "swapfarm-test"
LOSSLESS = {"processors": ["passthrough"], "encoder": {"lossless": True, "preset": "ultrafast"}}


@pytest.fixture(scope="module")
def moto_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The S3 server's request log: one line per request it answered."""
    return tmp_path_factory.mktemp("s3") / "moto.log"


@pytest.fixture(scope="module")
def s3_endpoint(moto_log: Path) -> Iterator[str]:
    with s3_server(moto_log) as url:
        boto3.client(
            "s3", endpoint_url=url, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
        ).create_bucket(Bucket=BUCKET)
        yield url


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A working directory each for the API (this process) and two workers; the test runs in the API's."""
    folders = {name: tmp_path / name for name in ("api", "w1", "w2")}
    for folder in folders.values():
        folder.mkdir()
    monkeypatch.chdir(folders["api"])
    return folders


@pytest.fixture
def settings(settings: Settings, s3_endpoint: str, homes: dict[str, Path]) -> Settings:
    """The suite's settings with storage in the bucket and scratch space relative to each process's folder."""
    return settings.model_copy(
        update={
            "storage_url": f"s3://{BUCKET}/farm-{uuid.uuid4().hex[:8]}",
            "s3_endpoint_url": s3_endpoint,
            "s3_key": "swapfarm-key",
            "s3_secret": SecretStr("swapfarm-secret"),
            "s3_region": "us-east-1",
            "work_dir": Path("scratch"),
        }
    )


def _keys(settings: Settings) -> list[str]:
    assert settings.s3_secret is not None
    client = boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        aws_access_key_id=settings.s3_key,
        aws_secret_access_key=settings.s3_secret.get_secret_value(),
        region_name=settings.s3_region,
    )
    prefix = settings.storage_url.removeprefix(f"s3://{BUCKET}/")
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"].removeprefix(prefix + "/") for page in pages for item in page.get("Contents", [])]


def test_a_job_on_s3_storage_completes_with_api_and_workers_sharing_no_folder(
    api: TestClient, settings: Settings, homes: dict[str, Path], clip_short: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    farms = [Farm(settings, logs, cwd=homes[name]) for name in ("w1", "w2")]
    try:
        for farm, name in zip(farms, ("w1", "w2"), strict=True):
            farm.worker(name)
        job_id = submit(api, clip_short, {**LOSSLESS, "chunk_frames": 30})
        body = wait_finished(api, job_id, farms[0])
        assert body["status"] == "succeeded", body
        # The stitcher deletes the chunks after it has committed the job's success: wait for that, not for a guess,
        # and with the workers still running (stopped first, the stitcher could not finish deleting).
        wait_for(
            lambda: not [k for k in _keys(settings) if k.startswith(f"jobs/{job_id}/chunks/")],
            timeout=30,
            what="the stitcher to delete the intermediates",
        )
    finally:
        for farm in farms:
            farm.stop()

    output = download(api, job_id, tmp_path / "out.mp4")
    assert_frames_match(read_frames(output), read_frames(clip_short))
    keys = _keys(settings)
    assert f"jobs/{job_id}/output.mp4" in keys
    assert any(k.startswith(f"jobs/{job_id}/input/target") for k in keys)
    assert not [k for k in keys if k.endswith(".part")], "a partial upload was left behind"

    # Each worker worked in its own folder; the API wrote nothing to its own.
    assert any(p.is_dir() for p in (homes["w1"] / "scratch", homes["w2"] / "scratch"))
    assert list(homes["api"].iterdir()) == []


def test_a_json_submission_reads_its_inputs_from_the_bucket_under_an_allowed_prefix(
    settings: Settings, clip_short: Path
) -> None:
    """Media already in the bucket: the job names it by ``s3://`` URL instead of uploading it."""
    assert settings.s3_secret is not None
    s3 = boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        aws_access_key_id=settings.s3_key,
        aws_secret_access_key=settings.s3_secret.get_secret_value(),
        region_name=settings.s3_region,
    )
    s3.put_object(Bucket=BUCKET, Key="media/clips/interview.mp4", Body=clip_short.read_bytes())
    allowed = settings.model_copy(update={"input_url_prefixes": [f"s3://{BUCKET}/media/"]})
    with TestClient(create_app(allowed), headers=bearer(make_key(settings))) as client:
        target = {"url": f"s3://{BUCKET}/media/clips/interview.mp4"}
        accepted = client.post("/v1/jobs", json={"target": target, "options": {"processors": ["passthrough"]}})
        outside = client.post("/v1/jobs", json={"target": {"url": f"s3://{BUCKET}/farm-other/clip.mp4"}})
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["target_name"] == "interview.mp4"
    job_id = accepted.json()["id"]
    assert f"jobs/{job_id}/input/target.mp4" in _keys(settings), "the input is copied into the job"
    assert outside.status_code == 422 and outside.json()["error"]["code"] == "input_url_forbidden"


def test_a_worker_fetches_a_jobs_target_once_for_its_plan_chunks_and_stitch(
    api: TestClient, settings: Settings, homes: dict[str, Path], clip_short: Path, tmp_path: Path, moto_log: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    farm = Farm(settings, logs, cwd=homes["w1"])
    try:
        farm.worker("w1")  # one process: it plans, renders every chunk and stitches
        job_id = submit(api, clip_short, {**LOSSLESS, "chunk_frames": 20})
        body = wait_finished(api, job_id, farm)
    finally:
        farm.stop()
    assert body["status"] == "succeeded", body
    assert body["chunks"]["total"] >= 3
    target = next(k for k in _keys(settings) if k.startswith(f"jobs/{job_id}/input/target"))
    prefix = settings.storage_url.removeprefix(f"s3://{BUCKET}/")
    downloads = f'"GET /{BUCKET}/{prefix}/{target} '  # the object itself, not a listing that names it
    fetched = [line for line in moto_log.read_text().splitlines() if downloads in line]
    assert len(fetched) == 1, f"the target was fetched {len(fetched)} times: {fetched}"
