"""Fake ``flashinfer.jit.cpp_ext.get_cuda_version``: the nvcc version of the simulated machine."""

from packaging.version import Version

from fp4sim_world import MM


def get_cuda_version() -> Version:
    return Version(MM.cuda)
