"""The judge's side of the data path: runner descriptions are validated, never trusted."""

from __future__ import annotations

import mmap
import os

import pytest
import torch

from engine.grading.judge.wire import (
    Foreign,
    ProtocolError,
    Transport,
    foreign,
    raw_bytes,
    tensor_from_bytes,
)


def _desc(**over: object) -> dict[str, object]:
    base = {"dtype": "float32", "shape": [2, 3], "stride": [3, 1], "offset": 0}
    base.update(over)
    return base


def test_a_valid_description_builds_a_judge_owned_view() -> None:
    source = torch.arange(6, dtype=torch.float32)
    t = tensor_from_bytes(raw_bytes(source).clone(), _desc())
    assert type(t) is torch.Tensor and t.tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize(
    "bad",
    [
        _desc(dtype="no_such_dtype"),
        _desc(dtype="__class__"),
        _desc(shape=[2, 4]),  # past the 24 bytes
        _desc(offset=1),
        _desc(stride=[3, 2]),
        _desc(shape=[2, -3]),
        _desc(shape=[2], stride=[3, 1]),
        _desc(shape="2,3"),
        _desc(offset=1.5),
        _desc(shape=[1] * 17, stride=[1] * 17),
    ],
)
def test_malformed_or_overreaching_descriptions_are_refused(bad: dict[str, object]) -> None:
    raw = raw_bytes(torch.zeros(6, dtype=torch.float32)).clone()
    with pytest.raises(ProtocolError):
        tensor_from_bytes(raw, bad)


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("t")
    os.write(fd, data)
    return fd


def test_fetch_reads_cpu_leaves_from_the_memfd_only_within_its_size() -> None:
    transport = Transport(False, lambda m: {})
    payload = torch.arange(4, dtype=torch.int32)
    data = bytes(raw_bytes(payload).numpy())
    ok = {
        "tuple": [
            {
                "t": {
                    **_desc(dtype="int32", shape=[4], stride=[1]),
                    "device": "cpu",
                    "nbytes": 16,
                    "at": 0,
                }
            },
            {"v": 3},
        ]
    }
    fd = _memfd(data)
    out, described = transport.fetch(ok, [fd])
    os.close(fd)
    assert isinstance(out, tuple) and out[0].tolist() == [0, 1, 2, 3] and out[1] == 3
    assert len(described) == 1
    over = {
        "t": {**_desc(dtype="int32", shape=[4], stride=[1]), "device": "cpu", "nbytes": 16, "at": 8}
    }
    fd = _memfd(data)
    with pytest.raises(ProtocolError):
        transport.fetch(over, [fd])
    os.close(fd)


@pytest.mark.parametrize(
    "tree",
    [
        {"v": object.__name__},  # a str is fine ...
        {"v": {"nested": "dict"}},  # ... but not a dict scalar
        {"list": "not a list"},
        {"t": "not a dict"},
        {"what": 1},
        [1, 2],
    ],
)
def test_fetch_refuses_malformed_trees(tree: object) -> None:
    transport = Transport(False, lambda m: {})
    if tree == {"v": "object"}:
        assert transport.fetch(tree, [])[0] == "object"
        return
    with pytest.raises(ProtocolError):
        transport.fetch(tree, [])


def test_a_cuda_leaf_on_a_cpu_evaluation_is_refused() -> None:
    transport = Transport(False, lambda m: {})
    tree = {"t": {**_desc(), "device": "cuda", "nbytes": 24, "handle": "00" * 64, "ipc_offset": 0}}
    with pytest.raises(ProtocolError):
        transport.fetch(tree, [])


def test_foreign_leaves_carry_a_sanitised_name_and_never_compare_equal() -> None:
    leaf = foreign("evil.\x1b]52;c;AAAA\x07Tensor")
    assert isinstance(leaf, Foreign)
    name = f"{type(leaf).__module__}.{type(leaf).__name__}"
    assert "\x1b" not in name and "\x07" not in name and ";" not in name
    assert leaf != leaf  # noqa: PLR0124 - a stand-in never equals anything


def test_shipping_cpu_inputs_lays_out_every_leaf_and_keeps_pristine_copies() -> None:
    transport = Transport(False, lambda m: {})
    inputs = [torch.arange(5, dtype=torch.float32)[1:4], 2.5, (torch.ones(2, dtype=torch.bool),)]
    shipment = transport.ship(inputs)
    first = shipment.layout[0]["t"]
    assert first["offset"] == 1 and first["shape"] == [3] and first["nbytes"] == 20
    assert shipment.layout[1] == {"v": 2.5}
    assert "tuple" in shipment.layout[2]
    region = mmap.mmap(shipment.fds[0], 0)
    assert region[:20] == bytes(raw_bytes(inputs[0]).numpy())
    for live, pristine in shipment.views:
        assert torch.equal(live, pristine)
    shipment.views[0][0][0] = 7  # the runner writes into the shared input memory ...
    assert not torch.equal(*shipment.views[0])  # ... and the judge sees it
    shipment.close()


def test_shipped_and_fetched_tensors_are_freed_without_the_garbage_collector() -> None:
    """A self-referencing helper once kept each call's inputs alive until gc ran: on p51
    (12 GiB of inputs per draw) the judge ran out of GPU memory after ten draws."""
    import gc
    import weakref

    transport = Transport(False, None)
    gc.disable()
    try:
        data = torch.arange(6, dtype=torch.float32)
        nested = [data, (torch.ones(2), 3)]
        watched = [weakref.ref(data), weakref.ref(nested[1][0])]
        shipment = transport.ship(nested)
        shipment.close()
        del shipment, nested, data
        assert [w() for w in watched] == [None, None]

        raw = raw_bytes(torch.arange(4, dtype=torch.float32)).numpy().tobytes()
        fd = _memfd(raw)
        desc = {
            "dtype": "float32",
            "shape": [4],
            "stride": [1],
            "offset": 0,
            "device": "cpu",
            "nbytes": 16,
            "at": 0,
        }
        out, _ = transport.fetch({"list": [{"t": desc}]}, [fd])
        os.close(fd)
        watched_out = weakref.ref(out[0])
        del out
        assert watched_out() is None
    finally:
        gc.enable()
