import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def pytest_addoption(parser):
    parser.addoption("--attnkit-lib", default=os.path.join(ROOT, "build-device", "tools", "libattnkit_c.so"))


@pytest.fixture(scope="session")
def attnkit_lib(request):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    path = request.config.getoption("--attnkit-lib")
    if not os.path.exists(path):
        pytest.skip(f"{path} not built")
    from bench_attention import Attnkit, load_lib

    return Attnkit(load_lib(path))
