"""The one build step pyproject.toml cannot say: the wheel carries the repository's data directories.

The scenario catalog, the Spark job, the expectations, the Java driver's Maven project, the compose
files and the Docker scripts stay at the top of the repository, where people, the DAGs and the tests
find them. `build_py` copies them into the build's `kafkaproof/_share/<dir>/` (never into the source
tree), so an installed kafkaproof finds them through `kafkaproof.paths.share_dir()`; a checkout
(editable install) reads them in place. Everything else is configured in pyproject.toml.
"""
from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# Top-level directory -> the files of it the wheel carries (None: all of it but build outputs).
# Same names as kafkaproof.paths.SHARED_DIRS (tests/unit/test_packaging.py checks).
SHARED: dict[str, tuple[str, ...] | None] = {
    "scenarios": None,
    "spark": None,
    "expectations": None,
    "java": None,
    "compose": None,
    "scripts": ("docker-engine.sh", "docker-image.sh", "docker-compose-cli.sh"),  # what the compose backend runs
    "examples": None,  # the example application (a user's, built by kafkaproof.run.example_app)
}
SHARE_PACKAGE_PATH = ("kafkaproof", "_share")
# Build outputs and editor/VCS leftovers: Maven's java/target, bytecode caches, dotfiles.
EXCLUDED_DIRS = {"target", "__pycache__"}
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".class")


def shared_files() -> list[str]:
    """The data files a wheel carries, as paths relative to the repository root (sorted)."""
    files = []
    for name, only in SHARED.items():
        top = ROOT / name
        if not top.is_dir():
            raise FileNotFoundError(f"{top}: a data directory kafkaproof's wheel carries is missing")
        if only is not None:
            missing = [f for f in only if not (top / f).is_file()]
            if missing:
                raise FileNotFoundError(f"{top}: missing {', '.join(missing)}")
            files += [f"{name}/{f}" for f in only]
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS and not d.startswith("."))
            rel = Path(dirpath).relative_to(ROOT)
            files += [(rel / f).as_posix() for f in filenames
                      if not f.startswith(".") and not f.endswith(EXCLUDED_SUFFIXES)]
    return sorted(files)


class build_py_with_share(build_py):
    """setuptools' build_py, plus the data directories copied into `<build_lib>/kafkaproof/_share/`."""

    def _share_mapping(self) -> dict[str, str]:
        if self.editable_mode:  # an editable install runs from the checkout: share_dir() reads it in place
            return {}
        dest = os.path.join(self.build_lib, *SHARE_PACKAGE_PATH)
        return {os.path.join(dest, *rel.split("/")): str(ROOT / rel) for rel in shared_files()}

    def run(self) -> None:
        super().run()
        for target, source in self._share_mapping().items():
            self.mkpath(os.path.dirname(target))
            self.copy_file(source, target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *self._share_mapping()]

    def get_output_mapping(self) -> dict[str, str]:
        return {**super().get_output_mapping(), **self._share_mapping()}

    def get_source_files(self) -> list[str]:
        return [*super().get_source_files(), *shared_files()]  # an sdist carries them too


if __name__ == "__main__":
    setup(cmdclass={"build_py": build_py_with_share})
