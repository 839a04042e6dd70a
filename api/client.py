"""A client of the farm's API (httpx), for scripts and the ``swapfarm`` commands that reach a farm (``submit``,
``status``, ``pause``, ``group`` …).

Uploads and downloads stream (never a whole video in memory); a download resumes a partial file with a Range
request. Errors come back as :class:`ApiError` with the API's stable code.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import httpx

from api.schemas import ChunkList, EventList, EventView, JobList, JobView

ProgressCallback = Callable[[int, int | None], None]


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


class Client:
    """The API at ``url`` as the holder of ``key``.

    >>> with Client("http://farm:8000", "sfk_…") as farm:  # doctest: +SKIP
    ...     job = farm.submit(Path("clip.mp4"), options={"processors": ["face_blur"]})
    ...     farm.download(job.id, Path("out.mp4"))
    """

    def __init__(self, url: str, key: str | None, *, timeout: float = 60.0, **kwargs: Any) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout, **kwargs)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.is_success:
            return response
        response.read()
        try:
            error = response.json()["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", response.text[:300] or response.reason_phrase
        raise ApiError(response.status_code, code, message)

    def submit(
        self,
        target: Path,
        sources: Sequence[Path] = (),
        *,
        options: dict[str, Any] | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
        audio: Path | None = None,
    ) -> JobView:
        """Upload a job (files streamed from disk; ``audio``: the source audio of a lip_syncer job) and return it
        as accepted."""
        data: dict[str, str] = {"options": json.dumps(options or {})}
        if priority is not None:
            data["priority"] = str(priority)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        with ExitStack() as stack:
            files: list[tuple[str, tuple[str, IO[bytes], str]]] = [
                ("target", (target.name, stack.enter_context(target.open("rb")), "video/mp4"))
            ]
            files += [
                ("source", (s.name, stack.enter_context(s.open("rb")), "application/octet-stream")) for s in sources
            ]
            if audio is not None:
                files.append(("source_audio", (audio.name, stack.enter_context(audio.open("rb")), "audio/wav")))
            response = self._http.post("/v1/jobs", data=data, files=files, headers=headers, timeout=None)
        return JobView.model_validate(self._check(response).json())

    def submit_group(
        self,
        targets: Sequence[Path],
        sources: Sequence[Path] = (),
        *,
        options: dict[str, Any] | None = None,
        priority: int | None = None,
        name: str = "",
        partial: bool = False,
    ) -> dict[str, Any]:
        """Upload a job group (one job per target, the same sources and options); the group as accepted
        (``GET /v1/groups/{id}``'s body)."""
        data: dict[str, str] = {"options": json.dumps(options or {}), "partial": "true" if partial else "false"}
        if name:
            data["name"] = name
        if priority is not None:
            data["priority"] = str(priority)
        with ExitStack() as stack:
            files: list[tuple[str, tuple[str, IO[bytes], str]]] = [
                ("target", (t.name, stack.enter_context(t.open("rb")), "video/mp4")) for t in targets
            ]
            files += [
                ("source", (s.name, stack.enter_context(s.open("rb")), "application/octet-stream")) for s in sources
            ]
            response = self._http.post("/v1/groups", data=data, files=files, timeout=None)
        body: dict[str, Any] = self._check(response).json()
        return body

    def group(self, group_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self._check(self._http.get(f"/v1/groups/{group_id}")).json()
        return body

    def group_jobs(self, group_id: str) -> list[JobView]:
        """The group's jobs, in the order of their targets."""
        body = self._check(self._http.get(f"/v1/groups/{group_id}/jobs")).json()
        return [JobView.model_validate(job) for job in body["jobs"]]

    def group_control(self, group_id: str, action: str, *, now: bool = False) -> dict[str, Any]:
        """``pause`` (``now``: stop the running chunks too), ``resume``, ``cancel`` or ``retry`` every member; the
        group after it."""
        if action not in ("pause", "resume", "cancel", "retry"):
            raise ValueError(f"no such group control: {action}")
        params = {"now": "true"} if now else None
        body: dict[str, Any] = self._check(self._http.post(f"/v1/groups/{group_id}/{action}", params=params)).json()
        return body

    def download_group(self, group_id: str, path: Path, *, on_progress: ProgressCallback | None = None) -> Path:
        """Write the ZIP of the group's outputs to ``path`` (through ``path.part``: a file at ``path`` is whole)."""
        partial = path.with_name(f".{path.name}.part")
        with self._http.stream("GET", f"/v1/groups/{group_id}/output", timeout=None) as response:
            self._check(response)
            have = 0
            with partial.open("wb") as out:
                for block in response.iter_bytes(1 << 20):
                    out.write(block)
                    have += len(block)
                    if on_progress is not None:
                        on_progress(have, None)  # streamed as it is made: no length is known
        partial.replace(path)
        return path

    def job(self, job_id: str) -> JobView:
        return JobView.model_validate(self._check(self._http.get(f"/v1/jobs/{job_id}")).json())

    def jobs(
        self,
        *,
        status: Sequence[str] = (),
        limit: int = 50,
        cursor: str | None = None,
        all_tenants: bool = False,
    ) -> JobList:
        params: dict[str, Any] = {"limit": limit, "status": list(status)}
        if cursor:
            params["cursor"] = cursor
        if all_tenants:
            params["all_tenants"] = "true"
        return JobList.model_validate(self._check(self._http.get("/v1/jobs", params=params)).json())

    def cancel(self, job_id: str) -> JobView:
        return JobView.model_validate(self._check(self._http.post(f"/v1/jobs/{job_id}/cancel")).json())

    def retry(self, job_id: str) -> JobView:
        return JobView.model_validate(self._check(self._http.post(f"/v1/jobs/{job_id}/retry")).json())

    def release_worker(self, name: str) -> None:
        """Admin keys only: release a quarantined worker."""
        self._check(self._http.post(f"/v1/workers/{quote(name, safe='')}/release"))

    def control(self, job_id: str, action: str, *, now: bool = False) -> JobView:
        """``pause`` (``now``: stop the running chunks too), ``resume``, ``approve`` or ``reject`` the job."""
        if action not in ("pause", "resume", "approve", "reject"):
            raise ValueError(f"no such control: {action}")
        params = {"now": "true"} if now else None
        return JobView.model_validate(self._check(self._http.post(f"/v1/jobs/{job_id}/{action}", params=params)).json())

    def farm(self, action: str | None = None) -> bool:
        """Whether the farm is paused, after ``pause`` or ``resume`` (admin keys) when one is named."""
        if action not in (None, "pause", "resume"):
            raise ValueError(f"no such farm control: {action}")
        response = self._http.post(f"/v1/farm/{action}") if action else self._http.get("/v1/farm")
        return bool(self._check(response).json()["paused"])

    def chunks(self, job_id: str) -> ChunkList:
        """Every chunk of the job (the pages of ``/chunks`` joined)."""
        found = ChunkList(chunks=[])
        after = -1
        while True:
            response = self._http.get(f"/v1/jobs/{job_id}/chunks", params={"after": after})
            page = ChunkList.model_validate(self._check(response).json())
            found.chunks.extend(page.chunks)
            if page.next_after is None:
                return found
            after = page.next_after

    def events(self, job_id: str, after: int = 0) -> EventList:
        response = self._http.get(f"/v1/jobs/{job_id}/events", params={"after": after})
        return EventList.model_validate(self._check(response).json())

    def follow(self, job_id: str) -> Iterator[JobView | EventView]:
        """The job's events and its changing state as they happen (server-sent events), until the job ends.

        A stream the server closes before the end is opened again after the last event seen.
        """
        last: int | None = None
        while True:
            headers = {"Last-Event-ID": str(last)} if last is not None else {}
            url = f"/v1/jobs/{job_id}/events/stream"
            with self._http.stream("GET", url, headers=headers, timeout=httpx.Timeout(60.0, read=None)) as response:
                self._check(response)
                kind, data = "", ""
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:"):
                        data += line[5:].strip()
                    elif line == "" and data:
                        if kind == "event":
                            event = EventView.model_validate_json(data)
                            last = event.id
                            yield event
                        elif kind in {"job", "end"}:
                            yield JobView.model_validate_json(data)
                            if kind == "end":
                                return
                        kind, data = "", ""

    def download(self, job_id: str, path: Path, *, on_progress: ProgressCallback | None = None) -> Path:
        """Write the job's output to ``path``, resuming a ``path.part`` left by an interrupted download."""
        partial = path.with_name(f".{path.name}.part")
        have = partial.stat().st_size if partial.exists() else 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        with self._http.stream("GET", f"/v1/jobs/{job_id}/output", headers=headers, timeout=None) as response:
            if response.status_code == 416:  # the part already holds the whole file
                response.read()
                partial.replace(path)
                return path
            self._check(response)
            if response.status_code != 206:
                have = 0
            total = have + int(response.headers.get("content-length", 0)) or None
            with partial.open("ab" if have else "wb") as out:
                for block in response.iter_bytes(1 << 20):
                    out.write(block)
                    have += len(block)
                    if on_progress is not None:
                        on_progress(have, total)
        partial.replace(path)
        return path
