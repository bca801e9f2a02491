"""Where the tests find the repository: its root, the test data, these fakes and the benchmark file."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
DATA = TESTS / "data"
FAKES = TESTS / "fakes"
BENCH_FILE = ROOT / "bench" / "test_fp4_gemm.py"
