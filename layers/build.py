"""Build the Lambda artifacts the Pulumi program deploys.

    python layers/build.py            # from the repo root (this is what `make layers` runs)

Writes:
  build/layers/deps.zip    third-party runtime deps (layers/requirements.txt) as manylinux
                           aarch64 wheels for CPython 3.12, under python/
  build/layers/domain.zip  the `postbox` domain package (shared/postbox), under python/postbox/
  build/functions.zip      the `functions` package (the Lambda entry points), minus functions/local/,
                           and the client's `postbox_client` (shared/client), whose flows SDK the
                           flows agent runs hosted queries with (the domain never imports it)

Zips are deterministic (sorted entries, fixed timestamps and modes) so unchanged inputs give the
same bytes, the same hash, and no new layer version or function update on `pulumi up`.

All three are byte-compiled for 3.12 when a Python 3.12 interpreter is found (Lambda's code and
layer folders are read-only, so without .pyc files every cold start recompiles pydantic, Powertools
and our own modules); the pyc files use the `unchecked-hash` mode, which has no timestamps and is
never revalidated.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO / "layers" / "requirements.txt"
BUILD = REPO / "build"
EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip can hold
PLATFORMS = ("manylinux2014_aarch64", "manylinux_2_28_aarch64")
PYTHON_VERSION = "3.12"
SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
SKIP_SUFFIXES = (".pyc", ".pyo")


def write_zip(dest: Path, files: list[tuple[str, Path]]) -> Path:
    """Zip (arcname, path) pairs deterministically: sorted, fixed time, fixed mode."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for arcname, path in sorted(files):
            info = zipfile.ZipInfo(arcname, date_time=EPOCH)
            info.external_attr = (0o100755 if os.access(path, os.X_OK) else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, so the mode bits are honoured
            zf.writestr(info, path.read_bytes())
    tmp.replace(dest)
    return dest


def tree(root: Path, prefix: str, *, keep_pyc: bool = False, exclude: tuple[Path, ...] = ()) -> list[tuple[str, Path]]:
    """Every file under root as (prefix + relative path, path), skipping caches and `exclude`."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if (keep_pyc or d not in SKIP_DIRS) and (here / d) not in exclude]
        for name in filenames:
            if not keep_pyc and name.endswith(SKIP_SUFFIXES):
                continue
            path = here / name
            out.append((prefix + path.relative_to(root).as_posix(), path))
    return out


def find_python312() -> str | None:
    """A working CPython 3.12 interpreter for byte-compiling the deps, or None."""
    candidates = [os.environ.get("POSTBOX_PYTHON312", ""), sys.executable, "python3.12"]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))
    for cand in filter(None, candidates):
        try:
            out = subprocess.run(
                [cand, "-c", "import sys; print(sys.implementation.name, *sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.split() == ["cpython", "3", "12"]:
            return cand
    return None


def build_deps(dest: Path, *, compile_pyc: bool) -> Path:
    with tempfile.TemporaryDirectory(prefix="postbox-deps-") as tmp:
        target = Path(tmp) / "python"
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        cmd += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
        cmd += ["--implementation", "cp", "--python-version", PYTHON_VERSION]
        cmd += ["--only-binary=:all:", "--no-compile", "--target", str(target)]
        cmd += ["-r", str(REQUIREMENTS)]
        subprocess.run(cmd, check=True)
        shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts: useless in a layer
        # zstandard's CFFI backend (11 MB) is only a fallback for when its C backend cannot load,
        # and the C backend always loads on Lambda: it would never be used.
        for path in (target / "zstandard").glob("_cffi.*.so"):
            path.unlink()
        if compile_pyc:
            # -s/-p: record /opt/python/... (where Lambda mounts layers) as each code object's file
            # name, not this temporary directory, so tracebacks read right and the bytes do not
            # change from one build to the next.
            byte_compile(target, strip=target, prepend="/opt/python", what="deps.zip")
        return write_zip(dest, tree(target, "python/", keep_pyc=True))


def build_domain(dest: Path, *, compile_pyc: bool = True) -> Path:
    sources = [(REPO / "shared" / "postbox", "python/postbox")]
    return _staged_zip(dest, sources, mount="/opt", compile_pyc=compile_pyc)


def build_functions(dest: Path, *, compile_pyc: bool = True) -> Path:
    root = REPO / "functions"
    # postbox_client too: the flows agent runs hosted queries with its (pure Python) query builder
    # and runner (functions/agents/flows_runner.py); the domain layer is the domain alone.
    sources = [(root, "functions"), (REPO / "shared" / "client" / "postbox_client", "postbox_client")]
    return _staged_zip(dest, sources, mount="/var/task", compile_pyc=compile_pyc, exclude=(root / "local",))


def _staged_zip(dest: Path, sources: list[tuple[Path, str]], *, mount: str, compile_pyc: bool,
                exclude: tuple[Path, ...] = ()) -> Path:
    """Our own code, copied to a staging folder and byte-compiled there as the deps are: Lambda's
    code and layer folders are read-only, so a module shipped without its .pyc is compiled from
    source on every cold start (tens of ms of the queues function's import on this machine)."""
    with tempfile.TemporaryDirectory(prefix="postbox-stage-") as tmp:
        stage = Path(tmp)
        for root, prefix in sources:
            for arcname, path in tree(root, prefix + "/", exclude=exclude):
                (stage / arcname).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, stage / arcname)
        if compile_pyc:
            byte_compile(stage, strip=stage, prepend=mount, what=dest.name)
        return write_zip(dest, tree(stage, "", keep_pyc=True))


def byte_compile(root: Path, *, strip: Path, prepend: str, what: str) -> bool:
    """Byte-compile every module under root for CPython 3.12 (`unchecked-hash` pyc files: no
    timestamps, never revalidated), recording `prepend` + the path below `strip` as file names."""
    py312 = find_python312()
    if not py312:
        print(f"warning: no Python 3.12 found; {what} ships without .pyc files", file=sys.stderr)
        return False
    subprocess.run(
        [py312, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
         "-s", str(strip), "-p", prepend, str(root)],
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-deps", action="store_true", help="only rebuild domain.zip and functions.zip")
    parser.add_argument("--no-compile", action="store_true", help="do not byte-compile (deps, domain, functions)")
    args = parser.parse_args(argv)
    built = []
    if not args.skip_deps:
        built.append(build_deps(BUILD / "layers" / "deps.zip", compile_pyc=not args.no_compile))
    built.append(build_domain(BUILD / "layers" / "domain.zip", compile_pyc=not args.no_compile))
    built.append(build_functions(BUILD / "functions.zip", compile_pyc=not args.no_compile))
    for path in built:
        size = path.stat().st_size
        print(
            f"{path.relative_to(REPO)}  {size / 1e6:.1f} MB"
            if size >= 1e6
            else f"{path.relative_to(REPO)}  {size / 1e3:.0f} kB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
