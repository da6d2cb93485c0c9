"""The plan journal: a replay's re-plans on disk, so that a stopped replay resumes where it stopped.

:func:`market.shockwave.planner.plan_window` is a pure function of its arguments, and in simulation
its solvers run under deterministic limits only (one thread, a fixed seed, node limits). A replay
of the same trace with the same configuration therefore asks for the same re-plans, in the same
order, and gets the same plans. The journal keeps each plan under a digest of everything
``plan_window`` reads; a replay started again with the same journal reads the plans it finds
there instead of solving them, and appends the ones it solves. A reference-preset replay of a
900-job trace takes hours, nearly all of it in solves: after a crash, a stop or the end of a
working session, the rerun reaches the same round in minutes and goes on from there, and its
``results.json`` equals an uninterrupted replay's (``replans.journal_hits`` counts the plans read;
their ``solve_s`` are those measured when they were solved).

File format: records, each a 4-byte big-endian length, a msgpack payload and its 4-byte CRC-32.
The first record is the header: the format, and a digest of the planner's source files (their
syntax trees, so that an edit of a comment or a docstring keeps the journal) and of the solver and
numerics libraries' versions. A journal written by other planner code is refused (its plans might
differ). A record cut short by a crash (length, payload or CRC incomplete or
wrong) ends the journal: it is cut off when the journal is opened, and the plan it held is
solved again. Every record is flushed and fsynced before the replay goes on. One replay at a
time may hold a journal (an exclusive ``flock``).

The journal is the replay's (the planner in ``market/`` does no I/O): ``replay.simulate`` hands
:meth:`PlanJournal.plan_window` to the policy as its ``planner``. Live clusters do not use one:
their solvers have a wall-clock budget, so the same inputs need not give the same plan.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import os
import struct
import sys
import zlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import msgspec
import structlog

from configs import RESULT_LIBRARIES, installed_version
from market.shockwave.config import ShockwaveConfig
from market.shockwave.planner import plan_window, WindowPlan
from market.shockwave.tables import PlanJob
from workloads.errors import InputError

log = structlog.get_logger()

#: the journal's record format; a journal of another format is refused
FORMAT = 1
#: the planner's own files (relative to the project root): a change to any of them changes the header
PLANNER_SOURCES = ("market/shockwave", "market/solver.py")
#: libraries whose version can change a plan or its record: those that can change any figure, and
#: msgspec, which encodes the records
PLANNER_LIBRARIES = (*RESULT_LIBRARIES, "msgspec")
#: the largest record accepted when reading (a 900-job plan is about 100 kB)
RECORD_MAX = 64 * 2**20

_LENGTH = struct.Struct(">I")


class _Header(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: int
    planner: str


class _Entry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    key: bytes
    plan: WindowPlan


def code_form(source: bytes, filename: str = "<planner>") -> bytes:
    """What of a Python source file can change what it computes: its syntax tree without the
    docstrings of the module, its classes and functions, and without line numbers; comments and
    layout are not in the tree. A file that does not parse gives its bytes as they are.

    A reference-preset replay of a large trace takes hours, and the journal is refused as soon as
    the planner's digest changes: an edit of a docstring or a comment in ``market/shockwave`` must
    not cost those hours (the thirty-sixth round's docstring edits did, session 52).
    """
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError):
        return source
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                # a body of a docstring alone keeps a `pass` in its place, so that it stays a body
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False).encode()


def planner_digest() -> str:
    """SHA-256 (hex) of the planner's source files (:data:`PLANNER_SOURCES`, ``.py`` files in name
    order, each in its :func:`code_form`), of the Python version that parsed them (the form of the
    tree is the version's) and of the installed versions of :data:`PLANNER_LIBRARIES`."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(f"python={sys.version_info.major}.{sys.version_info.minor}\0".encode())
    for source in PLANNER_SOURCES:
        path = root / source
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            name = str(file.relative_to(root))
            h.update(name.encode() + b"\0" + code_form(file.read_bytes(), name) + b"\0")
    for name in PLANNER_LIBRARIES:
        h.update(f"{name}={installed_version(name)}\0".encode())
    return h.hexdigest()


def plan_key(jobs: Sequence[PlanJob], *, num_gpus: int, round_index: int, now_s: float, round_duration_s: float,
             config: ShockwaveConfig, running: Sequence[int] = (),
             restart_s: Mapping[int, float] | None = None) -> bytes:
    """SHA-256 digest (32 bytes) of one call of :func:`plan_window`: every argument, floats bit for bit.

    ``jobs`` are msgspec Structs or dataclasses (``predictor.Prediction``); ``restart_s`` is keyed
    in id order, so its insertion order does not matter.
    """
    payload = msgspec.msgpack.encode((
        FORMAT, list(jobs), num_gpus, round_index, float(now_s), float(round_duration_s), config,
        [int(j) for j in running], sorted((int(j), float(s)) for j, s in (restart_s or {}).items()),
    ))
    return hashlib.sha256(payload).digest()


class PlanJournal:
    """Re-plans of one replay, read from and appended to ``path`` (see the module docstring).

    Attributes:
        path: the journal file.
        hits: plans read from the journal since it was opened.
        solved: plans solved and appended since it was opened.
        dropped_bytes: bytes of a torn last record cut off when it was opened (0 if none).

    Raises (on opening):
        InputError: the file cannot be opened for appending (a folder, no permission), is not a
            plan journal, was written by other planner code or another format, or another replay
            holds it.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.hits = 0
        self.solved = 0
        self.dropped_bytes = 0
        self._plans: dict[bytes, WindowPlan] = {}
        self._digest = planner_digest()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a+b")  # noqa: SIM115 - held until close()
        except OSError as err:
            raise InputError(str(self.path), f"cannot open the plan journal: {err.strerror or err}") from None
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.close()
            raise InputError(str(self.path), "the plan journal is in use by another replay") from None
        try:
            self._load()
        except BaseException:
            self._file.close()
            raise

    def _load(self) -> None:
        self._file.seek(0)
        data = self._file.read()
        records, end = _read_records(data)
        if not records:
            if data:
                raise InputError(str(self.path), "not a plan journal (no header record)")
            self._append(msgspec.msgpack.encode(_Header(FORMAT, self._digest)))
            return
        try:
            header = msgspec.msgpack.decode(records[0], type=_Header)
        except msgspec.ValidationError as err:
            raise InputError(str(self.path), f"not a plan journal: {err}") from None
        if header.format != FORMAT:
            raise InputError(str(self.path), f"plan journal format {header.format}; this version reads {FORMAT}")
        if header.planner != self._digest:
            raise InputError(
                str(self.path),
                "the plan journal was written by other planner code or solver versions, whose plans may "
                "differ; delete it or give another journal path",
            )
        decoder = msgspec.msgpack.Decoder(_Entry)
        for index, record in enumerate(records[1:], start=1):
            try:
                entry = decoder.decode(record)
            except msgspec.DecodeError as err:
                raise InputError(str(self.path), f"record {index}: {err}") from None
            self._plans[entry.key] = entry.plan
        if end < len(data):
            self.dropped_bytes = len(data) - end
            log.warning("plan_journal_torn_record", path=str(self.path), dropped_bytes=self.dropped_bytes)
            self._file.truncate(end)
            self._file.flush()
            os.fsync(self._file.fileno())

    def __len__(self) -> int:
        return len(self._plans)

    def _append(self, payload: bytes) -> None:
        self._file.seek(0, os.SEEK_END)
        self._file.write(_LENGTH.pack(len(payload)) + payload + _LENGTH.pack(zlib.crc32(payload)))
        self._file.flush()
        os.fsync(self._file.fileno())

    def plan_window(self, jobs: Sequence[PlanJob], **kwargs: Any) -> WindowPlan:
        """:func:`market.shockwave.planner.plan_window` with the same arguments: the journal's plan
        for them if it holds one, else a plan solved now and appended before it is returned."""
        key = plan_key(jobs, **kwargs)
        plan = self._plans.get(key)
        if plan is not None:
            self.hits += 1
            return plan
        plan = plan_window(jobs, **kwargs)
        self._append(msgspec.msgpack.encode(_Entry(key, plan)))
        self._plans[key] = plan
        self.solved += 1
        return plan

    def close(self) -> None:
        """Release the file (and its lock). The journal keeps every plan appended so far."""
        if not self._file.closed:
            self._file.close()


def _read_records(data: bytes) -> tuple[list[bytes], int]:
    """The complete records of ``data`` in order, and the offset where they end (a torn or
    corrupt record, or the end of ``data``)."""
    records, at = [], 0
    size = _LENGTH.size
    while at + size <= len(data):
        (length,) = _LENGTH.unpack_from(data, at)
        stop = at + size + length + size
        if length > RECORD_MAX or stop > len(data):
            break
        payload = data[at + size: at + size + length]
        if _LENGTH.unpack_from(data, stop - size)[0] != zlib.crc32(payload):
            break
        records.append(payload)
        at = stop
    return records, at
