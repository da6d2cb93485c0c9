"""Run configurations (:mod:`configs.loader`), the bundled data, and the package's version."""


def package_version() -> str:
    """The installed distribution's version (``pyproject.toml``), or ``unknown`` outside an install."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shockwave")
    except PackageNotFoundError:
        return "unknown (not installed)"
