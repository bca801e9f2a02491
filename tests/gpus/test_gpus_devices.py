"""Visible GPUs by UUID without CUDA (``fp4bench.gpus.devices``), as CUDA_VISIBLE_DEVICES selects them."""

from __future__ import annotations

import pytest

from fp4bench.gpus import devices
from fp4bench.gpus.devices import GpuListError, pin_env, visible_gpus


@pytest.fixture
def four(monkeypatch):
    monkeypatch.setenv(devices.FAKE_ENV, "GPU-aa11,GPU-bb22,GPU-cc33,GPU-dd44")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_all_gpus_in_order_without_a_selection(four):
    assert [g.uuid for g in visible_gpus()] == ["GPU-aa11", "GPU-bb22", "GPU-cc33", "GPU-dd44"]
    assert [g.index for g in visible_gpus()] == [0, 1, 2, 3]


def test_indices_and_uuid_prefixes_select_in_the_order_given(four, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,GPU-bb")
    got = visible_gpus()
    assert [(g.index, g.uuid) for g in got] == [(0, "GPU-dd44"), (1, "GPU-bb22")]


def test_an_out_of_range_index_ends_the_list_as_cuda_does(four, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7,0")
    assert [g.uuid for g in visible_gpus()] == ["GPU-bb22"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


def test_an_ambiguous_or_unknown_uuid_and_a_repeated_gpu_are_errors(four, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-")
    with pytest.raises(GpuListError, match="matches 4 GPUs"):
        visible_gpus()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-ffff")
    with pytest.raises(GpuListError, match="matches 0 GPUs"):
        visible_gpus()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,GPU-aa11")
    with pytest.raises(GpuListError, match="twice"):
        visible_gpus()


def test_a_count_gives_numbered_fakes_and_a_bad_fake_list_is_refused(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv(devices.FAKE_ENV, "2")
    assert [g.uuid for g in visible_gpus()] == ["GPU-fake-0", "GPU-fake-1"]
    monkeypatch.setenv(devices.FAKE_ENV, "gpu0,gpu1")
    with pytest.raises(GpuListError, match="UUIDs"):
        visible_gpus()


def test_a_worker_is_pinned_by_uuid(four):
    g = visible_gpus()[2]
    assert pin_env(g) == {"CUDA_VISIBLE_DEVICES": "GPU-cc33"}


def test_a_pinned_worker_polls_nvml_for_its_own_gpu(four, monkeypatch):
    """The worker's telemetry sampler reads the NVML device of its pinned GPU, not NVML device 0."""
    import dataclasses
    import types

    import torch

    from fp4bench.run.worker.child import Child

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-cc33")
    child = Child({"device": "cpu", "seed": 0})
    child.fingerprint = dataclasses.replace(child.fingerprint, gpu_uuid="GPU-cc33")
    child.telemetry = True
    # the child's device as a pinned worker sees it: cuda:0, whose torch properties carry no UUID
    child.device = torch.device("cuda:0")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: types.SimpleNamespace(name="x"))
    assert child._sampler().gpu == "GPU-cc33"


def test_a_fake_gpu_list_naming_one_uuid_twice_is_refused(monkeypatch):
    """Two workers pinned to one GPU each ran half of the other's share (half the sweep)."""
    monkeypatch.setenv(devices.FAKE_ENV, "GPU-aa11,GPU-bb22,GPU-aa11")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(GpuListError, match="names GPU-aa11 twice; a GPU is listed once"):
        visible_gpus()
