"""The package itself: import without torch, one libmeshcomm per process, shared libstdc++."""

import os
import shutil
import subprocess
import sys

import meshcomm


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_works_without_torch():
    # None in sys.modules makes every `import torch` fail, so any torch import at package import time would raise.
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "import meshcomm\n"
        "assert meshcomm.DataType.BFLOAT16 == meshcomm.to_data_type('torch.bfloat16')\n"
        "print('imported', meshcomm.__version__)\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"imported {meshcomm.__version__}"


def test_version_matches_cmake_project():
    assert meshcomm.__version__.count(".") == 2
    assert all(part.isdigit() for part in meshcomm.__version__.split("."))


def mapped_libraries():
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps if "/" in line.split()[-1]}


def test_one_libmeshcomm_in_the_process():
    core = {p for p in mapped_libraries() if os.path.basename(p).startswith("libmeshcomm.so")}
    assert len(core) == 1, f"libmeshcomm mapped from several files: {sorted(core)}"
    (path,) = core
    extension_dir = os.path.dirname(meshcomm._meshcomm.__file__)
    # Wheel: next to the extension. Build tree: <build>/libmeshcomm.so.*, the extension in <build>/python/meshcomm.
    candidates = {os.path.realpath(extension_dir), os.path.realpath(os.path.join(extension_dir, "..", ".."))}
    assert os.path.dirname(os.path.realpath(path)) in candidates, (path, extension_dir)


def test_extension_links_the_shared_core_and_libstdcxx():
    if shutil.which("ldd") is None:
        import pytest

        pytest.skip("ldd not found: cannot list the extension's shared libraries")
    proc = subprocess.run(["ldd", meshcomm._meshcomm.__file__], capture_output=True, text=True, check=True)
    names = {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
    assert any(n.startswith("libmeshcomm.so") for n in names), proc.stdout
    assert "libstdc++.so.6" in names, proc.stdout
    assert "not found" not in proc.stdout, proc.stdout
