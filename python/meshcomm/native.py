"""compile_native: JIT-builds a user's .cu file that defines a native algorithm, against this installation's
headers and libmeshcomm, loads it and returns it as a meshcomm.NativeAlgorithm (docs/native.md).

Builds are cached by content (the source file, meshcomm's headers, the compiler command), so ranks and
later runs load the library built once; concurrent builds of the same key (the ranks of one node) take a
file lock, and one of them compiles.
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import _meshcomm
from ._meshcomm import ErrorCode, InvalidUsageError

INCLUDE_DIR = Path(__file__).resolve().parent / "include"


class NativeCompileError(InvalidUsageError):
    """The compiler could not build a native algorithm: str() has the command and the compiler's output."""


def _invalid(message, kind=InvalidUsageError):
    error = kind(message)
    error.code = ErrorCode.INVALID_USAGE
    return error


def _existing(path):
    return path if path and Path(path).is_file() else None


def _find_nvcc(info):
    """CUDACXX, then the nvcc libmeshcomm was built with, then $CUDA_HOME/bin/nvcc, then PATH."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [
        os.environ.get("CUDACXX"),
        info["cuda_compiler"],
        os.path.join(cuda_home, "bin", "nvcc") if cuda_home else None,
        shutil.which("nvcc"),
    ]
    for c in candidates:
        if _existing(c):
            return c
    raise _invalid("compile_native: no nvcc found (set CUDACXX or CUDA_HOME, or put nvcc on PATH)")


def _find_host_compiler(info):
    """MESHCOMM_NATIVE_CCBIN, else the C++ compiler libmeshcomm was built with (one CMake checked links the
    shared libstdc++), else nvcc's default."""
    return os.environ.get("MESHCOMM_NATIVE_CCBIN") or _existing(info["host_compiler"])


def _architectures(arch, comm):
    """Compute capabilities as ints (90 = sm_90): `arch` if given, else comm's GPU, else every visible
    GPU, else what libmeshcomm was built for."""
    if arch is not None:
        archs = [arch] if isinstance(arch, (int, str)) else list(arch)
        return sorted({int(str(a).replace("sm_", "")) for a in archs})
    devices = [comm.cuda_device] if comm is not None else range(_meshcomm.cuda_device_count())
    found = {major * 10 + minor for major, minor in filter(None, map(_meshcomm._compute_capability, devices))}
    if found:
        return sorted(found)
    return sorted(int(a) for a in _meshcomm._native_build_info()["cuda_architectures"].split(",") if a)


def _link_flags(libmeshcomm):
    """Link the libmeshcomm this process loaded, by the name that resolves to it (its SONAME in a build tree,
    libmeshcomm.so in a wheel), and find it there at run time."""
    lib = Path(libmeshcomm)
    name = "-lmeshcomm" if (lib.parent / "libmeshcomm.so").exists() else f"-l:{lib.name}"
    return [f"-L{lib.parent}", name, f"-Xlinker=-rpath={lib.parent}"]


def _compile_command(nvcc, host_compiler, archs, libmeshcomm, source, output, extra_flags):
    cmd = [nvcc, "-std=c++17", "-O3", "--shared", "-Xcompiler=-fPIC,-fvisibility=hidden",
           "--expt-relaxed-constexpr", "-cudart=shared", f"-I{INCLUDE_DIR}", f"-I{source.parent}"]
    if host_compiler:
        cmd.append(f"-ccbin={host_compiler}")
    for a in archs:
        cmd.append(f"-gencode=arch=compute_{a},code=[sm_{a},compute_{a}]")
    cmd += list(extra_flags)
    cmd += ["-o", str(output), str(source)]
    return cmd + _link_flags(libmeshcomm)


def _headers_digest():
    h = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(INCLUDE_DIR)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _cache_dir(cache_dir):
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get("MESHCOMM_NATIVE_CACHE"):
        return Path(os.environ["MESHCOMM_NATIVE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "meshcomm" / "native"


def _dynamic_dependencies(library):
    """DT_NEEDED entries of a shared library (readelf), or None where readelf is missing."""
    readelf = shutil.which("readelf")
    if readelf is None:
        return None
    out = subprocess.run([readelf, "-d", str(library)], capture_output=True, text=True, check=False).stdout
    return [line.split("[", 1)[1].split("]", 1)[0] for line in out.splitlines() if "(NEEDED)" in line]


# Symbols only the C++ runtime itself defines (libsupc++): a library that defines them carries a copy.
_CXX_RUNTIME_SYMBOLS = ("__cxa_", "__gxx_personality")


def _check_runtime_links(library, cmd):
    """A library carrying a private static libstdc++ breaks exceptions and iostreams next to torch's (the
    trap of a host compiler that finds only libstdc++.a): refuse it."""
    nm = shutil.which("nm")
    if nm is None:
        return
    copied = set()
    for table in (["-D"], []):  # exported symbols, then the full table where not stripped
        out = subprocess.run([nm, *table, "--defined-only", str(library)], capture_output=True, text=True,
                             check=False).stdout
        copied |= {line.split()[-1] for line in out.splitlines()
                   if line.split() and line.split()[-1].startswith(_CXX_RUNTIME_SYMBOLS)}
    if copied:
        raise _invalid(
            f"compile_native: {library} carries its own copy of the C++ runtime (it defines "
            f"{sorted(copied)[:3]}): its host compiler links libstdc++ statically. Set MESHCOMM_NATIVE_CCBIN "
            f"to a g++ that links libstdc++.so. Command: {' '.join(cmd)}", NativeCompileError)


def build_native_library(file, *, arch=None, comm=None, extra_flags=(), cache_dir=None, verbose=False):
    """Compiles `file` into a cached shared library (or finds it built) and returns (path, compiled), where
    compiled is False when the cache already held it."""
    source = Path(file).resolve()
    if not source.is_file():
        raise _invalid(f"compile_native: file: {file!r} is not a file")
    if not INCLUDE_DIR.is_dir():
        raise _invalid(f"compile_native: meshcomm's headers are missing at {INCLUDE_DIR} (reinstall meshcomm)")
    info = _meshcomm._native_build_info()
    nvcc = _find_nvcc(info)
    archs = _architectures(arch, comm)
    directory = _cache_dir(cache_dir)
    directory.mkdir(parents=True, exist_ok=True)

    probe = _compile_command(nvcc, _find_host_compiler(info), archs, info["libmeshcomm"], source,
                             Path("OUTPUT"), extra_flags)
    key = hashlib.sha256()
    for part in (source.read_bytes(), "\0".join(probe).encode(), _headers_digest().encode(),
                 _meshcomm.__version__.encode(), str(info["native_abi_version"]).encode()):
        key.update(part)
        key.update(b"\0")
    output = directory / f"{source.stem}-{key.hexdigest()[:20]}.so"

    if output.is_file():
        return output, False
    # The first rank builds under the lock; the others wait and find it built. Whoever holds the lock removes
    # the lock file before releasing it (the cache keeps only libraries): waiters hold the old file, and once
    # the library exists nobody builds again, so a fresh lock file of a later caller cannot race a build.
    # Only after a failed build can two callers build at once (distinct temporary names, one result).
    lock_path = directory / (output.name + ".lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if output.is_file():
            lock_path.unlink(missing_ok=True)
            return output, False
        fd, tmp = tempfile.mkstemp(prefix=output.stem + ".", suffix=".tmp.so", dir=directory)
        os.close(fd)
        try:
            cmd = [str(tmp) if part == "OUTPUT" else part for part in probe]
            if verbose:
                print("compile_native:", " ".join(cmd), flush=True)
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise _invalid(f"compile_native: nvcc failed (exit {done.returncode}) on {source}\n"
                               f"command: {' '.join(cmd)}\n{done.stdout}{done.stderr}", NativeCompileError)
            _check_runtime_links(tmp, cmd)
            os.replace(tmp, output)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
            lock_path.unlink(missing_ok=True)
    return output, True


def compile_native(name, file, *, comm=None, arch=None, extra_flags=(), cache_dir=None, verbose=False):
    """Builds (or finds in the cache) the native algorithm defined in the .cu `file` and loads it as
    NativeAlgorithm `name`. With `comm`, also registers it there (collective: every rank, same order);
    otherwise call comm.add_algorithm(algorithm) on every rank before algorithm.execute(comm, ...).

    The file includes <meshcomm/native_algorithm.hpp> and ends with
    MESHCOMM_EXPORT_NATIVE_ALGORITHM(YourAlgorithm). arch: compute capabilities to build for (90, "sm_90",
    or a list; default: the GPUs of this process). extra_flags: more nvcc arguments. cache_dir: default
    $MESHCOMM_NATIVE_CACHE, else ~/.cache/meshcomm/native. Headers the file includes from its own directory
    are not part of the cache key: rename the file or clear the cache after changing one.
    """
    path, _ = build_native_library(file, arch=arch, comm=comm, extra_flags=extra_flags, cache_dir=cache_dir,
                                   verbose=verbose)
    algorithm = _meshcomm._load_native_algorithm(str(path), name)
    if comm is not None:
        comm.add_algorithm(algorithm)
    return algorithm
