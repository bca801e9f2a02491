"""The driver-upgrade sequence compares one GPU unit with itself: ``--fp4-same-unit`` refuses a
baseline from another unit or one that records no unit."""

from dataclasses import replace

import pytest

from fakes.benchjson import H200
from fp4bench.gate.baseline import BaselineError
from fp4bench.gate.unit import require_same_unit

U1 = replace(H200, gpu_uuid="GPU-1111")
U2 = replace(H200, gpu_uuid="GPU-2222")


def test_same_uuid_is_accepted():
    require_same_unit(U1, replace(U1, driver="590.1"))


@pytest.mark.parametrize(("base", "now", "msg"), [
    (U1, U2, "recorded on GPU GPU-1111, this run is on GPU-2222"),
    (H200, U1, "the baseline records no GPU UUID"),
    (U1, H200, "this run's GPU UUID is unknown"),
])
def test_other_or_unknown_unit_is_refused(base, now, msg):
    with pytest.raises(BaselineError, match=msg):
        require_same_unit(base, now)
