"""Markers for the gpu_runtime tests."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes more than 10 s (real torchrun launches)")
