"""F3: GET /v1/jobs is paginated; a page costs O(limit), not O(jobs) (benchmarks/bench_api_paging.py
prints the figures at 20k and 100k jobs)."""

from __future__ import annotations

import random

import pytest
from multidict import MultiDict

from actors.records import JobRecord
from actors.kernel.messages import JobSpec
from live.api import ApiError, encode_cursor, page_query
from live.read_model import ReadModel

STATES = ("queued", "running", "completed", "failed", "cancelled")


def populated(n: int, seed: int = 0) -> tuple[ReadModel, dict[int, str]]:
    rng = random.Random(seed)
    view = ReadModel(num_gpus=8)
    states = {}
    for job_id in range(n):
        spec = JobSpec(model="LM", batch_size=5, scale_factor=1, total_steps=100, job_id=job_id)
        record = JobRecord(job_id, spec, float(job_id), 1.0)
        view.publish_job(record)
        # a later change of state, as the clearinghouse publishes it
        record.state = states[job_id] = rng.choices(STATES, weights=(5, 1, 80, 4, 10))[0]
        record.finish_s = float(job_id + 50) if record.state in ("completed", "failed", "cancelled") else None
        view.publish_job(record)
    return view, states


@pytest.mark.parametrize("state", [None, *STATES])
def test_pages_cover_every_job_once_in_id_order(state):
    view, states = populated(6000)  # more completed jobs than the sorted-set path takes
    seen, after = [], None
    while True:
        page, last = view.job_page(1e6, after=after, limit=137, state=state)
        assert len(page) <= 137
        seen += [s.job_id for s in page]
        if last is None:
            break
        assert last == page[-1].job_id
        after = last
    want = [j for j in range(6000) if state is None or states[j] == state]
    assert seen == want
    assert all(view.jobs[j].state == states[j] for j in seen)


def test_a_job_changing_state_moves_between_filters():
    view, states = populated(50)
    job = next(j for j in range(50) if states[j] == "queued")
    spec = view.jobs[job]
    record = JobRecord(job, JobSpec(model="LM", batch_size=5, scale_factor=1, total_steps=100, job_id=job),
                       spec.submit_s, 1.0, state="running")
    view.publish_job(record)
    assert job in [s.job_id for s in view.job_page(0.0, after=None, limit=1000, state="running")[0]]
    assert job not in [s.job_id for s in view.job_page(0.0, after=None, limit=1000, state="queued")[0]]


def test_page_query_bounds_and_names_the_field():
    assert page_query(MultiDict()) == (100, None, None)
    assert page_query(MultiDict(limit="1000", cursor=encode_cursor(41), state="running")) == (1000, 41, "running")
    for query, field in [({"limit": "0"}, "limit"), ({"limit": "1001"}, "limit"), ({"limit": "-1"}, "limit"),
                         ({"limit": "1e3"}, "limit"), ({"limit": "\u00b2"}, "limit"), ({"limit": "\u0663"}, "limit"),
                         ({"limit": "1" * 5000}, "limit"), ({"cursor": "!!"}, "cursor"), ({"cursor": "c12g"}, "cursor"), ({"cursor": ""}, "cursor"),
                         ({"state": "done"}, "state")]:
        with pytest.raises(ApiError) as bad:
            page_query(MultiDict(query))
        assert (bad.value.status, bad.value.field) == (422, field)


def test_numbers_in_paths_are_ascii_digits_only():
    # str.isdigit accepts a superscript two, which int() refuses; int() also refuses 5,000 digits:
    # either was an uncaught ValueError (500)
    from live.params import bounded_int, job_id

    assert job_id("42") == 42 and bounded_int("7", "rounds", 1, 10) == 7
    for raw in ("\u00b2", "\u0663", "1" * 5000, "", "+1", " 1", "1_0", "-1"):
        with pytest.raises(ApiError) as bad:
            job_id(raw)
        assert (bad.value.status, bad.value.field) == (404, "job_id")
        with pytest.raises(ApiError) as bad:
            bounded_int(raw, "rounds", 1, 10)
        assert (bad.value.status, bad.value.field) == (422, "rounds")
