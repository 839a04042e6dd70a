"""What an operator runs into on day one: a second worker under a running one's name, logs a collector can parse,
and ``--watch`` in a log rather than on a terminal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from shared.settings import Settings
from tests.support.farm import Farm, settings_env, wait_for
from tests.support.live import live_api
from tests.support.tenants import make_key

pytestmark = pytest.mark.integration

LOSSLESS = {"processors": ["passthrough"], "encoder": {"lossless": True, "preset": "ultrafast"}}


def _ready(farm: Farm, key: str) -> bool:
    return " ready." in farm.log(key)


class TestWorkerNameTaken:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        # the default bound on the namesake's answer, not the suite's shorter one: this test is about that answer
        return settings.model_copy(
            update={"worker_name_check_seconds": Settings.model_fields["worker_name_check_seconds"].default}
        )

    def test_a_worker_started_under_the_name_of_a_running_one_is_refused(self, farm: Farm, settings: Settings) -> None:
        assert settings.worker_name_check_seconds == 1.0
        farm.worker("w1")
        wait_for(lambda: _ready(farm, "w1"), timeout=120, what="w1 ready")
        farm.worker("twin", hostname="w1@test")
        code = farm.procs["twin"].wait(timeout=120)
        assert code == 2, farm.log("twin")
        assert "worker_name_taken" in farm.log("twin") and "w1@test is already running" in farm.log("twin")
        assert not _ready(farm, "twin")
        assert farm.procs["w1"].poll() is None, "the running worker is left alone"

        farm.kill("w1")  # a dead worker's name is free again
        farm.worker("again", hostname="w1@test")
        wait_for(lambda: _ready(farm, "again"), timeout=120, what="a new w1 ready")


def test_worker_and_reaper_logs_are_json_lines_naming_the_queues_and_their_routing(farm: Farm) -> None:
    farm.worker("w1")
    farm.beat()
    wait_for(lambda: _ready(farm, "w1"), timeout=120, what="w1 ready")
    wait_for(lambda: "reaper: a sweep every" in farm.log("beat"), timeout=60, what="the reaper")
    farm.stop()  # SIGTERM: Celery's shutdown notice, written straight to file descriptor 1, is logged too

    for key in ("w1", "beat"):
        records = []
        for line in farm.log(key).splitlines():
            if line.strip():
                records.append(json.loads(line))  # raises on any line that is not JSON
        assert all({"time", "level", "logger", "message"} <= set(r) for r in records), key
    worker = [json.loads(line) for line in farm.log("w1").splitlines() if line.strip()]
    (announced,) = [r["message"] for r in worker if r["message"].startswith("worker w1@test: pool")]
    for queue in ("control", "stitch", "render.cpu", "render.any"):
        assert f"{queue} exchange={queue}(direct) key={queue}" in announced, announced
    assert any(r["logger"] == "stdout" and "Warm shutdown" in r["message"] for r in worker)


def test_watch_without_a_terminal_prints_a_line_per_event_and_per_step_of_progress(
    farm: Farm, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings)
    with live_api(settings, farm.logs) as server:
        env = {**settings_env(settings), "SWAPFARM_API_URL": server.url, "SWAPFARM_API_KEY": key, "COLUMNS": "200"}
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as http:
            response = http.post(
                "/v1/jobs",
                files={"target": (clip_short.name, clip_short.read_bytes(), "video/mp4")},
                data={"options": json.dumps({**LOSSLESS, "chunk_frames": 30})},
            )
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        watch = subprocess.Popen(
            [sys.executable, "-m", "cli", "status", job_id, "--watch", "--every", "25"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        farm.worker("w1")
        out, err = watch.communicate(timeout=300)
    assert watch.returncode == 0, err
    assert f"{job_id} succeeded 100.0%" in out
    progress = [line for line in err.splitlines() if job_id in line]
    percents = [float(m.group(1)) for line in progress if (m := re.search(r" (\d+\.\d)% \(", line))]
    assert percents[0] == 0.0 and percents[-1] == 100.0, progress
    assert len(progress) >= 3 and percents == sorted(percents), progress
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in progress), progress
    assert any(" planned " in line and "frames in 4 chunks" in line for line in err.splitlines()), err
    assert "\x1b[" not in err, "no terminal control codes in a log"
