"""pytest setup for tests/python: the package under test comes from PYTHONPATH=<build>/python (scripts/test.sh)
or from an installed wheel; the header says which one was imported."""


def pytest_report_header(config):
    try:
        import meshcomm
    except ImportError as e:  # the tests report the same error; the header says where to look
        return f"meshcomm: NOT importable ({e}); set PYTHONPATH=<build>/python or pip install ."
    return f"meshcomm {meshcomm.__version__} from {meshcomm.__file__}; CUDA devices: {meshcomm.cuda_device_count()}"

