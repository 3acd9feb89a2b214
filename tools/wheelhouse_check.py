"""Check that an offline wheelhouse is closed, consistent and installable on the target host.

Two modes:

* wheelhouse mode (default, on the connected machine): every requirement reachable from the
  roots, with markers evaluated for the *target* Python and platform, must be met by exactly one
  wheel in the folder (version inside the specifier) or by a package the host already has
  (``--have`` file; versions there are unknown, so those requirements are listed for review).
  Every wheel must carry a tag the target accepts and a Requires-Python the target meets.
* ``--installed`` (on the offline host, after the install, with PYTHONPATH exported): every wheel
  in the folder must be the distribution Python actually imports, and every requirement reachable
  from the roots must be met by an installed distribution at a matching version. This is the check
  that catches a host package that is too old.

``--no-deps`` checks a set installed with ``pip install --no-deps`` whose declared dependencies are
deliberately not all shipped (FlashInfer: docs/airgapped.md): the roots must be there at their
versions, with tags and Requires-Python the target accepts, but their requirements are not walked.

Exit status 0 when all checks pass, 1 otherwise; problems are printed one per line.
"""

from __future__ import annotations

import argparse
import email.parser
import importlib.metadata
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

# Oldest glibc of any manylinux tag; manylinux1/2010/2014 are the legacy names of 2_5/2_12/2_17.
MANYLINUX_MIN_GLIBC_MINOR = 5
LEGACY_MANYLINUX = {5: "manylinux1", 12: "manylinux2010", 17: "manylinux2014"}
DEFAULT_MAX_TOTAL_BYTES = 60_000_000  # the device tool carries 64 MiB including the repository


@dataclass
class Dist:
    """One distribution: a wheel in the folder or an installed package."""

    name: str
    version: Version
    requires: list[Requirement]
    requires_python: str = ""
    wheel: Path | None = None
    size_bytes: int = 0
    tags: frozenset[Tag] = field(default_factory=frozenset)


def manylinux_platforms(glibc: str, arch: str) -> list[str]:
    """Platform tags a host with this glibc accepts, newest first (what pip's --platform needs)."""
    major, _, minor = glibc.partition(".")
    if major != "2" or not minor.isdigit():
        raise ValueError(f"glibc must look like '2.28', got {glibc!r}")
    out: list[str] = []
    for m in range(int(minor), MANYLINUX_MIN_GLIBC_MINOR - 1, -1):
        out.append(f"manylinux_2_{m}_{arch}")
        if m in LEGACY_MANYLINUX:
            out.append(f"{LEGACY_MANYLINUX[m]}_{arch}")
    return out


def target_tags(python_version: str, platforms: list[str]) -> set[Tag]:
    major, minor = (int(p) for p in python_version.split(".")[:2])
    interp = f"cp{major}{minor}"
    tags = set(cpython_tags((major, minor), abis=[interp, "abi3", "none"], platforms=platforms))
    tags |= set(compatible_tags((major, minor), interpreter=interp, platforms=platforms))
    return tags


def marker_environment(python_version: str, arch: str) -> dict[str, str]:
    parts = python_version.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"python_version must look like '3.12' or '3.12.3', got {python_version!r}")
    full = ".".join(parts + ["0"] * (3 - len(parts)))
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": arch,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": full,
        "python_version": ".".join(parts[:2]),
        "sys_platform": "linux",
    }


def _parse_requires(lines: list[str], where: str) -> list[Requirement]:
    out = []
    for line in lines:
        try:
            out.append(Requirement(line))
        except InvalidRequirement as exc:
            raise ValueError(f"{where}: unparsable Requires-Dist {line!r}: {exc}") from exc
    return out


def read_wheel(path: Path) -> Dist:
    name, version, _build, tags = parse_wheel_filename(path.name)
    with zipfile.ZipFile(path) as zf:
        meta_names = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        if len(meta_names) != 1:
            raise ValueError(f"{path.name}: expected one */METADATA, found {meta_names}")
        meta = email.parser.Parser().parsestr(zf.read(meta_names[0]).decode("utf-8"))
    return Dist(
        name=canonicalize_name(name),
        version=version,
        requires=_parse_requires(meta.get_all("Requires-Dist") or [], path.name),
        requires_python=meta.get("Requires-Python") or "",
        wheel=path,
        size_bytes=path.stat().st_size,
        tags=tags,
    )


def read_installed(name: str) -> Dist | None:
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    return Dist(
        name=canonicalize_name(dist.metadata["Name"]),
        version=Version(dist.version),
        requires=_parse_requires(dist.requires or [], f"installed {name}"),
    )


def read_have(path: Path | None) -> set[str]:
    if path is None:
        return set()
    if not path.is_file():
        raise ValueError(f"--have: no such file {path}")
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(canonicalize_name(line))
    return names


def closure(roots, lookup, env, have, deps=True):
    """Walk requirements from the roots (only the roots when not deps).

    Returns (reached names, host-assumed, problems)."""
    reached: set[str] = set()
    host_assumed: list[str] = []
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[Requirement, str]] = [(Requirement(r), "root") for r in roots]
    while todo:
        req, needed_by = todo.pop()
        name = canonicalize_name(req.name)
        dist = lookup(name)
        if dist is None:
            if name in have:
                host_assumed.append(f"{req}  (needed by {needed_by})")
            else:
                problems.append(f"missing: {req} (needed by {needed_by})")
            continue
        if not req.specifier.contains(dist.version, prereleases=True):
            problems.append(f"version: {name} {dist.version} does not satisfy {req} (needed by {needed_by})")
        reached.add(name)
        if not deps:
            continue
        for extra in [""] + sorted(req.extras):
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            for sub in dist.requires:
                if sub.marker is not None and not sub.marker.evaluate({**env, "extra": extra}):
                    continue
                if extra and (sub.marker is None or sub.marker.evaluate({**env, "extra": ""})):
                    continue  # not specific to this extra: already walked with extra ""
                todo.append((sub, f"{name} {dist.version}" + (f"[{extra}]" if extra else "")))
    return reached, host_assumed, problems


def check_wheelhouse(args, env) -> int:
    folder = Path(args.wheelhouse)
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        print(f"error: no *.whl in {folder}", file=sys.stderr)
        return 1
    dists: dict[str, Dist] = {}
    problems: list[str] = []
    platforms = args.platform or manylinux_platforms(args.glibc, args.arch)
    accepted = target_tags(args.python_version, platforms)
    pyver = Version(env["python_full_version"])
    for path in wheels:
        dist = read_wheel(path)
        if dist.name in dists:
            problems.append(f"duplicate: {dists[dist.name].wheel.name} and {path.name} (keep one version)")
        dists[dist.name] = dist
        if not dist.tags & accepted:
            problems.append(f"tag: {path.name} is not installable on cp{args.python_version} {platforms[0]}")
        if dist.requires_python and not SpecifierSet(dist.requires_python).contains(pyver, prereleases=True):
            problems.append(f"python: {path.name} requires Python {dist.requires_python}")
    have = read_have(Path(args.have) if args.have else None)
    reached, host_assumed, walk_problems = closure(args.root, dists.get, env, have, deps=not args.no_deps)
    problems += walk_problems
    unreachable = sorted(set(dists) - reached)
    for name in unreachable:
        if args.prune:
            print(f"pruned (not needed on the target): {dists[name].wheel.name}")
            dists[name].wheel.unlink()
            del dists[name]
        else:
            problems.append(f"unneeded: {dists[name].wheel.name} is not reachable from the roots")
    total_bytes = sum(d.size_bytes for d in dists.values())
    print(f"{'size_bytes':>12}  wheel")
    for dist in sorted(dists.values(), key=lambda d: d.size_bytes):
        print(f"{dist.size_bytes:>12}  {dist.wheel.name}")
    print(f"{total_bytes:>12}  total ({len(dists)} wheels, {total_bytes / 2**20:.1f} MiB)")
    if host_assumed:
        print("\nassumed already on the host (versions checked only by --installed on the host):")
        for line in sorted(set(host_assumed)):
            print(f"  {line}")
    if args.max_total_bytes and total_bytes > args.max_total_bytes:
        problems.append(f"size: {total_bytes} bytes exceeds --max-total-bytes {args.max_total_bytes}")
    return report(problems)


def check_installed(args, env) -> int:
    folder = Path(args.wheelhouse)
    problems: list[str] = []
    for path in sorted(folder.glob("*.whl")):
        shipped = read_wheel(path)
        live = read_installed(shipped.name)
        if live is None or live.version != shipped.version:
            found = "nothing" if live is None else str(live.version)
            problems.append(
                f"shadowed: {shipped.name} imports {found}, wheel is {shipped.version} "
                "(is PYTHONPATH exported with the install target first?)"
            )
    _, _, walk_problems = closure(args.root, read_installed, env, have=set(), deps=not args.no_deps)
    problems += walk_problems
    print(f"checked the installed closure of {', '.join(args.root)} against this Python's packages")
    return report(problems)


def report(problems: list[str]) -> int:
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    print("closure OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheelhouse", help="folder of *.whl files")
    ap.add_argument(
        "--root",
        action="append",
        required=True,
        help="requirement the host must be able to import (repeatable), e.g. snakemake==9.27.1",
    )
    ap.add_argument("--have", help="file of package names the host already has, one per line")
    ap.add_argument("--python-version", default="3.12", help="target Python, e.g. 3.12 or 3.12.3")
    ap.add_argument("--glibc", default="2.28", help="newest manylinux glibc the target accepts")
    ap.add_argument("--arch", default="x86_64", help="target machine architecture")
    ap.add_argument("--platform", action="append", help="explicit platform tags (override --glibc/--arch)")
    ap.add_argument("--prune", action="store_true", help="delete wheels not reachable from the roots")
    ap.add_argument(
        "--max-total-bytes",
        type=int,
        default=DEFAULT_MAX_TOTAL_BYTES,
        help="fail above this total (0: no limit, for a set carried in pieces)",
    )
    ap.add_argument(
        "--no-deps",
        action="store_true",
        help="check the roots only, not their requirements (a set installed with pip --no-deps)",
    )
    ap.add_argument(
        "--installed",
        action="store_true",
        help="on the target host after install: check what Python really imports",
    )
    args = ap.parse_args(argv)
    try:
        if args.installed:
            return check_installed(args, default_environment())
        return check_wheelhouse(args, marker_environment(args.python_version, args.arch))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
