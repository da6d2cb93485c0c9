"""Run configurations (:mod:`configs.loader`), the bundled data, and the versions a run was made with."""

#: the libraries whose versions can change a replay's figures: the solvers (HiGHS for the MILPs,
#: ECOS for the reference's LPs), cvxpy's compilation of the models, and the numerics under them.
#: ``constraints.txt`` pins each one; ``results.json`` records them (:func:`library_versions`).
RESULT_LIBRARIES: tuple[str, ...] = ("cvxpy", "highspy", "ecos", "numpy", "scipy")


def package_version() -> str:
    """The installed distribution's version (``pyproject.toml``), or ``unknown`` outside an install."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("shockwave")
    except PackageNotFoundError:
        return "unknown (not installed)"


def installed_version(name: str) -> str:
    """The installed version of distribution ``name``, or ``"absent"``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def library_versions() -> dict[str, str]:
    """``{"shockwave": ..., "python": ..., <each of RESULT_LIBRARIES>: ...}``: the installed versions, or
    ``"absent"`` for a library that is not installed. A replay's figures are reproducible under the
    same versions (``constraints.txt``)."""
    import platform

    versions = {"shockwave": package_version(), "python": platform.python_version()}
    versions.update((name, installed_version(name)) for name in RESULT_LIBRARIES)
    return versions
