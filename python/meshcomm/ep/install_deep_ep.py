"""Installs (or removes) the ``deep_ep`` compatibility package for this Python: a ``meshcomm-deep-ep.pth`` file
in site-packages that puts ``meshcomm.ep.compat_path()`` on sys.path, so ``import deep_ep`` gives meshcomm.ep.

    python -m meshcomm.ep.install_deep_ep            # install
    python -m meshcomm.ep.install_deep_ep --remove   # uninstall

It refuses while another ``deep_ep`` (DeepEP itself) is importable: the two would shadow each other.
"""

import argparse
import importlib.util
import os
import sys
import sysconfig

from . import compat_path

PTH_NAME = "meshcomm-deep-ep.pth"


def other_deep_ep():
    """The path of an importable deep_ep that is not meshcomm's, or None."""
    spec = importlib.util.find_spec("deep_ep")
    if spec is None or spec.origin is None:
        return None
    origin = os.path.abspath(spec.origin)
    return None if origin.startswith(os.path.abspath(compat_path()) + os.sep) else origin


def install(site_dir):
    other = other_deep_ep()
    if other is not None:
        raise SystemExit(f"meshcomm.ep.install_deep_ep: DeepEP's deep_ep is installed ({other}); uninstall it first")
    path = os.path.join(site_dir, PTH_NAME)
    with open(path, "w") as f:
        f.write(compat_path() + "\n")
    return path


def remove(site_dir):
    path = os.path.join(site_dir, PTH_NAME)
    if os.path.exists(path):
        os.remove(path)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m meshcomm.ep.install_deep_ep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--remove", action="store_true", help="remove the .pth file instead")
    parser.add_argument("--site-dir", default=sysconfig.get_paths()["purelib"],
                        help="the site-packages folder (default: this Python's)")
    args = parser.parse_args(argv)
    if args.remove:
        print(f"removed {remove(args.site_dir)}")
    else:
        print(f"installed {install(args.site_dir)}: import deep_ep now gives meshcomm.ep")


if __name__ == "__main__":
    sys.exit(main())
