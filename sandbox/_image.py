"""Building the sandbox image with no container registry: debootstrap a Debian root, ``docker import`` it.

The image is tagged with a digest of its recipe (suite, mirror, variant, packages, script version), so a
second build with the same recipe finds the first and reuses it. The mirror and suite are read from this
machine's apt sources, so the build fetches packages from wherever this machine already does.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from sandbox import _engine as engine
from sandbox._config import DEFAULT_IMAGE
from sandbox._protocol import SandboxError

SCRIPT_VERSION = 1  # bump when the build steps below change what ends up in the image
IMAGE_NAME = DEFAULT_IMAGE.split(":")[0]
_LOCK = "/var/tmp/cognitive-loop-sandbox-build.lock"
# Left out of the image: package caches and documentation, about a quarter of its size.
_PRUNE = ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "usr/share/doc/*", "usr/share/man/*",
          "usr/share/info/*")

Say = Callable[[str], None]


@attrs.frozen
class ImageRecipe:
    """What goes into the image; its ``digest`` names the build."""

    suite: str
    mirror: str
    packages: tuple[str, ...] = ("python3",)
    variant: str = "minbase"
    script_version: int = SCRIPT_VERSION

    @property
    def digest(self) -> str:
        text = json.dumps(attrs.asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"{IMAGE_NAME}:{self.digest}"


@attrs.frozen
class BuiltImage:
    """The outcome of ``build_image``: the image's tag, whether an existing build was reused, and how long it took."""

    tag: str
    reused: bool
    seconds: float


def apt_source(root: str = "/") -> tuple[str, str]:
    """(mirror URL, suite) of this machine's main Debian source, read from its apt configuration."""
    found: list[tuple[str, str]] = []
    for path in sorted(glob.glob(os.path.join(root, "etc/apt/sources.list.d/*.sources"))):
        for stanza in Path(path).read_text(errors="replace").split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.strip() and not line.startswith(("#", " ", "\t")) and ":" in line:
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
                found += [(u, s) for u in fields.get("uris", "").split() for s in fields.get("suites", "").split()]
    lists = [os.path.join(root, "etc/apt/sources.list"),
             *sorted(glob.glob(os.path.join(root, "etc/apt/sources.list.d/*.list")))]
    for path in lists:
        if os.path.exists(path):
            for line in Path(path).read_text(errors="replace").splitlines():
                words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb":
                    found.append((words[1], words[2]))
    for uri, suite in found:
        # The release itself, not its -security/-updates/-backports companions.
        if uri.startswith(("http://", "https://")) and "-" not in suite and "/" not in suite:
            return uri.rstrip("/"), suite
    raise SandboxError("no Debian mirror found in this machine's apt sources (/etc/apt/sources.list and "
                       "/etc/apt/sources.list.d/); pass --mirror URL and --suite NAME")


def default_recipe(*, suite: str | None = None, mirror: str | None = None) -> ImageRecipe:
    """The recipe for this machine: its own apt mirror and release unless given."""
    if suite is None or mirror is None:
        found_mirror, found_suite = apt_source()
        suite, mirror = suite or found_suite, mirror or found_mirror
    return ImageRecipe(suite=suite, mirror=mirror)


def build_image(recipe: ImageRecipe | None = None, *, force: bool = False, say: Say = lambda _: None,
                client: Any = None) -> BuiltImage:
    """Build (or find) the image for ``recipe`` and tag it ``<name>:<digest>`` and ``<name>:latest``.

    Needs root (debootstrap), ``debootstrap`` and a Docker engine; no registry. Blocking: minutes on a
    fresh machine, about a second when the image is already there. ``say`` receives progress lines.
    """
    started = time.monotonic()
    recipe = recipe or default_recipe()
    client = client or engine.connect()
    with _build_lock():
        if not force and _exists(client, recipe.tag):
            client.api.tag(recipe.tag, IMAGE_NAME, "latest")
            say(f"image {recipe.tag} is already built (recipe digest {recipe.digest}); reusing it")
            return BuiltImage(recipe.tag, True, time.monotonic() - started)
        if os.geteuid() != 0:
            raise SandboxError("building the image runs debootstrap, which needs root; run it as root (sudo)")
        if shutil.which("debootstrap") is None:
            raise SandboxError("debootstrap is not installed; apt-get install debootstrap")
        say(f"building {recipe.tag}: Debian {recipe.suite} ({recipe.variant}) + {', '.join(recipe.packages)} "
            f"from {recipe.mirror}")
        scratch = tempfile.mkdtemp(prefix="sandbox-image-", dir="/var/tmp")
        root = os.path.join(scratch, "root")
        try:
            try:
                _debootstrap(recipe, root, say, started)
                _prune(root)
                archive = os.path.join(scratch, "root.tar")
                say(f"[{time.monotonic() - started:5.0f}s] packing the root filesystem")
                subprocess.run(["tar", "-C", root, "--numeric-owner", "-cf", archive, "."], check=True,
                               capture_output=True)
                size = os.path.getsize(archive) / 1e6
                say(f"[{time.monotonic() - started:5.0f}s] importing {size:.0f} MB into Docker as {recipe.tag}")
                client.api.import_image_from_file(archive, repository=IMAGE_NAME, tag=recipe.digest, changes=[
                    f"ENV PATH={engine.PATH}", "ENV LANG=C.UTF-8", "WORKDIR /work", 'CMD ["python3"]',
                    f"LABEL {engine.LABEL}.recipe={recipe.digest}",
                ])
            except subprocess.CalledProcessError as exc:
                tail = (exc.stderr or b"").decode(errors="replace")[-1500:]
                raise SandboxError(f"{exc.cmd[0]} failed with status {exc.returncode}: {tail}") from exc
            except (SandboxError, OSError):
                raise
            except Exception as exc:  # the docker package's errors, translated at this boundary
                raise SandboxError(f"importing the root filesystem into Docker failed: {exc}") from exc
        finally:
            if _unmount_below(scratch):
                shutil.rmtree(scratch, ignore_errors=True)
            else:
                say(f"left {scratch} in place: something is still mounted below it; unmount, then delete it")
        client.api.tag(recipe.tag, IMAGE_NAME, "latest")
    say(f"[{time.monotonic() - started:5.0f}s] built {recipe.tag} (also tagged {IMAGE_NAME}:latest)")
    return BuiltImage(recipe.tag, False, time.monotonic() - started)


def adopt_image(reference: str, *, say: Say = lambda _: None, client: Any = None) -> BuiltImage:
    """Use an existing Python image (pulled if missing; needs a registry) as ``<name>:latest``."""
    started = time.monotonic()
    client = client or engine.connect()
    if not _exists(client, reference):
        say(f"pulling {reference}")
        try:
            client.images.pull(reference)
        except Exception as exc:
            raise SandboxError(f"cannot pull {reference} ({exc}); with no registry, build the image with "
                               "`python -m sandbox build-image` instead") from exc
    client.api.tag(reference, IMAGE_NAME, "latest")
    say(f"tagged {reference} as {IMAGE_NAME}:latest")
    return BuiltImage(reference, False, time.monotonic() - started)


def _exists(client: Any, tag: str) -> bool:
    try:
        client.api.inspect_image(tag)
        return True
    except Exception:
        return False


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One build at a time on this machine; a second waits, then finds the first one's image."""
    with open(_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# debootstrap's "I: <Verb> ..." lines, folded into the phases a person wants to see.
_PHASES = {"Retrieving": "downloading packages", "Validating": "downloading packages",
           "Extracting": "extracting", "Installing": "installing the core", "Unpacking": "unpacking",
           "Configuring": "configuring", "Base": "done"}
_COUNTED = {"Retrieving", "Unpacking", "Configuring"}


def _debootstrap(recipe: ImageRecipe, root: str, say: Say, started: float) -> None:
    argv = ["debootstrap", f"--variant={recipe.variant}", f"--include={','.join(recipe.packages)}",
            recipe.suite, root, recipe.mirror]
    phase, count = "", 0
    tail: list[str] = []
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        assert process.stdout is not None  # stdout=PIPE
        for line in process.stdout:
            tail = (tail + [line.rstrip()])[-30:]
            words = line.split()
            if len(words) < 2 or words[0] != "I:" or words[1] not in _PHASES:
                continue
            if _PHASES[words[1]] != phase:
                phase, count = _PHASES[words[1]], 0
                say(f"[{time.monotonic() - started:5.0f}s] debootstrap: {phase}")
            if words[1] in _COUNTED:
                count += 1
                if count % 25 == 0:
                    say(f"[{time.monotonic() - started:5.0f}s] debootstrap: {phase} ({count} so far)")
    if process.returncode != 0:
        raise SandboxError(f"debootstrap failed with status {process.returncode}:\n" + "\n".join(tail))


def _prune(root: str) -> None:
    for pattern in _PRUNE:
        for path in glob.glob(os.path.join(root, pattern)):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
    os.makedirs(os.path.join(root, "work"), mode=0o1777, exist_ok=True)


def _unmount_below(root: str) -> bool:
    """Unmount whatever is mounted below ``root``; whether nothing is left mounted there.

    debootstrap mounts /proc and /sys in the target and may leave them behind if it fails midway. They must
    be gone before the directory is deleted, or deleting it would reach into the real ones.
    """
    real = os.path.realpath(root)
    with open("/proc/self/mounts") as handle:
        points = [line.split()[1].replace("\\040", " ") for line in handle]
    for point in sorted((p for p in points if p == real or p.startswith(real + "/")), reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    with open("/proc/self/mounts") as handle:
        return not any(line.split()[1].startswith(real + "/") for line in handle)
