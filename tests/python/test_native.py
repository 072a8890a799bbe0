"""compile_native without a GPU: building a user's .cu against the package's headers and libmeshcomm, the
cache, loading, and the errors of a bad file (docs/native.md). Needs nvcc (CI has it); the 2-GPU run of the
built algorithm is in test_gpu.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import meshcomm
from meshcomm import native

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torch" / "native_allreduce.cu"


def find_nvcc():
    try:
        return native._find_nvcc(meshcomm._meshcomm._native_build_info())
    except meshcomm.InvalidUsageError:
        return None


needs_nvcc = pytest.mark.skipif(find_nvcc() is None,
                                reason="compile_native needs nvcc (CUDACXX, the build's nvcc, CUDA_HOME or PATH)")


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_headers_ship_with_the_package():
    for header in ("native_algorithm.hpp", "algorithm.hpp", "comm_resources.hpp", "device/comm_device.hpp",
                   "device/reduce.hpp"):
        assert (native.INCLUDE_DIR / "meshcomm" / header).is_file(), header


def test_build_info_names_this_installation():
    info = meshcomm._meshcomm._native_build_info()
    assert Path(info["libmeshcomm"]).is_file() and "libmeshcomm" in Path(info["libmeshcomm"]).name
    assert info["native_abi_version"] >= 1
    assert all(a.isdigit() for a in info["cuda_architectures"].split(","))


@needs_nvcc
def test_compile_load_and_cache(tmp_path):
    path, compiled = native.build_native_library(EXAMPLE, arch=90, cache_dir=tmp_path)
    assert compiled and path.parent == tmp_path and path.name.startswith("native_allreduce-")
    again, compiled_again = native.build_native_library(EXAMPLE, arch=90, cache_dir=tmp_path)
    assert (again, compiled_again) == (path, False)
    other_arch, compiled_other = native.build_native_library(EXAMPLE, arch=[90, 100], cache_dir=tmp_path)
    assert compiled_other and other_arch != path  # the command is part of the key

    needed = native._dynamic_dependencies(path)
    if needed is not None:  # one libstdc++ (the process's), one libmeshcomm (this one)
        assert any(n.startswith("libstdc++.so") for n in needed), needed
        assert any(n.startswith("libmeshcomm") for n in needed), needed

    a = meshcomm.compile_native("user_oneshot_allreduce", EXAMPLE, arch=90, cache_dir=tmp_path)
    b = meshcomm.compile_native("another_name", EXAMPLE, arch=90, cache_dir=tmp_path)
    assert isinstance(a, meshcomm.NativeAlgorithm) and isinstance(a, meshcomm.Algorithm)
    assert (a.name, a.collective, a.library_path) == ("user_oneshot_allreduce", meshcomm.Collective.ALLREDUCE,
                                                      str(path))
    assert b.name == "another_name" and b.library_path == a.library_path
    assert repr(a) == f"<meshcomm.NativeAlgorithm 'user_oneshot_allreduce' (allreduce) from {path}>"
    collection = meshcomm.AlgorithmCollection()
    collection.add(a)
    assert collection["user_oneshot_allreduce"].name == "user_oneshot_allreduce"


@needs_nvcc
def test_a_compile_error_shows_the_compiler_output(tmp_path):
    src = write(tmp_path, "broken.cu", "#include <meshcomm/native_algorithm.hpp>\nint f() { return undefined_name; }\n")
    with pytest.raises(meshcomm.NativeCompileError) as info:
        meshcomm.compile_native("broken", src, arch=90, cache_dir=tmp_path / "cache")
    text = str(info.value)
    assert "nvcc failed" in text and "undefined_name" in text and str(src) in text
    assert isinstance(info.value, meshcomm.InvalidUsageError)
    assert info.value.code == meshcomm.ErrorCode.INVALID_USAGE
    assert not any(p.suffix in (".so", ".lock") for p in (tmp_path / "cache").iterdir())  # nothing left behind


@needs_nvcc
def test_a_file_without_the_export_macro_is_refused(tmp_path):
    src = write(tmp_path, "no_export.cu", "#include <meshcomm/native_algorithm.hpp>\nint unrelated() { return 1; }\n")
    with pytest.raises(meshcomm.InvalidUsageError, match="does not export meshcomm_native_abi_version") as info:
        meshcomm.compile_native("no_export", src, arch=90, cache_dir=tmp_path)
    assert "MESHCOMM_EXPORT_NATIVE_ALGORITHM" in str(info.value)


@needs_nvcc
def test_a_library_of_another_abi_version_is_refused(tmp_path):
    src = write(tmp_path, "old_abi.cu", """
#include <meshcomm/native_algorithm.hpp>
extern "C" __attribute__((visibility("default"))) int meshcomm_native_abi_version() { return 999; }
extern "C" __attribute__((visibility("default"))) meshcomm::Algorithm* meshcomm_native_create() { return nullptr; }
extern "C" __attribute__((visibility("default"))) void meshcomm_native_destroy(meshcomm::Algorithm*) {}
""")
    with pytest.raises(meshcomm.InvalidUsageError, match="built against meshcomm native ABI 999"):
        meshcomm.compile_native("old_abi", src, arch=90, cache_dir=tmp_path)


def test_bad_arguments(tmp_path):
    with pytest.raises(meshcomm.InvalidUsageError, match="is not a file"):
        meshcomm.compile_native("x", tmp_path / "missing.cu", cache_dir=tmp_path)
    with pytest.raises(meshcomm.InvalidUsageError, match="cannot load '/nonexistent/lib.so'"):
        meshcomm._meshcomm._load_native_algorithm("/nonexistent/lib.so", "x")


@needs_nvcc
def test_an_empty_name_is_refused(tmp_path):
    with pytest.raises(meshcomm.InvalidUsageError, match="the name must not be empty"):
        meshcomm.compile_native("", EXAMPLE, arch=90, cache_dir=tmp_path)


@needs_nvcc
def test_concurrent_builds_of_one_file_compile_once(tmp_path):
    """The ranks of a node call compile_native together: one compiles, the others wait and load it."""
    code = ("import sys; from meshcomm import native; "
            "p, c = native.build_native_library(sys.argv[1], arch=90, cache_dir=sys.argv[2]); print(int(c), p)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(EXAMPLE), str(tmp_path)], stdout=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=600)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sorted(int(o[0]) for o in outs) == [0, 0, 1], outs
    assert len({o[1] for o in outs}) == 1
    assert not list(tmp_path.glob("*.lock"))  # the builder removed its lock file


@needs_nvcc
def test_a_library_with_its_own_static_libstdcxx_is_refused(tmp_path):
    """The trap of some images' CXX (finds only libstdc++.a): such a library would split the C++ runtime."""
    with pytest.raises(meshcomm.NativeCompileError, match="carries its own copy of the C.. runtime"):
        meshcomm.compile_native("static_copy", EXAMPLE, arch=90, cache_dir=tmp_path,
                                extra_flags=["-Xcompiler=-static-libstdc++"])
    assert not any(p.suffix == ".so" for p in tmp_path.iterdir())
