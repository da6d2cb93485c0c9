"""Wire format: every message type survives MessagePack encode/decode, and bad bytes are
rejected with an error that names the field."""

from __future__ import annotations

import math

import msgpack
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.kernel.messages import MESSAGE_TYPES, JobSpec, Lease, MessageDecodeError, SubmitJob, decode, encode
from workloads.profile import JobProfile

_FINITE = dict(allow_nan=False, allow_infinity=False)


def _strategy(t: msgspec.inspect.Type) -> st.SearchStrategy:
    """A hypothesis strategy for a msgspec type description (respects ge/gt/le bounds)."""
    I = msgspec.inspect
    if isinstance(t, I.IntType):
        lo = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else -(2**40))
        return st.integers(min_value=lo, max_value=t.le if t.le is not None else 2**40)
    if isinstance(t, I.FloatType):
        lo = t.ge if t.ge is not None else t.gt
        hi = t.le if t.le is not None else 1e12
        return st.floats(min_value=lo, max_value=hi, exclude_min=t.gt is not None, **_FINITE) if lo is not None else st.floats(min_value=-1e12, max_value=hi, **_FINITE)
    if isinstance(t, I.StrType):
        return st.text(max_size=20)
    if isinstance(t, I.BoolType):
        return st.booleans()
    if isinstance(t, I.BytesType):
        return st.binary(max_size=20)
    if isinstance(t, I.NoneType):
        return st.none()
    if isinstance(t, I.LiteralType):
        return st.sampled_from(t.values)
    if isinstance(t, I.ListType):
        return st.lists(_strategy(t.item_type), max_size=4)
    if isinstance(t, I.TupleType):
        return st.tuples(*(_strategy(x) for x in t.item_types))
    if isinstance(t, I.VarTupleType):
        return st.lists(_strategy(t.item_type), max_size=4).map(tuple)
    if isinstance(t, I.DictType):
        return st.dictionaries(st.text(max_size=5), st.integers(-(2**40), 2**40), max_size=3)
    if isinstance(t, I.UnionType):
        return st.one_of(*(_strategy(x) for x in t.types))
    if isinstance(t, I.StructType):
        return _struct_strategy(t.cls)
    raise NotImplementedError(t)


def _profile_strategy() -> st.SearchStrategy:
    """Profiles keep one batch size and one duration per epoch (its constructor checks it)."""
    return st.integers(min_value=0, max_value=4).flatmap(
        lambda n: st.builds(
            JobProfile,
            samples_per_epoch=st.integers(min_value=1, max_value=2**40),
            bs_every_epoch=st.lists(st.integers(min_value=1, max_value=2**40), min_size=n, max_size=n).map(tuple),
            duration_every_epoch=st.lists(st.floats(min_value=0, max_value=1e12, **_FINITE), min_size=n, max_size=n).map(tuple),
        )
    )


def _struct_strategy(cls: type) -> st.SearchStrategy:
    if cls is JobProfile:
        return _profile_strategy()
    info = msgspec.inspect.type_info(cls)
    fields = {f.name: _strategy(f.type) for f in info.fields}
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda c: c.__name__)
def test_every_message_type_round_trips(cls):
    @settings(max_examples=25, deadline=None)
    @given(_struct_strategy(cls))
    def check(msg):
        data = encode(msg)
        assert decode(data) == msg
        # third-party clients can read it with plain msgpack: a map with the type tag
        raw = msgpack.unpackb(data)
        assert raw["type"] == msgspec.inspect.type_info(cls).tag

    check()


def _bounded_numbers(cls: type) -> list[tuple[str, object]]:
    """(field, a value just out of its bounds) for each top-level bounded number field of ``cls``
    (unbounded floats are measurements only logged: a trainer's loss and noise-scale statistic)."""
    out = []
    for f in msgspec.inspect.type_info(cls).fields:
        types = f.type.types if isinstance(f.type, msgspec.inspect.UnionType) else (f.type,)
        for t in types:
            if isinstance(t, msgspec.inspect.FloatType) and (t.ge, t.gt, t.le) != (None, None, None):
                out.append((f.name, math.nan))
            elif isinstance(t, msgspec.inspect.IntType) and t.le is not None:
                out.append((f.name, t.le + 1))
    return out


@pytest.mark.parametrize("cls", [c for c in MESSAGE_TYPES if _bounded_numbers(c)], ids=lambda c: c.__name__)
def test_every_number_a_peer_sends_is_bounded(cls):
    # NaN or one past the bound in any number field is refused at decoding, naming the field
    @settings(max_examples=3, deadline=None)
    @given(_struct_strategy(cls))
    def check(msg):
        for name, bad in _bounded_numbers(cls):
            raw = msgpack.unpackb(encode(msg))
            raw[name] = bad
            with pytest.raises(MessageDecodeError, match=name):
                decode(msgpack.packb(raw))

    check()


def _submit() -> SubmitJob:
    return SubmitJob(src="api", dst="clearinghouse", spec=JobSpec(model="LM", batch_size=10, scale_factor=1, total_steps=100))


def test_decode_names_a_wrong_type():
    raw = msgpack.unpackb(encode(_submit()))
    raw["spec"]["scale_factor"] = "two"
    with pytest.raises(MessageDecodeError, match=r"spec\.scale_factor"):
        decode(msgpack.packb(raw))


def test_decode_rejects_unknown_fields_and_types():
    raw = msgpack.unpackb(encode(_submit()))
    raw["spec"]["colour"] = "red"
    with pytest.raises(MessageDecodeError, match="colour"):
        decode(msgpack.packb(raw))
    with pytest.raises(MessageDecodeError, match="type"):
        decode(msgpack.packb({"type": "no_such_message"}))
    with pytest.raises(MessageDecodeError, match="malformed"):
        decode(b"\xc1\xff")


@pytest.mark.parametrize("field, value", [
    ("total_steps", -5),
    ("total_steps", 10**12 + 1),  # workloads.models.JOB_TOTAL_STEPS_MAX
    ("scale_factor", 100_001),
    ("priority_weight", 1e300),
    ("arrival_s", 1e300),  # the clock's float no longer moves by a round
    ("duration_s", float("inf")),
])
def test_decode_enforces_ranges(field, value):
    raw = msgpack.unpackb(encode(_submit()))
    raw["spec"][field] = value
    with pytest.raises(MessageDecodeError, match=field):
        decode(msgpack.packb(raw))


def test_lease_floats_survive_exactly():
    lease = Lease(lease_id=1, job_id=2, round_index=3, gpu_ids=[0, 1], start_s=math.pi * 1e4, duration_s=120.0,
                  model="LM", mode="gns", scale_factor=2, initial_batch_size=10, batch_size=20,
                  throughput=94.91234567890123, steps_done=5, remaining_steps=7)
    assert decode(encode(lease)).throughput == lease.throughput
