"""Build a wheel and an sdist of distributions, and a PEP 503 simple index of them (`make dist`).

    python scripts/build_dist.py --out dist . plugins/core-ddp ...    # what `make dist` runs (every distribution)
    python scripts/build_dist.py --out DIR --index-only                 # only rewrite DIR/simple from DIR's files
    python scripts/build_dist.py --out DIR --upload-plan                # the twine commands of a release, in order

Each distribution's sdist is built first and its wheel from the unpacked sdist, as `python -m build` does: a
file missing from the sdist then fails the wheel here, not an install later. The builds use this environment's
setuptools (no isolated build environment: one per distribution cost seconds each) and run two at a time.

The index is DIR/simple/index.html and DIR/simple/<normalized name>/index.html, linking to the files in DIR with
their sha256 and Requires-Python (PEP 503, PEP 345), so that

    pip install --index-url file://$PWD/dist/simple --extra-index-url <where torch comes from> core-ddp

installs as from PyPI. Each project page also shows its summary and its README, rendered as PyPI renders it
(readme_renderer, installed with twine) when that is importable.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import email.parser
import hashlib
import html
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

BUILT_SUFFIXES = (".whl", ".tar.gz")


def _quiet_runner(cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None) -> None:
    """Runs a build hook with its output (setuptools' hundreds of lines per build) shown only when it fails."""
    environment = {**os.environ, **(extra_environ or {})}
    finished = subprocess.run(
        cmd, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    if finished.returncode != 0:
        sys.stderr.write(finished.stdout)
        raise subprocess.CalledProcessError(finished.returncode, cmd, finished.stdout)


def build_distribution(source: Path, out: Path) -> list[Path]:
    """The sdist of the distribution in `source`, then its wheel built from that sdist; both land in `out`."""
    from build import ProjectBuilder  # the `build` package: in core's test extra; `make dist` installs it

    with tempfile.TemporaryDirectory(prefix="core-dist-") as scratch:
        builder = ProjectBuilder(source, python_executable=sys.executable, runner=_quiet_runner)
        sdist = Path(builder.build("sdist", out))
        with tarfile.open(sdist) as archive:
            archive.extractall(scratch, filter="data")
        (unpacked,) = Path(scratch).iterdir()
        builder = ProjectBuilder(unpacked, python_executable=sys.executable, runner=_quiet_runner)
        wheel = Path(builder.build("wheel", out))
    return [sdist, wheel]


def build_all(sources: Sequence[Path], out: Path, jobs: int = 2) -> list[Path]:
    """Every source built into `out` (`jobs` at a time: each build is its own process); a failure names its source."""
    out.mkdir(parents=True, exist_ok=True)
    built: list[Path] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(build_distribution, source, out): source for source in sources}
        for future in concurrent.futures.as_completed(futures):
            try:
                built.extend(future.result())
            except Exception as error:
                raise SystemExit(f"build_dist: building {futures[future]} failed: {error}") from error
    return built


def _metadata(path: Path) -> email.message.Message:
    """The core metadata of a wheel (its METADATA) or an sdist (its top-level PKG-INFO)."""
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as archive:
            (name,) = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            text = archive.read(name).decode()
    else:
        with tarfile.open(path) as archive:
            (member,) = [m for m in archive.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")]
            extracted = archive.extractfile(member)
            assert extracted is not None  # a regular file: tarfile returns None only for links and directories
            text = extracted.read().decode()
    return email.parser.Parser().parsestr(text)


def _project_name(path: Path) -> str:
    if path.name.endswith(".whl"):
        return str(parse_wheel_filename(path.name)[0])
    return str(parse_sdist_filename(path.name)[0])


def _render_readme(metadata: email.message.Message) -> str:
    """The long description as HTML, the way PyPI shows it; escaped plain text when readme_renderer is missing."""
    body = metadata.get_payload()
    text = body if isinstance(body, str) else ""
    content_type = metadata.get("Description-Content-Type", "text/plain")
    rendered = None
    try:
        if content_type.startswith("text/markdown"):
            from readme_renderer import markdown

            rendered = markdown.render(text)  # None without its Markdown engine (readme-renderer[md])
        elif content_type.startswith("text/x-rst"):
            from readme_renderer import rst

            rendered = rst.render(text)
    except ImportError:
        pass
    return rendered if rendered is not None else f"<pre>{html.escape(text)}</pre>"


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html>\n<head><meta name=\"pypi:repository-version\" content=\"1.0\">"
        f"<title>{html.escape(title)}</title></head>\n<body>\n{body}</body>\n</html>\n"
    )


def write_index(out: Path) -> Path:
    """DIR/simple/ for every wheel and sdist in `out` (rewritten whole); returns the index's root directory."""
    files = _built(out)
    simple = out / "simple"
    shutil.rmtree(simple, ignore_errors=True)
    simple.mkdir()
    root_links = "".join(f'<a href="{name}/">{name}</a><br>\n' for name in sorted(files))
    (simple / "index.html").write_text(_page("Simple index", root_links))
    for name, paths in files.items():
        links = []
        for path in paths:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            requires_python = _metadata(path).get("Requires-Python")
            attribute = f' data-requires-python="{html.escape(requires_python)}"' if requires_python else ""
            links.append(f'<a href="../../{path.name}#sha256={digest}"{attribute}>{path.name}</a><br>\n')
        metadata = _metadata(next(p for p in paths if p.name.endswith(".whl")) if any(
            p.name.endswith(".whl") for p in paths) else paths[0])
        summary = html.escape(metadata.get("Summary", ""))
        body = (
            f"<h1>Links for {name}</h1>\n{''.join(links)}<p>{summary}</p>\n"
            f"<section class=\"readme\">\n{_render_readme(metadata)}\n</section>\n"
        )
        (simple / name).mkdir()
        (simple / name / "index.html").write_text(_page(f"Links for {name}", body))
    return simple


def _built(out: Path) -> dict[str, list[Path]]:
    """The wheels and sdists in `out` by normalized project name."""
    files: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(out.iterdir()):
        if path.is_file() and path.name.endswith(BUILT_SUFFIXES):
            files[canonicalize_name(_project_name(path))].append(path)
    return files


def upload_order(requires: Mapping[str, Iterable[str]]) -> list[str]:
    """Project names, each after every project it requires (among these): what PyPI must hold before it.

    `requires` maps a name to its Requires-Dist lines; requirements of an extra (`extra == "test"`) do not count,
    since installing the project does not need them. Ties go alphabetically, so the order is the same every time.
    """
    needs: dict[str, set[str]] = {}
    for name, lines in requires.items():
        wanted: set[str] = set()
        for line in lines:
            requirement = Requirement(line)
            if requirement.marker is not None and "extra" in str(requirement.marker):
                continue
            if canonicalize_name(requirement.name) in requires and canonicalize_name(requirement.name) != name:
                wanted.add(canonicalize_name(requirement.name))
        needs[name] = wanted
    order: list[str] = []
    while len(order) < len(needs):
        ready = sorted(name for name, wanted in needs.items() if name not in order and wanted <= set(order))
        if not ready:
            cycle = sorted(name for name in needs if name not in order)
            raise SystemExit(f"build_dist: these distributions require each other in a cycle: {', '.join(cycle)}")
        order.append(ready[0])
    return order


def upload_plan(out: Path) -> list[list[str]]:
    """`twine upload` commands for the files in `out`, one per distribution, in `upload_order`."""
    files = _built(out)
    requires = {name: _metadata(next(p for p in paths if p.name.endswith(".whl"))).get_all("Requires-Dist") or []
                for name, paths in files.items()}
    return [["twine", "upload", *(str(path) for path in files[name])] for name in upload_order(requires)]


def _clean(out: Path) -> None:
    """Only what this script writes: earlier wheels and sdists (another version would linger) and the index."""
    if out.is_dir():
        for path in out.iterdir():
            if path.is_file() and path.name.endswith(BUILT_SUFFIXES):
                path.unlink()
    shutil.rmtree(out / "simple", ignore_errors=True)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="*", type=Path, help="directories with a pyproject.toml")
    parser.add_argument("--out", type=Path, default=Path("dist"), help="where the files and simple/ go (dist)")
    parser.add_argument("--index-only", action="store_true", help="only rewrite OUT/simple from OUT's files")
    parser.add_argument("--jobs", type=int, default=2, help="builds at once (2)")
    parser.add_argument("--upload-plan", action="store_true",
                        help="print the twine upload commands for OUT's files, dependencies first; upload nothing")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.upload_plan:
        for command in upload_plan(args.out):
            print(" ".join(command))
        return 0
    if not args.index_only:
        missing = [str(source) for source in args.sources if not (source / "pyproject.toml").is_file()]
        if missing or not args.sources:
            parser.error(f"not a distribution (no pyproject.toml): {', '.join(missing) or 'none given'}")
        _clean(args.out)
        built = build_all(args.sources, args.out, args.jobs)
        print(f"build_dist: {len(built)} files from {len(args.sources)} distributions in {args.out}")
    simple = write_index(args.out)
    print(f"build_dist: index in {simple} (pip install --index-url file://{simple.resolve()} ...)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
