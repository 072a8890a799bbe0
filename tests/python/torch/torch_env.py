"""Whether torch can run the tests here (shared by conftest.py and the test files)."""


def import_torch():
    """(torch, None) or (None, why not). A directory named torch (this one, or the repo's torch/ sources)
    imports as an empty namespace package where torch is not installed: that counts as missing."""
    try:
        import torch
    except Exception as e:  # a broken install raises OSError as well as ImportError
        return None, f"torch is not importable ({type(e).__name__}: {e})"
    if getattr(torch, "__file__", None) is None:
        return None, "torch is not installed (only a directory named torch was found on sys.path)"
    try:
        import torch.distributed  # noqa: F401
    except Exception as e:
        return None, f"torch.distributed is not importable ({type(e).__name__}: {e})"
    return torch, None
