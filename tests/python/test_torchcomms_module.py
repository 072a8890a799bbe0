"""meshcomm.torchcomms, the module torchcomms' entry point names (docs/torchcomms.md): without the backend its
import says how to build it; with it, a torchcomms release other than the build's is refused naming both
versions and ABIs, and the entry point and the c10d group source are in place. GPU runs: tests/python/torchcomms."""

import importlib
import importlib.metadata
import importlib.util
import os

import pytest


def backend_built():
    """Whether this build wrote meshcomm/torchcomms/_build.py (found without importing the package)."""
    spec = importlib.util.find_spec("meshcomm")
    return spec is not None and os.path.exists(os.path.join(os.path.dirname(spec.origin), "torchcomms", "_build.py"))


def test_without_the_backend_the_import_says_how_to_build_it():
    if backend_built():
        pytest.skip("this build has the torchcomms backend")
    with pytest.raises(ImportError) as info:
        importlib.import_module("meshcomm.torchcomms")
    assert "built without its torchcomms backend" in str(info.value), str(info.value)
    assert "docs/torchcomms.md" in str(info.value)


@pytest.fixture
def module():
    if not backend_built():
        pytest.skip("meshcomm was built without its torchcomms backend (no torchcomms or headers at build time)")
    try:
        return importlib.import_module("meshcomm.torchcomms")
    except ImportError as e:  # the installed torchcomms differs from the build's, or does not load here
        pytest.skip(f"meshcomm.torchcomms does not import here: {e}")


def test_another_torchcomms_release_is_refused_naming_both(module):
    built = module.TORCHCOMMS_VERSION
    with pytest.raises(ImportError) as info:
        module.check_torchcomms_version("0.3.1")
    text = str(info.value)
    assert f"built against torchcomms {built} (backend ABI {module.BACKEND_ABI_VERSION})" in text, text
    assert "torchcomms 0.3.1 (backend ABI 1.1) is installed" in text, text
    module.check_torchcomms_version(built + "+cu130")  # a local version suffix is the same release


def test_the_entry_point_names_this_module(module):
    found = importlib.metadata.entry_points(group="torchcomms.backends", name="meshcomm")
    assert [e.value for e in found] == ["meshcomm.torchcomms"]


def test_the_group_source_answers_only_inside_torch_group_creation(module):
    assert module._c10d_group() is None
