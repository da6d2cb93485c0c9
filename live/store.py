"""Durable clearinghouse state in an embedded SQLite database (WAL) — docs/architecture.md "Live runtime".

Owned by the ``serve`` process (one writer: the clearinghouse actor). Tables:

* ``jobs``: the submitted spec (MessagePack), state (``queued``, ``running``, ``completed``,
  ``failed``, ``cancelled``), steps done, total steps, batch size, throughput (steps/s), run
  time (s), consecutive failures, submit and finish times (epoch seconds), reason, batch-size
  changes, the last measured start-up and shut-down seconds (a database of an earlier version
  gains the last three columns when opened);
* ``leases``: one row per lease issued (job, round, GPU ids, start, length, state ``running`` →
  ``done`` | ``requeued`` | ``stopped``); the ids of applied leases make a re-delivered report
  count once after a restart;
* ``nodes``: a node's name and its cluster-wide GPU ids (a node that re-registers, even with a
  restarted ``serve``, gets the same ids);
* ``idempotency``: the ``Idempotency-Key`` of a submission, the hash of its body and its job
  (written with the job, in one transaction);
* ``predictor_state``: per unfinished job, what the predictor had learnt of it
  (:mod:`predictor.state`), written when it changes; a restored job is handed it back;
* ``meta``: counters (next job id, next lease id, round index).

Every write commits at once (``synchronous=NORMAL`` under WAL: a committed job survives a
``kill -9`` of the process; an OS crash may lose the last commits).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import msgspec

from actors.kernel.messages import JobSpec


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id INTEGER PRIMARY KEY,
    spec BLOB NOT NULL,
    state TEXT NOT NULL,
    steps_done INTEGER NOT NULL DEFAULT 0,
    total_steps INTEGER NOT NULL,
    batch_size INTEGER NOT NULL,
    throughput REAL NOT NULL DEFAULT 0,
    run_time_s REAL NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    rounds_run INTEGER NOT NULL DEFAULT 0,
    submit_s REAL NOT NULL,
    finish_s REAL,
    reason TEXT NOT NULL DEFAULT '',
    batch_size_changes INTEGER NOT NULL DEFAULT 0,
    startup_s REAL,
    shutdown_s REAL
);
CREATE TABLE IF NOT EXISTS leases (
    lease_id INTEGER PRIMARY KEY,
    job_id INTEGER NOT NULL,
    round_index INTEGER NOT NULL,
    gpu_ids TEXT NOT NULL,
    start_s REAL NOT NULL,
    duration_s REAL NOT NULL,
    state TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS leases_by_job ON leases(job_id);
CREATE TABLE IF NOT EXISTS nodes (
    name TEXT PRIMARY KEY,
    gpu_ids TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    request_hash TEXT NOT NULL,
    job_id INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS predictor_state (
    job_id INTEGER PRIMARY KEY,
    state BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""

#: columns added to ``jobs`` after the first release: (name, declaration)
_ADDED_COLUMNS = (
    ("batch_size_changes", "INTEGER NOT NULL DEFAULT 0"),
    ("startup_s", "REAL"),
    ("shutdown_s", "REAL"),
)


class StoreError(Exception):
    """The database cannot be used: ``path`` and the cause, in one line."""

    def __init__(self, path: str, cause: str) -> None:
        super().__init__(f"database {path}: {cause}")
        self.path, self.cause = path, cause


def _cause(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if "not a database" in text or "malformed" in text:
        return f"the database is corrupted ({text})"
    if "readonly" in text or "read-only" in text or "Permission denied" in text or "unable to open" in text:
        return f"the database is not writable ({text})"
    return text


_spec_encoder = msgspec.msgpack.Encoder()
_spec_decoder = msgspec.msgpack.Decoder(JobSpec)


@dataclass
class StoredJob:
    """One row of ``jobs``."""

    job_id: int
    spec: JobSpec
    state: str
    steps_done: int
    total_steps: int
    batch_size: int
    throughput: float
    run_time_s: float
    failures: int
    rounds_run: int
    submit_s: float
    finish_s: float | None
    reason: str
    batch_size_changes: int = 0
    startup_s: float | None = None
    shutdown_s: float | None = None
    applied_leases: tuple[int, ...] = ()


class Store:
    """The SQLite database of one clearinghouse.

    Args:
        path: database file (created with its tables if missing); ``":memory:"`` for tests.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            check = self.db.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                problems = " ".join(" ".join(str(row[0]).split()) for row in check[:3])
                self.db.close()
                raise StoreError(self.path, f"the database is corrupted (PRAGMA quick_check: {problems})")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
            have = {row[1] for row in self.db.execute("PRAGMA table_info(jobs)")}
            for column, decl in _ADDED_COLUMNS:
                if column not in have:
                    self.db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {decl}")
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(self.path, _cause(exc)) from None
        problem = self.write_problem()
        if problem is not None:
            self.db.close()
            raise StoreError(self.path, problem)

    def close(self) -> None:
        self.db.close()

    def write_problem(self) -> str | None:
        """Why the database cannot take a write now (None: it can). Writes nothing."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('__write_probe__', 0)")
            finally:
                self.db.execute("ROLLBACK")
        except (sqlite3.Error, OSError) as exc:
            return _cause(exc)
        return None

    # -- counters ---------------------------------------------------------------------------
    def get_meta(self, key: str, default: int = 0) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return int(row[0]) if row else default

    def set_meta(self, key: str, value: int) -> None:
        self.db.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(self, job_id: int, spec: JobSpec, submit_s: float, throughput: float,
                idempotency: tuple[str, str] | None = None) -> None:
        """Record an accepted job (state ``queued``) and, in the same transaction, its
        ``(idempotency key, request hash)``. Raises sqlite3.IntegrityError on a duplicate id or key."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT INTO jobs(job_id, spec, state, total_steps, batch_size, throughput, submit_s) VALUES(?,?,?,?,?,?,?)",
                (job_id, _spec_encoder.encode(spec), "queued", spec.total_steps, spec.batch_size, throughput, submit_s),
            )
            if idempotency is not None:
                self.db.execute("INSERT INTO idempotency(key, request_hash, job_id) VALUES(?,?,?)",
                                (idempotency[0], idempotency[1], job_id))

    def idempotency_keys(self) -> dict[str, tuple[int, str]]:
        """Every stored idempotency key: ``key -> (job_id, request_hash)``."""
        return {key: (job_id, digest) for key, digest, job_id in
                self.db.execute("SELECT key, request_hash, job_id FROM idempotency")}

    def update_job(self, job_id: int, **fields: object) -> None:
        """Set columns of one job (names as the ``jobs`` table)."""
        if not fields:
            return
        cols = ", ".join(f"{k}=?" for k in fields)
        self.db.execute(f"UPDATE jobs SET {cols} WHERE job_id=?", (*fields.values(), job_id))

    def jobs(self) -> list[StoredJob]:
        """Every job, in id order, with the ids of its applied (``done``) leases."""
        done: dict[int, list[int]] = {}
        for lease_id, job_id in self.db.execute("SELECT lease_id, job_id FROM leases WHERE state='done'"):
            done.setdefault(job_id, []).append(lease_id)
        out = []
        for row in self.db.execute(
            "SELECT job_id, spec, state, steps_done, total_steps, batch_size, throughput, run_time_s, failures,"
            " rounds_run, submit_s, finish_s, reason, batch_size_changes, startup_s, shutdown_s"
            " FROM jobs ORDER BY job_id"
        ):
            out.append(StoredJob(row[0], _spec_decoder.decode(row[1]), *row[2:], applied_leases=tuple(done.get(row[0], ()))))
        return out

    def max_job_id(self) -> int:
        row = self.db.execute("SELECT MAX(job_id) FROM jobs").fetchone()
        return -1 if row[0] is None else int(row[0])

    # -- predictor state -----------------------------------------------------------------------
    def save_predictor_states(self, states: list[tuple[int, bytes]]) -> None:
        """Store (job id, :mod:`predictor.state` bytes) pairs, replacing earlier ones, in one transaction."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO predictor_state(job_id, state) VALUES(?, ?)", states)

    def predictor_states(self) -> dict[int, bytes]:
        """Job id -> its stored predictor state."""
        return {int(job_id): bytes(state) for job_id, state in self.db.execute("SELECT job_id, state FROM predictor_state")}

    def forget_predictor_states(self, job_ids: Iterable[int]) -> None:
        """Delete the predictor states of ``job_ids`` (finished jobs)."""
        self.db.executemany("DELETE FROM predictor_state WHERE job_id=?", [(int(j),) for j in job_ids])

    # -- leases -------------------------------------------------------------------------------
    def add_lease(self, lease_id: int, job_id: int, round_index: int, gpu_ids: list[int], start_s: float, duration_s: float) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO leases VALUES(?,?,?,?,?,?,?)",
            (lease_id, job_id, round_index, json.dumps(gpu_ids), start_s, duration_s, "running"),
        )

    def set_lease_state(self, lease_id: int, state: str) -> None:
        self.db.execute("UPDATE leases SET state=? WHERE lease_id=?", (state, lease_id))

    def requeue_running_leases(self) -> list[int]:
        """Mark leases left ``running`` by a previous process as ``requeued``; returns their ids."""
        ids = [r[0] for r in self.db.execute("SELECT lease_id FROM leases WHERE state='running'")]
        self.db.execute("UPDATE leases SET state='requeued' WHERE state='running'")
        return ids

    def lease_states(self) -> dict[int, str]:
        return dict(self.db.execute("SELECT lease_id, state FROM leases"))

    def max_lease_id(self) -> int:
        row = self.db.execute("SELECT MAX(lease_id) FROM leases").fetchone()
        return 0 if row[0] is None else int(row[0])

    # -- nodes --------------------------------------------------------------------------------
    def nodes(self) -> dict[str, list[int]]:
        return {name: json.loads(ids) for name, ids in self.db.execute("SELECT name, gpu_ids FROM nodes")}

    def set_node(self, name: str, gpu_ids: list[int]) -> None:
        self.db.execute(
            "INSERT INTO nodes(name, gpu_ids) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET gpu_ids=excluded.gpu_ids",
            (name, json.dumps(gpu_ids)),
        )
